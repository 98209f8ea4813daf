"""The one cost model (explain.costs) on hand-made runs: the prompt's prefill priced once per prompt,
apart from the per-token passes, and older runs priced as before."""

from __future__ import annotations

import math

import pytest

from specviz.decoding.trace import Baseline, Comparison, Round, Trace
from specviz.explain.costs import PolicyRun, StudyPassCosts, TargetOnlyRun, draft_prefill_calls

PROMPT_TOKENS = 8


def drafting_round(index: int, calls: int, prefill_s: float = 0.0, verify_s: float = 0.05) -> Round:
    """A round of `calls` one-token draft calls at 0.02 s each, plus the prompt's prefill call if timed."""
    passes = calls + (1 if prefill_s else 0)
    return Round(index=index, position=index, budget=calls, draft_ids=[1] * calls, draft_probs=[0.9] * calls,
                 accepted=0, target_id=2, draft_passes=passes, draft_s=prefill_s + 0.02 * calls, verify_s=verify_s,
                 draft_prefill_s=prefill_s)


def timed_comparison(prefill: bool = True) -> Comparison:
    """Target-only: a 0.4 s first pass, then 9 passes of 0.1 s. Two policies whose first round reads
    the prompt: the draft's prefill call 0.5 s, the first verification 0.45 s; later ones 0.05 s.
    `prefill=False`: the same run as a file from before the prefill was timed apart records it."""
    first = {"prefill_s": 0.5, "verify_s": 0.45}
    static = [drafting_round(0, 3, **first), drafting_round(1, 3), drafting_round(2, 3)]
    dynamic = [drafting_round(0, 2, **first), drafting_round(1, 4)]
    if not prefill:
        for r in (static[0], dynamic[0]):
            r.draft_prefill_s = 0.0
    traces = [Trace(policy=p, label=p, params={}, token_ids=[1] * 5, rounds=rounds, wall_s=1.0, stop_reason="eos")
              for p, rounds in (("static", static), ("dynamic", dynamic))]
    baseline = Baseline(token_ids=[1] * 10, wall_s=0.4 + 9 * 0.1, stop_reason="max_new_tokens",
                        prefill_s=0.4 if prefill else 0.0)
    return Comparison(preset="tiny", prompt="p", max_new_tokens=10, baseline=baseline, traces=traces,
                      prompt_tokens=PROMPT_TOKENS)


def test_the_prefill_is_priced_apart_from_the_per_token_passes():
    costs = StudyPassCosts.from_comparison(timed_comparison())
    assert costs.prefill_apart
    assert costs.draft_call_s == pytest.approx(0.02)  # 15 one-token calls; the two 0.5 s prefills left out
    assert costs.draft_prefill_s == pytest.approx(0.5)
    assert costs.verify_s == pytest.approx(0.05) and costs.first_verify_s == pytest.approx(0.45)
    assert costs.target_token_s == pytest.approx(0.1) and costs.target_prefill_s == pytest.approx(0.4)
    assert costs.draft_ratio == pytest.approx(0.4)


def test_the_prefill_is_counted_once_per_prompt_not_per_draft_call():
    costs = StudyPassCosts.from_comparison(timed_comparison())
    # draft passes count the prefill call: 40 = the prefill + 39 one-token calls
    assert costs.modeled_time(10, 40, PROMPT_TOKENS) == pytest.approx(0.45 + 9 * 0.05 + 0.5 + 39 * 0.02)
    # twice the draft calls cost twice the calls, not a second prefill
    extra = costs.modeled_time(10, 80, PROMPT_TOKENS) - costs.modeled_time(10, 40, PROMPT_TOKENS)
    assert extra == pytest.approx(40 * 0.02)
    # a one-token prompt has no prefill call, a policy that never drafted no draft cost at all
    assert costs.modeled_time(10, 40, 1) == pytest.approx(0.45 + 9 * 0.05 + 40 * 0.02)
    assert costs.modeled_time(3, 0, PROMPT_TOKENS) == pytest.approx(0.45 + 2 * 0.05)
    assert draft_prefill_calls(PROMPT_TOKENS, 0) == 0 and draft_prefill_calls(2, 5) == 1


def test_target_only_modeled_time_reads_the_prompt_once():
    costs = StudyPassCosts.from_comparison(timed_comparison())
    assert costs.target_only_modeled_time(10) == pytest.approx(1.3)  # one run: its measured wall time back
    assert costs.target_only_modeled_time(30) == pytest.approx(0.4 + 29 * 0.1)
    assert costs.target_only_modeled_time(0) == 0.0


