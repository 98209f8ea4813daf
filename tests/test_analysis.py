"""The numbers behind the explaining charts, and the charts' plotted values, on hand-made comparisons."""

from __future__ import annotations

import pytest
from test_plots import make_comparison, make_trace

from specviz.decoding.trace import Baseline, Comparison, DraftAlongReference, Round, Trace
from specviz.explain.analysis import (
    Judged,
    auc,
    calibration_bins,
    calibration_sentence,
    judged_in_round,
    judged_tokens,
    measured_draft_cost_ratio,
    measured_passes,
    position_shares,
    split_at,
    work_split,
)
from specviz.explain.sweep import sweep
from specviz.ui.explain_plots import calibration_figure, explain_figures, pass_cost_figure, position_figure, work_figure
from specviz.ui.export import charts


def a_round(index: int, position: int, probs: list[float], accepted: int, draft_s: float = 0.0,
            verify_s: float = 0.0) -> Round:
    return Round(index=index, position=position, budget=len(probs), draft_ids=list(range(len(probs))),
                 draft_probs=probs, accepted=accepted, target_id=7, draft_s=draft_s, verify_s=verify_s)


def calibration_comparison() -> Comparison:
    """Dynamic: judged (0.95 ok, 0.85 ok, 0.35 no) | (0.9 ok, 0.2 ok, 0.15 no; 0.1 never judged).
    Static: (0.55 no; 0.5, 0.45 never judged). The oracle's tokens are left out."""
    dynamic = Trace(policy="dynamic", label="dynamic t=0.4", params={"assistant_confidence_threshold": 0.4},
                    token_ids=[0] * 9, rounds=[a_round(0, 0, [0.95, 0.85, 0.35], 2, 0.3, 0.1),
                                               a_round(1, 3, [0.9, 0.2, 0.15, 0.1], 2, 0.4, 0.1)],
                    wall_s=1.0, stop_reason="eos")
    static = Trace(policy="static", label="static k=3", params={"num_assistant_tokens": 3}, token_ids=[0] * 1,
                   rounds=[a_round(0, 0, [0.55, 0.5, 0.45], 0, 0.2, 0.2)], wall_s=0.5, stop_reason="eos")
    oracle = Trace(policy="oracle", label="oracle", params={}, token_ids=[0] * 3,
                   rounds=[a_round(0, 0, [0.05, 0.05], 2)], wall_s=0.2, stop_reason="eos")
    return Comparison(preset="tiny", prompt="p", max_new_tokens=16, traces=[dynamic, static, oracle],
                      baseline=Baseline(token_ids=[0] * 9, wall_s=2.0, stop_reason="eos"))


# ---- judged tokens, bins, AUC ---------------------------------------------------------------


def test_judged_tokens_stop_at_the_first_rejection():
    r = a_round(0, 0, [0.9, 0.8, 0.7, 0.6], accepted=1)
    assert judged_in_round(r) == [Judged(0.9, True), Judged(0.8, False)]  # 0.7 and 0.6 never judged
    assert judged_in_round(a_round(0, 0, [0.9, 0.8], accepted=2)) == [Judged(0.9, True), Judged(0.8, True)]
    assert judged_in_round(a_round(0, 0, [], accepted=0)) == []


def test_judged_tokens_skip_the_oracle():
    samples = judged_tokens(calibration_comparison())
    assert sorted((s.prob, s.accepted) for s in samples) == [
        (0.15, False), (0.2, True), (0.35, False), (0.55, False), (0.85, True), (0.9, True), (0.95, True)]
    assert len(judged_tokens(calibration_comparison(), skip=())) == 9


def test_calibration_bins_count_and_share():
    bins = calibration_bins(judged_tokens(calibration_comparison()), bins=5)
    assert [(b.low, b.high) for b in bins] == [(0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0)]
    assert [b.count for b in bins] == [1, 2, 1, 0, 3]
    assert [b.accepted for b in bins] == [0, 1, 0, 0, 3]
    assert [b.share for b in bins] == [0.0, 0.5, 0.0, None, 1.0]
    edge = calibration_bins([Judged(1.0, True), Judged(0.0, False)], bins=10)
    assert edge[-1].count == 1 and edge[0].count == 1


