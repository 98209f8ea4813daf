"""`python -m specviz study`: the pure figures and the verdict rules on hand-made records (fast),
and one real run on the bundled pair (slow) that checks the report, resuming and --report-only."""

from __future__ import annotations

import csv
import json

import pytest

from specviz.cli import main
from specviz.decoding.policies import CostAware, Dynamic, PassCosts
from specviz.explain.hindsight import best_dynamic
from specviz.explain.sweep import replay
from specviz.study import runner as study
from specviz.study.records import pooled_costs
from specviz.study.report import (
    ModeResult,
    PromptResult,
    RoundRecord,
    judged_tokens,
    jump_stats,
    majority,
    modeled_time,
    percentile,
    prompt_wins,
    report_markdown,
    suite_figures,
)
from specviz.study.runner import ResultStore

# ---- pure functions ----------------------------------------------------------------------


def test_judged_tokens_stop_at_the_first_rejection():
    rounds = [RoundRecord(4, 2, [0.9, 0.8, 0.3, 0.7]),  # two accepted, the third rejected, the fourth unjudged
              RoundRecord(2, 2, [0.6, 0.5]),  # all accepted
              RoundRecord(0, 0, [])]
    assert [(j.prob, j.accepted) for j in judged_tokens(rounds)] == [(0.9, True), (0.8, True), (0.3, False),
                                                                      (0.6, True), (0.5, True)]


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 90) == 5
    assert percentile([0, 10], 10) == pytest.approx(1.0)


def test_jump_stats_measures_distribution_and_change():
    j = jump_stats([[1, 6, 2], [5, 5]])
    assert j.rounds == 5 and j.prompts == 2
    assert j.histogram["1"] == 1 and j.histogram["5"] == 2 and j.histogram["6-10"] == 1
    assert (j.modal_value, j.modal_share) == (5, 0.4)
    assert j.changes == 3  # within prompts only: 1->6, 6->2, 5->5
    assert j.mean_abs_change == pytest.approx((5 + 4 + 0) / 3)
    assert j.share_change_2_plus == pytest.approx(2 / 3)
    assert j.jumps_around


@pytest.mark.parametrize(("lookaheads", "jumps"), [
    ([[3, 3, 3, 4]], False),  # 75% of rounds at k=3: a fixed k would match them
    ([[2, 3, 2, 3, 2, 3]], False),  # 50% at the most common value is not "fewer than half"
    ([[1, 1, 2, 2, 3, 3, 4, 4]], False),  # spread out, but moving less than a token per round
    ([[7]], False),  # one round: no change to measure
    ([[2, 3, 4, 3, 2, 3, 4]], True),  # 43% at k=3, one token per round exactly
    ([[1, 2, 3, 1, 2, 3]], True),
])
def test_the_jump_rule(lookaheads, jumps):
    assert jump_stats(lookaheads).jumps_around is jumps


def test_older_records_are_priced_with_pooled_per_pass_costs():
    r = make_result("p", "s", "a", 0, static=[(5, 2)] * 4, t_draft=0.01, t_verify=0.1)
    assert not r.prefill_timed_apart  # made as records were before the prefill was timed: None there
    costs = pooled_costs([r])
    assert not costs.prefill_apart
    assert costs.draft_call_s == pytest.approx(0.01) and costs.verify_s == pytest.approx(0.1)
    assert costs.target_token_s == pytest.approx(0.05)  # make_result: 0.05 s per target-only token
    assert costs.draft_to_token_pass == pytest.approx(0.2)
    assert modeled_time(costs, r, r.mode("static")) == pytest.approx(4 * 0.1 + 20 * 0.01)
    assert costs.target_only_modeled_time(40) == pytest.approx(40 * 0.05)
    assert pooled_costs([]).draft_to_token_pass is None