def test_older_runs_fall_back_to_pooled_per_pass_costs():
    costs = StudyPassCosts.from_comparison(timed_comparison(prefill=False))
    assert not costs.prefill_apart
    # total time over total passes, the prefills inside: 1.30 s over 17 draft passes, 1.05 s over 5
    assert costs.draft_call_s == pytest.approx(1.30 / 17) and costs.verify_s == pytest.approx(1.05 / 5)
    assert costs.target_token_s == pytest.approx(0.13)
    # and priced as before: every pass of a kind at the same cost
    assert costs.modeled_time(10, 40, PROMPT_TOKENS) == pytest.approx(10 * 1.05 / 5 + 40 * 1.30 / 17)
    assert costs.target_only_modeled_time(10) == pytest.approx(1.3)


def test_a_mix_of_timed_and_untimed_runs_is_priced_pooled():
    timed = PolicyRun(3, 0.55, 0.45, 10, 0.7, 0.5, 1)
    untimed = PolicyRun(3, 0.55, None, 10, 0.7, None, 1)
    assert StudyPassCosts.pooled([TargetOnlyRun(1.3, 10, 0.4)], [timed]).prefill_apart
    assert not StudyPassCosts.pooled([TargetOnlyRun(1.3, 10, 0.4)], [timed, untimed]).prefill_apart
    assert not StudyPassCosts.pooled([TargetOnlyRun(1.3, 10, None)], [timed]).prefill_apart
    assert not StudyPassCosts.pooled([], []).prefill_apart


def test_a_cheaper_draft_scales_its_calls_and_its_prefill_alike():
    measured = StudyPassCosts.from_comparison(timed_comparison())
    cheap = measured.with_draft_ratio(0.1)
    assert cheap.draft_call_s == pytest.approx(0.005)  # 0.1 of a 0.05 s verification pass
    assert cheap.draft_prefill_s == pytest.approx(0.5 * 0.005 / 0.02)  # a quarter of its call, a quarter of its prefill
    # the target's passes are left alone
    assert (cheap.verify_s, cheap.first_verify_s, cheap.target_token_s, cheap.target_prefill_s) == \
        (measured.verify_s, measured.first_verify_s, measured.target_token_s, measured.target_prefill_s)
    assert cheap.draft_ratio == pytest.approx(0.1)
    # the measured ratio gives the measured costs back
    again = measured.with_draft_ratio(measured.draft_ratio)
    assert again.draft_call_s == pytest.approx(measured.draft_call_s)
    assert again.draft_prefill_s == pytest.approx(measured.draft_prefill_s)
    for bad in (float("nan"), -0.1):
        with pytest.raises(ValueError):
            measured.with_draft_ratio(bad)


def test_a_draft_ratio_with_no_draft_call_measured():
    costs = StudyPassCosts.pooled([TargetOnlyRun(1.3, 10, 0.4)], [PolicyRun(3, 0.55, 0.45, 0, 0.0, 0.0, 0)])
    assert costs.draft_call_s == 0.0 and costs.draft_ratio is None and costs.draft_to_token_pass is None
    set_by_hand = costs.with_draft_ratio(0.2)
    assert set_by_hand.draft_call_s == pytest.approx(0.2 * 0.05)
    assert set_by_hand.draft_prefill_s == pytest.approx(0.2 * 0.45)  # of the target's own prompt-reading pass
    assert not math.isnan(set_by_hand.modeled_time(3, 4, PROMPT_TOKENS))


def test_a_round_that_drafted_nothing_is_priced_as_a_one_token_pass():
    """The cost-aware rule decodes plainly where a draft does not pay: those verification passes
    read one token, as target-only's do, and cost what those cost; verify_s is measured over the
    passes that checked drafts (here 0.3 s each, three one-token passes' worth)."""
    comparison = timed_comparison()
    plain = [drafting_round(0, 2, prefill_s=0.5, verify_s=0.45), drafting_round(1, 2, verify_s=0.3)]
    plain += [drafting_round(i, 0, verify_s=0.1) for i in range(2, 6)]
    comparison.traces = [Trace(policy="costaware", label="cost-aware", params={}, token_ids=[1] * 6, rounds=plain,
                               wall_s=1.0, stop_reason="eos")]
    costs = StudyPassCosts.from_comparison(comparison)
    assert costs.verify_s == pytest.approx(0.3) and costs.target_token_s == pytest.approx(0.1)
    # six passes, four of them plain: the first, one at verify_s, four at the one-token price
    assert costs.modeled_time(6, 5, PROMPT_TOKENS, plain=4) == pytest.approx(0.45 + 0.3 + 4 * 0.1 + 0.5 + 4 * 0.02)
    assert costs.modeled_time(6, 5, PROMPT_TOKENS) == pytest.approx(0.45 + 5 * 0.3 + 0.5 + 4 * 0.02)