def test_auc_is_the_rank_statistic():
    # accepted probs 0.2, 0.85, 0.9, 0.95; rejected 0.15, 0.35, 0.55. Pairs where accepted > rejected:
    # 0.2 beats 1, the other three beat all 3: (1 + 9) / 12.
    assert auc(judged_tokens(calibration_comparison())) == pytest.approx(10 / 12)
    assert auc([Judged(0.5, True), Judged(0.5, False)]) == 0.5  # ties count half
    assert auc([Judged(0.9, True), Judged(0.1, False)]) == 1.0
    assert auc([Judged(0.1, True), Judged(0.9, False)]) == 0.0
    assert auc([Judged(0.9, True)]) is None


def test_split_and_sentence_come_from_the_data():
    samples = judged_tokens(calibration_comparison())
    split = split_at(samples, 0.4)
    assert (split.below, split.below_accepted, split.above, split.above_accepted) == (3, 1, 4, 3)
    sentence = calibration_sentence(samples, 0.4)
    assert "AUC 0.83" in sentence
    assert "Below the threshold 0.4 the target still accepted 33% of 3 judged tokens" in sentence
    assert "at or above it, 75% of 4" in sentence
    assert "saves draft work" in sentence
    assert "nothing to calibrate" in calibration_sentence([], 0.4)
    assert "No judged token" in calibration_sentence([Judged(0.9, True), Judged(0.8, False)], 0.4)


# ---- per-position acceptance and the work split ---------------------------------------------


def test_position_shares_count_rounds_that_drafted_that_far():
    trace = make_trace("static", "static k=3", [(3, 3), (3, 1), (3, 0), (2, 2)])
    shares = position_shares(trace)
    assert [(s.position, s.rounds, s.accepted) for s in shares] == [(1, 4, 3), (2, 4, 2), (3, 3, 1)]
    assert [s.share for s in shares] == [0.75, 0.5, pytest.approx(1 / 3)]
    assert [s.share for s in shares] == pytest.approx(trace.per_position_acceptance())


def test_work_split_adds_up():
    comparison = calibration_comparison()
    split = work_split(comparison.traces[0])
    assert (split.target_passes, split.draft_accepted, split.draft_thrown_away, split.draft_rejected) == (2, 4, 3, 2)
    assert split.draft_passes == comparison.traces[0].draft_passes == 7
    assert split.draft_s == pytest.approx(0.7) and split.verify_s == pytest.approx(0.2)
    assert split.other_s == pytest.approx(0.1)
    assert split.draft_time_share == pytest.approx(0.7 / 0.9)


def test_measured_draft_cost_ratio():
    # An older record (no prefill timed): draft 0.9 s over 12 drafted tokens (dynamic 7, static 3,
    # oracle 2): 0.075 s per pass; verify 0.4 s over 4 rounds: 0.1 s per pass.
    assert measured_draft_cost_ratio(calibration_comparison()) == pytest.approx(0.75)
    # The same run with the prompt's prefill timed apart: every policy's first round reads the
    # 8-token prompt in one more draft call, 0.3 s, and its first verification takes 0.5 s more.
    # Apart, a call and a later verification cost what they did; pooled, 1.8 s over 15 draft
    # passes against 1.9 s over 4 verifications would give 0.25.
    comparison = calibration_comparison()
    comparison.prompt_tokens, comparison.baseline.prefill_s = 8, 0.4
    for trace in comparison.traces:
        first = trace.rounds[0]
        first.draft_passes += 1
        first.draft_s, first.draft_prefill_s, first.verify_s = first.draft_s + 0.3, 0.3, first.verify_s + 0.5
    assert measured_draft_cost_ratio(comparison) == pytest.approx(0.75)


# ---- the charts plot those numbers -----------------------------------------------------------