def long_prefill_records(timed: bool) -> list[PromptResult]:
    """A summarization-like suite: a short prompt and a long one whose passes that read it take 40x
    longer. `timed=False`: the same runs recorded as before the prefill was timed apart."""
    return [make_result("p", "summarization", pid, i, prefill=prefill, timed=timed, static=[(5, 2)] * 10,
                        dynamic=[(3, 2)] * 12)
            for i, (pid, prefill) in enumerate((("short", (0.2, 0.3, 0.1)), ("long", (8.0, 12.0, 4.0))))]


def test_a_long_prefill_does_not_inflate_the_per_call_costs():
    apart = pooled_costs(long_prefill_records(True))
    pooled = pooled_costs(long_prefill_records(False))
    assert apart.prefill_apart and not pooled.prefill_apart
    # make_mode's per-pass costs, whatever the prompt's length
    assert apart.draft_call_s == pytest.approx(0.01) and apart.verify_s == pytest.approx(0.06)
    assert apart.target_token_s == pytest.approx(0.05)
    # the prefill passes cost per prompt: the mean over the two prompts (and their two policies)
    assert apart.draft_prefill_s == pytest.approx((0.1 + 4.0) / 2)
    assert apart.first_verify_s == pytest.approx(0.06 + (0.3 + 12.0) / 2)
    assert apart.target_prefill_s == pytest.approx(0.05 + (0.2 + 8.0) / 2)
    # pooled, the long prompt's prefills are spread over every call and pass
    assert pooled.draft_call_s > 5 * apart.draft_call_s and pooled.verify_s > 2 * apart.verify_s
    # Over the suite, the modeled times give back the measured ones: target-only's, and every
    # policy's passes taken together (the prefill's mean is a per-prompt cost, once per prompt)
    records = long_prefill_records(True)
    figures = suite_figures("p", "summarization", records)
    assert figures.target_only_modeled_s == pytest.approx(sum(r.target_only_wall_s for r in records))
    assert sum(t.modeled_s for t in figures.totals.values()) == pytest.approx(
        sum(m.draft_s + m.verify_s for r in records for m in r.modes))
    static = records[1].mode("static")  # 10 rounds, 50 draft calls and the prefill call
    assert modeled_time(apart, records[1], static) == pytest.approx(
        apart.first_verify_s + 9 * 0.06 + apart.draft_prefill_s + 50 * 0.01)


def test_prompt_wins_counts_strict_wins_and_ties():
    rows = [make_result("p", "s", "a", 0, dynamic=[(3, 2)] * 5, heuristic=[(5, 2)] * 5),  # dynamic: fewer drafts
            make_result("p", "s", "b", 1, dynamic=[(5, 2)] * 5, heuristic=[(5, 2)] * 5),  # tie
            make_result("p", "s", "c", 2, dynamic=[(5, 2)] * 6, heuristic=[(5, 2)] * 5)]
    wins = prompt_wins(rows, "dynamic", "heuristic", pooled_costs(rows))
    assert (wins.first, wins.second, wins.ties) == (1, 1, 1)


def test_majority_means_more_than_half():
    assert majority([True, True, False]) and not majority([True, False]) and not majority([])


# ---- the verdicts, from hand-made records ---------------------------------------------------


Prefill = tuple[float, float, float]  # what reading the prompt adds: target-only, first verification, draft call


def make_mode(policy: str, label: str, rounds: list[tuple[int, int]], t_draft: float, t_verify: float,
              prefill: Prefill | None = None, timed: bool = True) -> ModeResult:
    """A policy's record: `t_draft` per drafted token, `t_verify` per round; with `prefill`, the
    first verification and a draft call of its own read the 12-token prompt (timed apart if `timed`)."""
    records = [RoundRecord(k, a, [0.9] * a + [0.2] * (k - a)) for k, a in rounds]
    drafted = sum(k for k, _ in rounds)
    _, verify_extra, draft_call = prefill or (0.0, 0.0, 0.0)
    draft_s, verify_s = drafted * t_draft + draft_call, len(rounds) * t_verify + verify_extra
    mode = ModeResult(label, policy, 40, len(rounds), drafted + (prefill is not None), sum(a for _, a in rounds),
                      draft_s + verify_s, draft_s, verify_s, True, records)
    if prefill and timed:
        mode.draft_prefill_s, mode.first_verify_s = draft_call, t_verify + verify_extra
    return mode


