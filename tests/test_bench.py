"""The benchmark commands: suite reading and summaries on hand-made records (fast), and one
real `bench` run on the bundled pair (slow) that checks every output file is written."""

from __future__ import annotations

import csv
import json

import pytest

from specviz.cli import main
from specviz.errors import SpecVizError
from specviz.study.bench import ModeRow, PromptItem, read_suite, summarize_mode


def write_suite(path, prompts):
    path.write_text("\n".join(json.dumps({"id": f"t-{i}", "suite": "tiny", "prompt": p})
                              for i, p in enumerate(prompts)) + "\n", encoding="utf-8")
    return path


def test_read_suite_keeps_the_first_limit_prompts(tmp_path):
    suite = write_suite(tmp_path / "s.jsonl", ["a", "b", "c"])
    assert [item.id for item in read_suite(suite, limit=2)] == ["t-0", "t-1"]
    assert read_suite(suite)[2] == PromptItem("t-2", "tiny", "c")


def test_read_suite_names_the_bad_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "prompt": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(SpecVizError, match="bad.jsonl:2"):
        read_suite(bad)


def test_mode_summary_pools_rates_and_takes_median_speedup():
    # draft passes (forward calls) 20/30/50 of which 18/27/45 drafted tokens, the rest catch-up calls
    rows = [ModeRow("a", "s", "static k=5", "static", 10, 4, 20, 6, 6 / 18, 2.5, 1.0, 0.5, True, drafted=18),
            ModeRow("b", "s", "static k=5", "static", 10, 6, 30, 4, 4 / 27, 5 / 3, 1.0, 2.0, False, drafted=27),
            ModeRow("c", "s", "static k=5", "static", 10, 10, 50, 0, 0.0, 1.0, 1.0, 1.0, True, drafted=45)]
    s = summarize_mode(rows)
    assert s.speedup_median == 1.0 and s.speedup_mean == pytest.approx(3.5 / 3)
    assert (s.target_passes_total, s.draft_passes_total) == (20, 100)
    assert s.acceptance_rate == pytest.approx(10 / 90)  # pooled over drafted tokens, not a mean of rates
    assert s.mean_accepted_length == pytest.approx(1 + 10 / 20)
    assert s.lossless == "2/3"


@pytest.mark.slow
def test_bench_writes_csv_summary_and_plots(tmp_path, restore_threads, capsys):
    suite = write_suite(tmp_path / "tiny.jsonl", ["Write a Python function that adds two numbers.",
                                                  "What is the capital of France?"])
    out = tmp_path / "out"
    # One thread: on a shared, busy CPU it is several times faster than two (see bench.set_threads).
    code = main(["bench", "--suite", str(suite), "--limit", "1", "--max-new-tokens", "16", "--threads", "1",
                 "--out", str(out)])
    assert code == 0
    for name in ["results.csv", "summary.md", "summary.json", "oracle_lookahead_hist.png",
                 "oracle_lookahead_hist.html", "lookahead_per_round.png", "lookahead_per_round.html",
                 "comparisons/t-0.json"]:
        assert (out / name).stat().st_size > 0, name

    rows = list(csv.DictReader((out / "results.csv").open(encoding="utf-8")))
    assert {r["mode"] for r in rows} == {"target-only", "static k=5", "heuristic k0=5", "dynamic t=0.4", "oracle"}
    assert {r["prompt_id"] for r in rows} == {"t-0"}  # --limit 1
    assert {"suite", "new_tokens", "target_passes", "draft_passes", "acceptance_rate", "mean_accepted_length",
            "wall_s", "speedup", "lossless"} <= set(rows[0])

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["peak_rss_mb"] > 0 and summary["preset"] == "smollm2-135m-int8"
    (tiny,) = summary["summaries"]
    assert tiny["suite"] == "tiny" and tiny["prompts"] == 1
    assert tiny["dynamic_over_oracle_target_passes"] > 0
    modes = {m["policy"]: m for m in tiny["modes"]}
    assert set(modes) == {"static", "heuristic", "dynamic", "oracle"}
    for m in modes.values():
        assert {"speedup_median", "speedup_mean", "target_passes_total", "target_passes_mean", "draft_passes_total",
                "draft_passes_mean", "acceptance_rate", "mean_accepted_length", "lossless"} <= set(m)
        assert m["lossless"] == "1/1"  # fp32 target, greedy: every policy reproduces target-only decoding
    assert modes["oracle"]["acceptance_rate"] == 1.0  # the oracle drafts only what the target accepts
    assert "## tiny (1 prompts)" in (out / "summary.md").read_text(encoding="utf-8")
    assert "[1/1] tiny t-0" in capsys.readouterr().err