def by_series(fig, name):
    (found,) = [d for d in fig.data if d.meta and d.meta.get("series") == name]
    return found


def test_calibration_figure_plots_bins_counts_diagonal_and_threshold():
    fig = calibration_figure(calibration_comparison(), bins=5)
    count = by_series(fig, "count")
    assert list(count.y) == [1, 2, 1, 0, 3]
    assert list(count.x) == pytest.approx([0.1, 0.3, 0.5, 0.7, 0.9])
    share = by_series(fig, "share")
    assert list(share.x) == pytest.approx([0.1, 0.3, 0.5, 0.9])  # the empty bin has no point
    assert list(share.y) == [0.0, 0.5, 0.0, 1.0]
    assert list(by_series(fig, "diagonal").y) == [0, 1]
    (threshold,) = [s for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1]
    assert threshold.x0 == 0.4
    assert "AUC 0.83" in fig.layout.title.text and "7 judged tokens" in fig.layout.title.text
    assert fig.layout.meta["auc"] == pytest.approx(10 / 12)
    sentence = " ".join(a.text for a in fig.layout.annotations).replace("<br>", " ")
    assert "still accepted 33% of 3" in sentence


def test_position_figure_plots_shares_per_policy():
    comparison = make_comparison()
    fig = position_figure(comparison)
    curves = {d.meta["label"]: d for d in fig.data}
    assert list(curves) == ["static k=3", "dynamic"]
    assert list(curves["static k=3"].x) == [1, 2, 3]
    assert list(curves["static k=3"].y) == [0.75, 0.5, 0.25]  # rounds (3,3), (3,1), (3,0), (3,2)
    assert "accepted in 2 of 4 rounds" in curves["static k=3"].hovertext[1]


def test_work_figure_plots_passes_tokens_and_time():
    comparison = calibration_comparison()
    fig = work_figure(comparison)
    assert list(by_series(fig, "target_passes").x) == [2, 1, 1]
    assert list(by_series(fig, "draft_accepted").x) == [4, 0, 2]
    assert list(by_series(fig, "draft_thrown_away").x) == [3, 3, 0]
    assert list(by_series(fig, "draft_s").x) == pytest.approx([0.7, 0.2, 0.0])
    assert list(by_series(fig, "verify_s").x) == pytest.approx([0.2, 0.2, 0.0])
    assert list(by_series(fig, "draft_s").y) == ["dynamic t=0.4", "static k=3", "oracle"]


def test_every_explaining_chart_draws_a_run_stopped_before_target_only_decoding():
    """Stop pressed after the first policies: no baseline yet, and the views still draw (the work
    chart had crashed the views handler on it, leaving the columns without their 'Stopped')."""
    comparison = calibration_comparison()
    comparison.baseline, comparison.partial = None, True
    figures = explain_figures(comparison)
    assert set(figures) == {"calibration", "positions", "work", "pass_costs"}
    assert not figures["work"].layout.shapes  # no target-only line to draw


def test_every_chart_is_exported_from_the_record_alone():
    comparison = calibration_comparison()
    again = Comparison.from_json(comparison.to_json())
    names = set(charts(again))
    assert {"lookahead", "progress", "calibration", "positions", "work", "pass_costs"} <= names
    assert charts(again)["calibration"].layout.meta["auc"] == pytest.approx(10 / 12)