def make_result(preset: str, suite: str, prompt_id: str, index: int, t_draft: float = 0.01, t_verify: float = 0.06,
                prefill: Prefill | None = None, timed: bool = True, **policies: list[tuple[int, int]]) -> PromptResult:
    """A prompt's record: target-only at 0.05 s a token (its first pass plus `prefill`'s first figure)."""
    labels = {"static": "static k=5", "heuristic": "heuristic k0=5", "dynamic": "dynamic t=0.4", "oracle": "oracle"}
    modes = [make_mode(p, labels[p], rounds, t_draft, t_verify, prefill, timed) for p, rounds in policies.items()]
    target_extra = prefill[0] if prefill else 0.0
    return PromptResult(preset, suite, prompt_id, index, 40, 12, 40, 40 * 0.05 + target_extra, 9.0, False, 1,
                        "2026-01-01T00:00:00+00:00", modes,
                        target_only_prefill_s=0.05 + target_extra if prefill and timed else None)


def claims_hold(preset: str, suite: str, index: int, prefill: Prefill | None = None) -> PromptResult:
    jumpy = [1, 6, 2, 7, 0, 5, 3, 6]  # 8 rounds, 30 tokens: fewer than static's 10 / 50
    return make_result(preset, suite, f"{suite}-{index}", index, prefill=prefill, static=[(5, 2)] * 10,
                       heuristic=[(5, 3)] * 12, dynamic=[(3, 2)] * 11, oracle=[(k, k) for k in jumpy])


def claims_fail(preset: str, suite: str, index: int) -> PromptResult:
    return make_result(preset, suite, f"{suite}-{index}", index, static=[(5, 2)] * 10, heuristic=[(5, 3)] * 12,
                       dynamic=[(6, 2)] * 14, oracle=[(3, 3)] * 12)


