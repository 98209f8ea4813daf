"""The what-if sweep replays policies from one greedy run; check it against real runs."""

import pytest

from specviz.decoding.engine import generate, target_only
from specviz.decoding.oracle import draft_along, finish
from specviz.decoding.policies import Adaptive, CostAware, Dynamic, Entropy, Heuristic, PassCosts, Static
from specviz.decoding.trace import Baseline, Comparison, DraftAlongReference, Round, Trace
from specviz.explain.analysis import rule_rounds
from specviz.explain.costs import StudyPassCosts
from specviz.explain.sweep import STATIC_KS, THRESHOLDS, observations, replay, replay_passes, sweep

PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]
MAX_NEW = 60


@pytest.fixture(scope="module")
def tiny_comparison(tiny_pair):
    baseline = target_only(tiny_pair, PROMPT, MAX_NEW)
    traces = [generate(tiny_pair, PROMPT, policy, MAX_NEW) for policy in (Static(5), Heuristic(5), Dynamic(0.4))]
    return Comparison(preset="tiny", prompt="tiny", max_new_tokens=MAX_NEW, baseline=baseline, traces=traces,
                      prompt_tokens=len(PROMPT),
                      draft_along_reference=finish(draft_along(tiny_pair, PROMPT, baseline.token_ids)))


@pytest.mark.parametrize("make", [lambda: Static(1), lambda: Static(3), lambda: Static(8), lambda: Static(20),
                                  lambda: Dynamic(0.2), lambda: Dynamic(0.6), lambda: Dynamic(0.9),
                                  lambda: Heuristic(2), lambda: Adaptive(0.4), lambda: Entropy(1.0)])
def test_replayed_target_passes_equal_a_real_run(tiny_pair, tiny_comparison, make):
    predicted = replay(tiny_comparison, make())
    real = generate(tiny_pair, PROMPT, make(), MAX_NEW)
    assert predicted.target_passes == real.target_passes
    if isinstance(make(), Static):
        assert predicted.draft_passes == real.draft_passes  # static drafts its budget whatever happens
    else:
        assert abs(predicted.draft_passes - real.draft_passes) <= 0.05 * real.draft_passes + 1


def test_runs_that_were_made_are_replayed_exactly(tiny_comparison):
    for trace, policy in zip(tiny_comparison.traces, (Static(5), Heuristic(5), Dynamic(0.4))):
        predicted = replay(tiny_comparison, policy)
        assert (predicted.target_passes, predicted.draft_passes) == (trace.target_passes, trace.draft_passes)


def test_observations_come_from_the_real_rounds(tiny_comparison):
    seen = observations(tiny_comparison)
    rounds = [r for t in tiny_comparison.traces for r in t.rounds if r.accepted < r.lookahead - 1]
    assert rounds, "the tiny pair should reject inside some rounds"
    for r in rounds:
        assert len(seen.after_rejection[r.position + r.accepted]) >= r.lookahead - r.accepted - 1
        assert seen.round_starts[r.position][: r.lookahead] == list(zip(r.draft_ids, r.draft_probs,
                                                                         r.draft_entropies))


def test_sweep_covers_thresholds_and_k_and_estimates_time(tiny_comparison):
    result = sweep(tiny_comparison)
    assert [r.label for r in result.thresholds] == [f"dynamic t={t:g}" for t in THRESHOLDS]
    assert [r.label for r in result.static] == [f"static k={k}" for k in STATIC_KS]
    # more lookahead never needs more target passes in greedy decoding
    passes = [r.target_passes for r in result.static]
    assert passes == sorted(passes, reverse=True)
    assert all(r.estimated_s > 0 and r.estimated_speedup > 0 for r in result.static + result.thresholds)


def test_replay_on_a_scripted_table():
    # The draft agrees at positions 0-2, disagrees at 3, agrees at 4-5.
    reference = [10, 11, 12, 13, 14, 15]
    along = DraftAlongReference(tokens=[10, 11, 12, 99, 14, 15], probs=[0.9, 0.9, 0.9, 0.3, 0.9, 0.9],
                                entropies=[0.1] * 6)
    # static 4: round at 0 drafts 4, accepts 3, target corrects 13 -> next round at 4 drafts 1 (room).
    # Draft calls: the prompt's prefill, 4 for the first round, 1 for the second (its start token)
    assert replay_passes(Static(4), reference, along, max_new_tokens=6, prompt_tokens=5) == (2, 6)
    assert replay_passes(Static(4), reference, along, max_new_tokens=6, prompt_tokens=1) == (2, 5)  # no prefill
    # dynamic 0.5: drafts 0..3, stops after the 0.3 token (still sent) -> same rounds
    assert replay_passes(Dynamic(0.5, 20), reference, along, max_new_tokens=6, prompt_tokens=5) == (2, 6)
    # static 3: all 3 accepted, bonus 13; the next round first catches up on the last draft token
    assert replay_passes(Static(3), reference, along, max_new_tokens=6, prompt_tokens=5) == (2, 1 + 3 + 2)


