"""`python -m specviz`: the JSON schema later checks rely on, exports, and clear errors."""

import json
import os
import subprocess
import sys

import pytest

from specviz.cli import main
from specviz.decoding.trace import Comparison


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specviz", *args], check=False, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("args, message", [
    (["--prompt", ""], "The prompt is empty"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "between 1 and"),
    (["--prompt", "hi", "--modes", "dynamic:2"], "threshold"),
    (["--prompt", "hi", "--modes", "static:1000"], "between 1 and 64"),
    (["--prompt", "hi", "--preset", "no-such-pair"], "Unknown preset"),
    (["--prompt", "hi", "--modes", ",".join(f"static:{k}" for k in range(1, 10))], "9 modes given; at most 8"),
    (["--prompt", "hi", "--modes", "oracle,static:5,oracle"], "The mode 'oracle' is named twice"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, message, capsys):
    assert main(["compare", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_presets_lists_the_bundled_default(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m-int8" in out and "default: smollm2-135m-int8" in out


@pytest.mark.slow
def test_compare_writes_the_documented_json_and_exports(tmp_path):
    out = tmp_path / "run.json"
    result = run_cli("compare", "--prompt", "Write a Python function that adds two numbers.",
                     "--max-new-tokens", "24", "--json", str(out), "--sweep", "--charts", str(tmp_path / "charts"),
                     "--no-png")
    assert result.returncode == 0, result.stderr
    for column in ("target passes", "draft passes", "acceptance rate", "mean accepted length", "speedup",
                   "lossless"):
        assert column in result.stdout
    assert "What if" in result.stdout and "dynamic t=0.05" in result.stdout
    data = json.loads(out.read_text())
    assert isinstance(data["preset"], str) and isinstance(data["prompt"], str)
    assert set(data["baseline"]) >= {"token_ids", "text", "target_passes", "wall_s"}
    assert [m["name"] for m in data["modes"]] == ["static k=5", "heuristic k0=5", "dynamic t=0.4", "oracle"]
    for mode in data["modes"]:
        assert set(mode) >= {"name", "params", "token_ids", "text", "target_passes", "draft_passes", "drafted",
                             "accepted", "wall_s", "lossless", "rounds"}
        assert mode["lossless"] is True and mode["token_ids"] == data["baseline"]["token_ids"]
        assert mode["target_passes"] == len(mode["rounds"])
        assert mode["drafted"] == sum(r["lookahead"] for r in mode["rounds"])
        assert mode["draft_passes"] == sum(r["draft_passes"] for r in mode["rounds"]) >= mode["drafted"]
        for r in mode["rounds"]:
            assert set(r) >= {"position", "lookahead", "accepted", "oracle_ideal", "draft_probs"}
            assert isinstance(r["oracle_ideal"], int)
    # the export loads back into the same comparison
    again = Comparison.from_json(out.read_text())
    assert again.to_dict() == data
    charts = {p.name for p in (tmp_path / "charts").iterdir()}
    assert {"comparison.json", "rounds.csv", "lookahead.html", "progress.html", "sweep.html",
            "threshold.html"} <= charts


@pytest.mark.slow
def test_sampling_run_has_no_oracle_and_no_identity_check(tmp_path):
    out = tmp_path / "sampled.json"
    result = run_cli("compare", "--prompt", "Tell me about cats.", "--max-new-tokens", "16",
                     "--temperature", "0.8", "--seed", "3", "--json", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert [m["name"] for m in data["modes"]] == ["static k=5", "heuristic k0=5", "dynamic t=0.4"]
    assert all(m["lossless"] is None for m in data["modes"]) and data["oracle_ideal"] is None


@pytest.mark.slow
def test_a_model_that_cannot_load_is_one_line_and_exit_code_1(tmp_path):
    not_a_folder = tmp_path / "cache-is-a-file"
    not_a_folder.write_text("not a folder")
    result = subprocess.run([sys.executable, "-m", "specviz", "compare", "--prompt", "hi", "--max-new-tokens", "4"],
                            check=False, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "SPECVIZ_CACHE": str(not_a_folder)})
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.rstrip().splitlines()[-1] == errors[0]
    assert "could not be loaded" in errors[0] and "scripts/setup.sh" in errors[0] and str(not_a_folder) in errors[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_an_unexpected_failure_is_one_line_unless_debug(monkeypatch, capsys):
    from specviz import cli

    def broken(args):
        raise RuntimeError("something inside broke\nsecond line")

    monkeypatch.setattr(cli, "cmd_presets", broken)
    assert cli.main(["presets"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: something inside broke" in err and "--debug" in err
    with pytest.raises(RuntimeError):
        cli.main(["--debug", "presets"])


@pytest.mark.slow
def test_pass_costs_prints_the_cost_curve_of_the_bundled_pair(tmp_path):
    """The cost benchmark as a smoke test: every window, the draft's call, ratios, the CPU named."""
    out = tmp_path / "curves.json"
    result = run_cli("pass-costs", "--preset", "smollm2-135m-int8", "--setups", "fp32", "--context", "16",
                     "--repeats", "1", "--json", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "CPU: " in result.stdout and "target, 20 new tokens" in result.stdout
    assert "draft, one-token call" in result.stdout
    (curve,) = json.loads(out.read_text())
    assert curve["windows"] == [1, 2, 4, 8, 12, 16, 20] and curve["setup"].startswith("target fp32")
    assert main(["pass-costs", "--setups", "fp64", "--preset", "qwen2.5-coder-1.5b"]) == 2  # one-line error
    assert main(["pass-costs", "--setups", "bf16", "--preset", "smollm2-135m-int8"]) == 2  # a bundled target is fp32
    from specviz.pair import cpu, kquant
    from specviz.study.passcosts import _setups

    assert _setups("auto", "smollm2-135m-int8") == ["fp32", "fp32-packed"]
    assert ("kquant" in _setups("auto", "qwen2.5-coder-1.5b")) == kquant.cpu_can(cpu.machine().flags)
