"""`python -m specviz study --ray` (specviz/study/cluster.py): the same records from Ray workers as
from one process, a worker killed mid-prompt losing nothing and doubling nothing, and --ray
without Ray as one line.

One local Ray serves the whole module, so its start is paid once per test run: two CPUs, for two
workers of one torch thread each. The workers build a tiny pair (a one-layer Llama, a jittered
copy of it as the draft, a word-level tokenizer) in place of a preset's: `cluster.PAIR_FACTORY` is
set to a function of this module, which Ray sends them by name. They import it with tests/ and the
checkout on their PYTHONPATH, set while Ray starts (its processes, and their workers, inherit it).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import pytest

from specviz.study import cluster
from specviz.study import runner as study
from specviz.study.records import PromptResult

ROOT = Path(__file__).resolve().parents[1]
PRESET = "smollm2-135m-int8"  # a preset's name for the command line; every process builds the tiny pair under it
MAX_NEW_TOKENS = 12
WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(30)]
PROMPTS = {"t-01": "w1 w2 w3 w4", "t-02": "w5 w6 w7 w8 w9", "t-03": "w10 w11 w12"}
CRASH_WORD = "w29"  # a prompt with this word kills its worker, once (crashing_tiny_pair)
# The report's verdicts that follow from passes alone; the others weigh measured times
CLAIMS = ("A fixed lookahead wastes work", "The oracle's lookahead jumps around")


# ---- the tiny pair, built alike in every process -----------------------------------------------


def tiny_tokenizer(kind: type | None = None) -> object:
    """A word-level tokenizer of WORDS, built here (no download); `kind`: a PreTrainedTokenizerFast class."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = WhitespaceSplit()
    return (kind or PreTrainedTokenizerFast)(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")


def tiny_pair(preset: str, tokenizer: object | None = None):
    """The pair every process of these tests computes on: the same seeds, so the same weights in each."""
    import torch

    from specviz.pair.models import build_pair
    from tests.conftest import noisy_copy, tiny_llama

    target = tiny_llama(0, vocab=len(WORDS), sharpness=2.0)
    return build_pair(preset, target, noisy_copy(target, 0.2, seed=5), tokenizer or tiny_tokenizer(),
                      device=torch.device("cpu"))


def crashing_tiny_pair(marker: str, preset: str):
    """tiny_pair, except that the first worker to compute a prompt with CRASH_WORD dies on it: its
    process exits at once, as a killed one does, mid-prompt (after the draft's first proposal, when
    its text is first shown). `marker` is a file made at that moment, so that it happens once over
    all the workers: the prompt's next worker computes it."""
    from transformers import PreTrainedTokenizerFast

    doomed = {"now": False}

    class DoomedTokenizer(PreTrainedTokenizerFast):
        def __call__(self, text=None, *args, **kwargs):
            doomed["now"] = isinstance(text, str) and CRASH_WORD in text.split()
            return super().__call__(text, *args, **kwargs)

        def decode(self, *args, **kwargs):
            if doomed["now"]:
                doomed["now"] = False
                try:
                    Path(marker).touch(exist_ok=False)
                except FileExistsError:
                    pass  # a worker died on it already
                else:
                    os._exit(1)
            return super().decode(*args, **kwargs)

    return tiny_pair(preset, tiny_tokenizer(DoomedTokenizer))


# ---- helpers ------------------------------------------------------------------------------------


def write_suite(folder: Path, prompts: dict[str, str]) -> Path:
    path = folder / "coding.jsonl"
    path.write_text("".join(json.dumps({"id": pid, "suite": "coding", "prompt": prompt}) + "\n"
                            for pid, prompt in prompts.items()), encoding="utf-8")
    return path


def study_command(suite: Path, out: Path, *options: str) -> list[str]:
    return ["study", "--preset", PRESET, "--suites", str(suite), "--max-new-tokens", str(MAX_NEW_TOKENS),
            "--out", str(out), *options]


def records(out: Path) -> list[PromptResult]:
    return [PromptResult.from_dict(json.loads(line))
            for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def decisions(out: Path, r: PromptResult) -> dict[str, object]:
    """A record without its times: every run's tokens (from the comparison saved beside it), passes,
    acceptances and rounds."""
    saved = study.load_comparison(study.comparison_path(out, r.preset, r.suite, r.prompt_id, r.max_new_tokens))
    return {"prompt": (r.index, r.prompt_tokens, r.new_tokens, r.partial),
            "modes": [(m.label, m.new_tokens, m.target_passes, m.draft_passes, m.accepted, m.lossless,
                       [(rd.lookahead, rd.accepted, rd.ideal) for rd in m.rounds]) for m in r.modes],
            "tokens": [saved.comparison.baseline.token_ids] + [t.token_ids for t in saved.comparison.traces],
            "eos_ids": sorted(saved.eos_ids)}


def verdict(out: Path, claim: str) -> list[str]:
    report = (out / "STUDY.md").read_text(encoding="utf-8")
    line = next(line for line in report.splitlines() if line.startswith(f"| {claim}"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of two CPUs for the module; the study's driver finds it started and leaves it running."""
    ray = pytest.importorskip("ray", reason="Ray comes with requirements.lock (the study's --ray)")
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)] + ([before] if before else []))
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 * 1024 * 1024, _node_ip_address="127.0.0.1")
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    yield ray
    ray.shutdown()