def test_the_pass_cost_chart_shows_each_verification_pass_against_its_window():
    """Each verification pass but a run's first (which also reads the prompt) at lookahead + 1
    tokens; target-only's one-token pass from its time after the prefill; the draft's call
    without its prefill."""
    def timed(index, lookahead, verify_s, draft_s=0.04):
        r = a_round(index, index * 3, [0.9] * lookahead, lookahead, draft_s * lookahead, verify_s)
        return r
    rounds = [timed(0, 3, 5.0), timed(1, 3, 0.30), timed(2, 3, 0.34), timed(3, 7, 0.50), timed(4, 3, 0.32)]
    rounds[0].draft_prefill_s, rounds[0].draft_passes, rounds[0].draft_s = 0.5, 4, 0.5 + 3 * 0.04
    trace = Trace(policy="static", label="static k=3", params={}, token_ids=[0] * 20, rounds=rounds, wall_s=7.0,
                  stop_reason="eos")
    comparison = Comparison(preset="p", prompt="x", prompt_tokens=3, max_new_tokens=20, traces=[trace],
                            baseline=Baseline(token_ids=[0] * 11, wall_s=3.2, stop_reason="eos", prefill_s=1.2))
    passes = measured_passes(comparison)
    assert passes.windows == [4, 4, 8, 4] and passes.verify_ms == pytest.approx([300, 340, 500, 320])
    assert passes.one_token_ms == pytest.approx(200.0) and passes.draft_call_ms == pytest.approx(40.0)
    assert passes.median_ms(4) == pytest.approx(320)
    fig = pass_cost_figure(comparison)
    assert list(by_series(fig, "verify_median").x) == [4, 8]
    assert list(by_series(fig, "one_token").y) == pytest.approx([200, 200])
    assert "checking 4 tokens took 1.6 one-token passes" in fig.layout.title.text


# ---- cost what-if -------------------------------------------------------------------------


def test_sweep_models_times_with_the_draft_cost_set():
    reference = [5, 6, 7, 8, 9, 5]
    baseline = Baseline(token_ids=reference, wall_s=1.2, stop_reason="max_new_tokens")
    trace = Trace(policy="static", label="static k=2", params={"num_assistant_tokens": 2}, token_ids=reference,
                  rounds=[a_round(0, 0, [0.9, 0.9], 2, draft_s=0.1, verify_s=0.1),
                          a_round(1, 3, [0.9, 0.9], 2, draft_s=0.1, verify_s=0.1)], wall_s=0.4, stop_reason="eos")
    trace.rounds[0].draft_ids, trace.rounds[1].draft_ids = [5, 6], [8, 9]
    comparison = Comparison(preset="tiny", prompt="p", max_new_tokens=6, baseline=baseline, traces=[trace],
                            draft_along_reference=DraftAlongReference(reference, [0.9] * 6, [0.1] * 6))
    measured = sweep(comparison)
    assert not measured.cost_modeled and measured.costs.draft_ratio == pytest.approx(0.5)
    cheap = sweep(comparison, draft_ratio=0.1)
    assert cheap.cost_modeled and cheap.costs.draft_ratio == pytest.approx(0.1)
    for m, c in zip(measured.static, cheap.static):
        assert (m.target_passes, m.draft_passes) == (c.target_passes, c.draft_passes)  # same passes
        assert c.estimated_s == pytest.approx(c.target_passes * 0.1 + c.draft_passes * 0.01)
        assert c.estimated_speedup >= m.estimated_speedup
    fig = charts(comparison, draft_ratio=0.1)["sweep"]
    assert "0.10 of a target pass (set by hand)" in fig.layout.title.text
    (star,) = [d for d in fig.data if d.meta and d.meta.get("series") == "run_speedup"]
    assert "modeled" in star.hovertext[0]
    assert star.y[0] == pytest.approx(1.2 / (2 * 0.1 + 4 * 0.01))


def test_split_at_counts_the_threshold_itself_above():
    samples = [Judged(0.9, True), Judged(0.4, False), Judged(0.4, True), Judged(0.39, False), Judged(0.1, True)]
    split = split_at(samples, 0.4)
    assert (split.above, split.above_accepted, split.below, split.below_accepted) == (3, 2, 2, 1)
    assert split.above_share == pytest.approx(2 / 3) and split.below_share == 0.5
    assert split_at([], 0.4).above_share is None
    # ties in the AUC count half; three accepted against two rejected make six pairs
    assert auc(samples[:1] + [Judged(0.4, True), Judged(0.2, True), Judged(0.4, False), Judged(0.3, False)]) == \
        pytest.approx((2 + 1.5 + 0) / 6)