def test_replayed_times_price_the_prompt_prefill_once():
    # The scripted table above, and a run of static k=4 on it with the prompt's prefill timed: the
    # draft's prefill call 1.0 s, then one-token calls of 0.02 s; the first verification 0.6 s, the
    # next 0.1 s; target-only's first pass 0.8 s, then 0.15 s a token.
    reference = [10, 11, 12, 13, 14, 15]
    along = DraftAlongReference(tokens=[10, 11, 12, 99, 14, 15], probs=[0.9, 0.9, 0.9, 0.3, 0.9, 0.9],
                                entropies=[0.1] * 6)
    rounds = [Round(index=0, position=0, budget=4, draft_ids=[10, 11, 12, 99], draft_probs=[0.9] * 4, accepted=3,
                    target_id=13, draft_passes=5, draft_s=1.0 + 4 * 0.02, verify_s=0.6, draft_prefill_s=1.0),
              Round(index=1, position=4, budget=1, draft_ids=[14], draft_probs=[0.9], accepted=1, target_id=15,
                    draft_passes=1, draft_s=0.02, verify_s=0.1)]
    run = Trace(policy="static", label="static k=4", params={"num_assistant_tokens": 4}, token_ids=reference,
                rounds=rounds, wall_s=1.9, stop_reason="max_new_tokens")
    comparison = Comparison(preset="tiny", prompt="p", max_new_tokens=6, prompt_tokens=5, traces=[run],
                            baseline=Baseline(token_ids=reference, wall_s=0.8 + 5 * 0.15, stop_reason="max_new_tokens",
                                              prefill_s=0.8),
                            draft_along_reference=along)
    # the run's own passes at its own costs: its measured time back, and target-only's
    own = replay(comparison, Static(4))
    assert (own.target_passes, own.draft_passes) == (2, 6)
    assert own.estimated_s == pytest.approx(run.draft_s + run.verify_s)
    assert own.estimated_speedup == pytest.approx(1.55 / 1.8)
    # a policy with more draft calls pays them at 0.02 s each, and the prefill once
    two = replay(comparison, Static(2))
    assert (two.target_passes, two.draft_passes) == (3, 7)
    assert two.estimated_s == pytest.approx(0.6 + 2 * 0.1 + 1.0 + 6 * 0.02)
    # with a cheaper draft set by hand, the prefill scales with its call
    cheap = sweep(comparison, draft_ratio=0.1)
    assert cheap.cost_modeled and cheap.costs.draft_call_s == pytest.approx(0.01)
    assert cheap.costs.draft_prefill_s == pytest.approx(0.5)
    assert cheap.measured_costs == StudyPassCosts.from_comparison(comparison)
    k4 = cheap.static[3]
    assert k4.estimated_s == pytest.approx(0.6 + 0.1 + 0.5 + 5 * 0.01)


@pytest.mark.parametrize("prices", [PassCosts(2.0, tuple(10.0 + 0.1 * w for w in range(21))),
                                    PassCosts(6.0, (10.0, 10.3, 14.0, 19.0, 21.0, 23.0)),
                                    PassCosts(10.0, (10.0, 10.3, 10.6))])
def test_the_cost_aware_rule_is_replayed_exactly_given_the_same_prices(tiny_pair, prices):
    """Its decisions depend on probabilities, verdicts and prices only: a replay along the run's answer
    gives its target and draft passes to the pass, on cheap, steep and useless drafts alike; and it
    stays lossless."""
    baseline = target_only(tiny_pair, PROMPT, MAX_NEW)
    rule = CostAware(prices)
    trace = generate(tiny_pair, PROMPT, rule, MAX_NEW)
    assert trace.token_ids == baseline.token_ids
    # the round chart's replay of the trace recovers every choice the rule made in the run
    seen = rule_rounds(trace)
    assert [r.decisions for r in seen] == rule.decisions and [r.plan for r in seen] == rule.plans
    assert all(r.plan.drafts and all(d.drafts for d in r.decisions[: r.lookahead - 1]) for r in seen if r.lookahead)
    assert all(not r.plan.drafts or played.budget == 0 for r, played in zip(seen, trace.rounds) if not r.lookahead)
    comparison = Comparison(preset="tiny", prompt="tiny", max_new_tokens=MAX_NEW, baseline=baseline, traces=[trace],
                            prompt_tokens=len(PROMPT),
                            draft_along_reference=finish(draft_along(tiny_pair, PROMPT, baseline.token_ids)))
    predicted = replay(comparison, CostAware(prices))
    assert (predicted.target_passes, predicted.draft_passes) == (trace.target_passes, trace.draft_passes)


def test_replay_counts_a_row_exact_drafts_catch_up_as_one_call():
    """A plain stretch leaves a backlog: one call per token for a draft that is not row-exact, one
    call in all (up to CATCH_UP_ROWS tokens) for one that is."""
    reference = list(range(10, 20))
    along = DraftAlongReference(tokens=list(reference), probs=[0.9] * 10, entropies=[0.1] * 10)

    class PlainThenStatic(Static):
        def start_round(self, position: int) -> int:
            return 0 if position < 5 else 2

    # rounds at 0-4 plain, then drafting rounds at 5 (2 drafted, both kept, bonus) and 8 (1: room)
    apart = replay_passes(PlainThenStatic(2), reference, along, max_new_tokens=10, prompt_tokens=5)
    together = replay_passes(PlainThenStatic(2), reference, along, max_new_tokens=10, prompt_tokens=5,
                             row_exact=True)
    assert apart == (7, 1 + (6 + 1) + (2 + 0))  # prefill; a backlog of 6, a draft; a backlog of 2
    assert together == (7, 1 + (1 + 1) + (1 + 0))