# ---- the tests ----------------------------------------------------------------------------------
# The option checks first: they hide Ray from this process for a moment, before the module's Ray starts.


def test_ray_options_are_checked_first_and_a_missing_ray_is_one_line(tmp_path, monkeypatch, capsys):
    from specviz.cli import main

    out = str(tmp_path / "out")
    assert main(["study", "--ray-actors", "2", "--out", out]) == 2
    assert main(["study", "--ray", "--ray-threads", "0", "--out", out]) == 2
    assert main(["study", "--ray", "--threads", "2", "--out", out]) == 2
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where Ray is not installed
    assert main(["study", "--ray", "--preset", PRESET, "--limit", "1", "--out", out]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --ray-threads and --ray-actors go with --ray.",
        "error: --ray-threads must be at least 1.",
        "error: With --ray, the workers' torch threads are set by --ray-threads, not --threads.",
        "error: --ray needs Ray: pip install -r requirements-study.txt"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_two_ray_workers_record_what_one_process_records(local_ray, tmp_path, monkeypatch, restore_threads,
                                                         capsys):
    from specviz.cli import main

    pair = tiny_pair(PRESET)  # the one process's pair: the run in one process loads it by the preset's name
    monkeypatch.setattr("specviz.pair.models.get_pair", lambda name, progress=None: pair)
    monkeypatch.setattr("specviz.decoding.pipeline.get_pair", lambda name, progress=None: pair)
    monkeypatch.setattr(cluster, "PAIR_FACTORY", tiny_pair)  # each worker builds its own
    suite = write_suite(tmp_path, PROMPTS)
    one, on_ray = tmp_path / "one", tmp_path / "ray"

    assert main(study_command(suite, one, "--threads", "1")) == 0
    assert main(study_command(suite, on_ray, "--ray", "--ray-actors", "2", "--ray-threads", "1")) == 0
    err = capsys.readouterr().err
    assert "2 worker(s) per preset, 1 torch thread(s) each" in err and "[3/3] " in err
    assert "a Ray worker died" not in err

    by_one, by_ray = ({r.prompt_id: r for r in records(out)} for out in (one, on_ray))
    assert sorted(by_ray) == sorted(by_one) == sorted(PROMPTS)
    for prompt_id in PROMPTS:
        assert decisions(on_ray, by_ray[prompt_id]) == decisions(one, by_one[prompt_id]), prompt_id
    assert all(r.torch_threads == 1 and not r.partial for r in by_ray.values())
    assert all(m.lossless for r in by_ray.values() for m in r.modes)  # fp32 greedy: every policy is target-only's
    for claim in CLAIMS:
        assert verdict(on_ray, claim) == verdict(one, claim)
    (invocation,) = json.loads((on_ray / "meta.json").read_text(encoding="utf-8"))["invocations"]
    assert invocation["ray"] == {"address": "local", "workers": 2, "threads": 1, "gpus": 0}
    assert invocation["prompts_run"] == 3 and invocation["torch_threads"] == 1


@pytest.mark.slow
def test_a_worker_killed_mid_prompt_loses_nothing_and_doubles_nothing(local_ray, tmp_path, monkeypatch, capsys):
    from specviz.cli import main

    marker = tmp_path / "a-worker-died"
    monkeypatch.setattr(cluster, "PAIR_FACTORY", functools.partial(crashing_tiny_pair, str(marker)))
    prompts = {"k-01": "w1 w2 w3", "k-02": f"w4 {CRASH_WORD} w5", "k-03": "w6 w7 w8 w9"}
    out = tmp_path / "out"
    command = study_command(write_suite(tmp_path, prompts), out, "--ray", "--ray-actors", "2")

    assert main(command) == 0
    err = capsys.readouterr().err
    assert marker.is_file()  # a worker did die, on k-02
    assert f"a Ray worker died on {PRESET} coding k-02" in err and "redone on a new worker" in err
    assert "[3/3] " in err and "left for the next run" not in err
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(r.prompt_id for r in records(out)) == sorted(prompts)  # every prompt, each once
    for r in records(out):
        assert not r.partial and all(m.lossless for m in r.modes)
        assert study.comparison_path(out, r.preset, r.suite, r.prompt_id, r.max_new_tokens).is_file()

    # everything is done: a second run computes nothing, and starts no worker
    assert main(command) == 0
    err = capsys.readouterr().err
    assert "3 of 3 prompts already done" in err and "; 0 to run" in err
    assert "worker(s) per preset" not in err and "[1/" not in err
    assert (out / "results.jsonl").read_text(encoding="utf-8").splitlines() == lines