def verdict_row(report: str, start: str) -> list[str]:
    line = next(line for line in report.splitlines() if line.startswith(f"| {start}"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def test_verdicts_follow_the_numbers_both_ways():
    records = [make(preset, suite, i) for preset, make in (("good-pair", claims_hold), ("bad-pair", claims_fail))
               for suite in ("coding", "questions") for i in range(2)]
    report = report_markdown(records, [], "results.jsonl")
    reproduced, failed = "**reproduced**", "**not reproduced on this pair**"
    assert verdict_row(report, "A fixed lookahead wastes work") == [reproduced, failed]
    assert verdict_row(report, "The oracle's lookahead jumps around") == [reproduced, failed]
    assert verdict_row(report, "The dynamic rule") == [reproduced, failed]
    # the figures behind them are in the report: the suite sums in the study's format ...
    assert "| static k=5 | 38 | 192 | 10 | 50 | 20 | 100 |" in report
    assert "| oracle | 27 | 129 | 8 | 30 | 16 | 60 |" in report
    assert "| oracle | 27 | 129 | 12 | 36 | 24 | 72 |" in report
    # ... the per-prompt wins, and the calibration (make_mode: accepted tokens 0.9, rejected 0.2)
    assert "Prompts won, by measured time: dynamic 2, heuristic 0, ties 0; by modeled time: dynamic 2, heuristic 0, " \
        "ties 0" in report
    assert "Prompts won, by measured time: dynamic 0, heuristic 2, ties 0; by modeled time: dynamic 0, heuristic 2, " \
        "ties 0" in report
    assert "separates accepted from rejected tokens well (AUC 1.00" in report
    for rule in ("fewer target passes **and** fewer draft passes", "50% of the oracle's rounds", "*modeled* time"):
        assert rule in report


def test_a_real_pair_is_judged_by_its_wall_clock_and_a_bundled_one_by_modeled_time():
    """The same records, where the passes favour dynamic but the wall clock the heuristic (its
    runs took three times as long as their passes say): the bundled pair's verdict follows the
    modeled time, a pair with a draft model of its own the measured time."""
    def slow_dynamic(preset):
        records = [claims_hold(preset, "coding", i) for i in range(3)]
        for r in records:
            r.mode("dynamic").wall_s *= 3
        return records

    bundled, real = "smollm2-135m-int8", "qwen2.5-coder-1.5b"
    report = report_markdown(slow_dynamic(bundled) + slow_dynamic(real), [], "results.jsonl")
    assert verdict_row(report, "The dynamic rule") == ["**reproduced**", "**not reproduced on this pair**"]
    bundled_part, real_part = report.split(f"## {real}")[0].split(f"## {bundled}")[-1], report.split(f"## {real}")[-1]
    assert "For this pair **modeled** time decides" in bundled_part and "(modeled time): **reproduced**" in bundled_part
    assert "For this pair **measured** time decides" in real_part
    assert "Dynamic does not beat the heuristic here by measured time" in real_part
    # the median prompt's measured speedup: target-only 2.0 s over dynamic's 3 x (11 x 0.09 s)
    figures = suite_figures(real, "coding", slow_dynamic(real))
    assert figures.median_measured_speedup("dynamic") == pytest.approx(2.0 / (3 * 11 * 0.09))
    assert f"The median prompt ran {2.0 / (3 * 11 * 0.09):.2f}x as fast with dynamic as with the target alone " \
        "(not faster in wall-clock time)" in real_part


def test_one_suite_of_three_is_not_a_majority():
    records = [claims_hold("p", "coding", 0), claims_fail("p", "questions", 0), claims_fail("p", "summarization", 0)]
    report = report_markdown(records, [], "results.jsonl")
    assert verdict_row(report, "The dynamic rule") == ["**not reproduced on this pair**"]
    assert "Dynamic wins in 1 of 3 suites" in report
    assert verdict_row(report, "A fixed lookahead wastes work") == ["**reproduced**"]  # decided on coding only


def test_the_report_says_which_suites_timed_the_prefill_apart():
    prefill = (0.2, 0.3, 0.1)
    records = [claims_hold("new-pair", "coding", 0, prefill), claims_hold("new-pair", "questions", 0, prefill),
               claims_hold("new-pair", "questions", 1),  # an older record: its suite is priced pooled
               claims_hold("old-pair", "coding", 0)]
    report = report_markdown(records, [], "results.jsonl")
    assert "new-pair: coding; not questions; old-pair: none of its suites" in report
    # the costs table: coding's prefill passes apart, at make_result's figures; the others pooled. The
    # oracle's round that drafted nothing is priced as a one-token pass (50 ms), so the other passes
    # carry its extra 10 ms: 60.3 ms a verification pass
    assert ("| coding | yes (1 of 1 record) | 10.0 ms | 100.0 ms | 50.0 ms | 250.0 ms | 60.3 ms | 360.0 ms "
            "| 0.20 | 1.21 |") in report
    assert "| questions | no (1 of 2 records) |" in report and "| coding | no (0 of 1 record) |" in report
    assert "The prefill was timed apart in coding; not in questions" in report
    assert "python -m specviz study --preset old-pair --force" in report
    assert verdict_row(report, "The dynamic rule") == ["**reproduced**", "**reproduced**"]  # per prompt, alike


def test_without_the_coding_suite_the_headline_is_not_checked():
    report = report_markdown([claims_hold("p", "questions", 0)], [], "results.jsonl")
    assert verdict_row(report, "A fixed lookahead wastes work") == ["not checked"]


def test_partial_records_are_left_out():
    partial = claims_fail("p", "coding", 1)
    partial.partial = True
    report = report_markdown([claims_hold("p", "coding", 0), partial], [], "results.jsonl")
    assert "Left out: 1 partial records" in report
    assert "| static k=5 | 38 | 192 | 10 | 50 | 10 | 50 |" in report


def test_store_resumes_skips_a_torn_line_and_forgets_on_force(tmp_path):
    path = tmp_path / "results.jsonl"
    store = ResultStore(path)
    first, second = claims_hold("p", "coding", 0), claims_hold("p", "coding", 1)
    store.append(first)
    store.append(second)
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"preset": "p", "suite": "cod')  # killed mid-write
    again = ResultStore(path)
    assert again.skipped_lines == 1 and again.done(first.key) and again.done(second.key)
    assert again.records[first.key] == first  # the record survives the round trip whole
    assert again.drop([first.key]) == 1
    assert not ResultStore(path).done(first.key) and ResultStore(path).done(second.key)


def test_bad_options_are_one_line_errors(capsys, tmp_path):
    assert main(["study", "--limit", "0", "--out", str(tmp_path)]) == 2
    assert main(["study", "--report-only", "--out", str(tmp_path / "nothing")]) == 2
    assert main(["study", "--preset", "no-such-pair", "--limit", "1", "--out", str(tmp_path)]) == 2
    assert main(["study", "--modes", "static:5,telepathy", "--limit", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--limit must be at least 1" in err and "No results in" in err and "Unknown preset" in err
    assert "Unknown mode 'telepathy'" in err and not (tmp_path / "results.jsonl").exists()


# ---- one real run on the bundled pair ------------------------------------------------------


@pytest.mark.slow
def test_study_runs_the_modes_it_is_given_and_says_what_ran(tmp_path, restore_threads, capsys):
    out = tmp_path / "out"
    assert main(["study", "--preset", "smollm2-135m-int8", "--suites", study.DEFAULT_SUITES[0], "--limit", "2",
                 "--max-new-tokens", "16", "--threads", "1", "--modes", "heuristic:5,dynamic:0.4,costaware,oracle",
                 "--out", str(out)]) == 0
    records = [PromptResult.from_dict(json.loads(line))
               for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [m.label for m in records[0].modes] == ["heuristic k0=5", "dynamic t=0.4", "cost-aware", "oracle"]
    assert all(m.lossless for r in records for m in r.modes)
    report = (out / "STUDY.md").read_text(encoding="utf-8")
    assert "modes heuristic k0=5, dynamic t=0.4, cost-aware, oracle" in report
    assert "smollm2-135m-int8 ran as: target fp32" in report  # the set-up, from the loaded pair

    # each prompt's whole comparison is kept beside its record: the what-if replay reproduces the
    # cost-aware rule and dynamic 0.4 on it, pass for pass
    costs = pooled_costs(records)
    for record in records:
        saved = study.load_comparison(study.comparison_path(out, record.preset, record.suite, record.prompt_id, 16))
        traces = {t.policy: t for t in saved.comparison.traces}
        prices = traces["costaware"].params["prices"]
        rules = {"costaware": CostAware(PassCosts.from_dict(prices)),
                 "dynamic": Dynamic(0.4)}
        for policy, rule in rules.items():
            predicted = replay(saved.comparison, rule, eos_ids=saved.eos_ids)
            assert (predicted.target_passes, predicted.draft_passes) == (
                traces[policy].target_passes, traces[policy].draft_passes), policy
    # section 5: the rule against the others and the best threshold in hindsight, which is no worse
    # than 0.4 (one of the thresholds it tries)
    section = report.split("### 5. The cost-aware rule")[1]
    (row,) = [line for line in section.splitlines() if line.startswith("| coding |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    best = best_dynamic(list(study.saved_runs(out, records).values()), costs)
    assert cells[4].startswith(f"t={best.threshold:g}:")
    dynamic_modeled = sum(costs.modeled_time(r.mode("dynamic").target_passes, r.mode("dynamic").draft_passes,
                                             r.prompt_tokens) for r in records)
    assert best.modeled_s <= dynamic_modeled + 1e-9
    cost_aware_modeled = sum(modeled_time(costs, r, r.mode("costaware")) for r in records)
    assert cells[5] == f"{cost_aware_modeled / best.modeled_s:.3f}"
    assert verdict_row(report, "The cost-aware rule") in (["**holds**"], ["**does not hold**"])


@pytest.mark.slow
def test_study_runs_resumes_and_reports(tmp_path, restore_threads, capsys):
    out = tmp_path / "out"
    command = ["study", "--preset", "smollm2-135m-int8", "--suites", study.DEFAULT_SUITES[0],
               "--max-new-tokens", "24", "--threads", "1", "--out", str(out)]
    # A run that stopped after its first prompt, as an interrupted one does ...
    assert main([*command, "--limit", "1"]) == 0
    err = capsys.readouterr().err
    assert "0 of 1 prompts already done" in err and "[1/1] smollm2-135m-int8 coding code-01" in err
    first = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(first) == 1

    # ... resumes with the prompt it had not done, and only that one
    assert main([*command, "--limit", "2"]) == 0
    err = capsys.readouterr().err
    assert "1 of 2 prompts already done" in err
    assert "[1/1] smollm2-135m-int8 coding code-02" in err and "code-01:" not in err and "left" in err
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[0] == first[0] and len(lines) == 2

    records = [PromptResult.from_dict(json.loads(line)) for line in lines]
    assert [r.prompt_id for r in records] == ["code-01", "code-02"]
    for r in records:
        assert r.max_new_tokens == 24 and not r.partial and r.torch_threads == 1
        assert {m.policy for m in r.modes} == {"static", "heuristic", "dynamic", "oracle"}
        assert all(m.lossless for m in r.modes)
        # the prompt's prefill is recorded apart: the draft's call, the target's first passes
        assert r.target_only_prefill_s > 0
        assert all(0 < m.draft_prefill_s < m.draft_s and 0 < m.first_verify_s <= m.verify_s for m in r.modes)
        oracle = r.mode("oracle")
        assert all(rd.accepted == rd.lookahead for rd in oracle.rounds)
    rows = list(csv.DictReader((out / "results.csv").open(encoding="utf-8")))
    assert len(rows) == 2 * 5 and {r["mode"] for r in rows} >= {"target-only", "oracle"}

    report = (out / "STUDY.md").read_text(encoding="utf-8")
    header = report.split("## Verdicts")[0]
    assert "python -m specviz study --preset smollm2-135m-int8" in header and "--limit 2" in header
    assert "torch threads (`torch.get_num_threads()`) 1" in header and "cores" in header and "torch 2." in header
    for claim in ("A fixed lookahead wastes work", "The oracle's lookahead jumps around", "The dynamic rule"):
        (cell,) = verdict_row(report, claim)
        assert cell in ("**reproduced**", "**not reproduced on this pair**")
    # the verdict is the rule applied to the recorded numbers
    static = sum(r.mode("static").target_passes for r in records), sum(r.mode("static").draft_passes for r in records)
    oracle = sum(r.mode("oracle").target_passes for r in records), sum(r.mode("oracle").draft_passes for r in records)
    expected = "**reproduced**" if oracle[0] < static[0] and oracle[1] < static[1] else \
        "**not reproduced on this pair**"
    assert verdict_row(report, "A fixed lookahead wastes work") == [expected]
    assert f"| static k=5 | 38 | 192 | {records[0].mode('static').target_passes} " in report

    # once everything is done, a run recomputes nothing and loads no model
    assert main([*command, "--limit", "2"]) == 0
    err = capsys.readouterr().err
    assert "2 of 2 prompts already done" in err and "[1/" not in err and "Loading" not in err
    assert (out / "results.jsonl").read_text(encoding="utf-8").splitlines() == lines

    # the report is regenerated from the files alone
    (out / "STUDY.md").unlink()
    assert main(["study", "--report-only", "--out", str(out), "--report", str(tmp_path / "docs" / "STUDY.md")]) == 0
    again = (tmp_path / "docs" / "STUDY.md").read_text(encoding="utf-8")
    assert again.split("## Verdicts")[1] == report.split("## Verdicts")[1]
    assert "](../out/results.jsonl)" in again and "report regenerated with `python -m specviz study --report-only" \
        in again
