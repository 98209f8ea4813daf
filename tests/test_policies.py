"""Policy rules on scripted inputs: no models."""

import pytest

from specviz.decoding.modes import ModeSpec, make_policy, parse_modes
from specviz.decoding.pipeline import make_request
from specviz.decoding.policies import (
    MAX_LOOKAHEAD,
    Adaptive,
    CostAware,
    DraftStep,
    Dynamic,
    Entropy,
    Heuristic,
    Oracle,
    PassCosts,
    Static,
    roc_threshold,
)
from specviz.errors import SpecVizError


def drafted_until_stop(policy, probs, position=0):
    """Play one round: how many tokens the policy lets the draft produce given these probabilities."""
    budget = policy.start_round(position)
    count = 0
    for index, prob in enumerate(probs[:budget]):
        count += 1
        if not policy.keep_drafting(DraftStep(index, token_id=7, prob=prob)):
            break
    return count


def test_static_drafts_k_every_round_and_ignores_confidence():
    policy = Static(3)
    for accepted in (0, 3, 1):
        assert policy.start_round(0) == 3
        assert drafted_until_stop(policy, [0.01] * 10) == 3
        policy.end_round(3, accepted, [0.01] * 3)


def test_heuristic_schedule_plus_two_on_full_acceptance_minus_one_otherwise_floor_one():
    policy = Heuristic(5)
    history = []
    for drafted, accepted in [(5, 5), (7, 7), (9, 2), (8, 0), (7, 0), (6, 0), (5, 0), (4, 0), (3, 0), (2, 0),
                              (1, 0), (1, 1)]:
        assert policy.start_round(0) == drafted
        policy.end_round(drafted, accepted, [])
        history.append(policy.start_round(0))
    assert history == [7, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 3]


def test_heuristic_counts_a_short_final_round_as_full_when_all_accepted():
    # transformers compares accepted with the candidates actually drafted, not with the budget
    policy = Heuristic(5)
    policy.end_round(2, 2, [])
    assert policy.start_round(0) == 7


def test_dynamic_stops_after_first_token_below_threshold_and_sends_it():
    policy = Dynamic(0.4, max_tokens=20)
    assert drafted_until_stop(policy, [0.9, 0.8, 0.39, 0.95, 0.99]) == 3
    assert drafted_until_stop(policy, [0.1]) == 1
    assert drafted_until_stop(policy, [0.4] * 30) == 20  # equal to the threshold keeps drafting; max caps
    assert policy.threshold == 0.4


def test_dynamic_threshold_zero_never_stops_early_and_one_stops_at_once():
    assert drafted_until_stop(Dynamic(0.0, 6), [0.0001] * 10) == 6
    assert drafted_until_stop(Dynamic(1.0, 6), [0.9999] * 10) == 1


def test_oracle_drafts_the_ideal_line():
    policy = Oracle([4, 3, 2, 1, 0, 0, 7])
    assert policy.start_round(0) == 4
    assert policy.start_round(5) == 0
    assert policy.start_round(6) == 7
    assert policy.start_round(100) == 1


@pytest.mark.parametrize("bad", [0, -1, MAX_LOOKAHEAD + 1, 1000, 2.5, "3", True])
def test_lookahead_out_of_range_is_a_clear_error(bad):
    with pytest.raises(SpecVizError, match="lookahead"):
        Static(bad)
    with pytest.raises(SpecVizError, match="lookahead"):
        Heuristic(bad)


@pytest.mark.parametrize("bad", [-0.1, 1.01, float("nan"), "0.4", None])
def test_threshold_outside_zero_one_is_a_clear_error(bad):
    with pytest.raises(SpecVizError, match="threshold"):
        Dynamic(bad)


def test_parse_modes_reads_the_cli_syntax():
    specs = parse_modes("static:3, heuristic:5,dynamic:0.3:12,oracle")
    assert specs == [
        ModeSpec("static", {"num_assistant_tokens": 3}),
        ModeSpec("heuristic", {"num_assistant_tokens": 5}),
        ModeSpec("dynamic", {"assistant_confidence_threshold": 0.3, "max_tokens": 12}),
        ModeSpec("oracle", {}),
    ]
    assert make_policy(specs[2]).label == "dynamic t=0.3"


@pytest.mark.parametrize("text, message", [
    ("", "No modes"), ("fastest", "Unknown mode"), ("static:x", "Cannot read"),
    ("static:0", "between 1"), ("dynamic:1.5", "threshold"),
])
def test_parse_modes_rejects_bad_input(text, message):
    with pytest.raises(SpecVizError, match=message):
        parse_modes(text)


def test_oracle_needs_a_reference():
    with pytest.raises(SpecVizError, match="reference"):
        make_policy(ModeSpec("oracle"))


# ---- adaptive and entropy ------------------------------------------------------------------


def test_roc_threshold_minimises_false_positives_plus_three_false_negatives():
    # accepted tokens have high probabilities, rejected ones low, with one overlap
    samples = [(0.9, True), (0.8, True), (0.7, True), (0.3, True), (0.35, False), (0.2, False), (0.1, False)]
    # t=0.3 keeps all 4 accepted (fnr 0) and lets one of 3 rejected through (fpr 1/3): cost 0.33;
    # t=0.7 stops one accepted (fnr 1/4, cost 0.75); so 0.3 wins.
    assert roc_threshold(samples) == 0.3
    assert roc_threshold(samples[:5]) is None  # too few samples
    assert roc_threshold([(0.5, True)] * 10) is None  # one class only


def test_adaptive_refits_after_each_round_and_the_new_threshold_takes_effect():
    policy = Adaptive(0.4, max_tokens=20)
    assert policy.threshold == 0.4
    # Round 1: confident tokens accepted, then a 0.45 token the target rejected.
    assert drafted_until_stop(policy, [0.95, 0.9, 0.45, 0.1]) == 4
    policy.end_round(4, 2, [0.95, 0.9, 0.45, 0.1])
    assert policy.threshold == 0.4  # 3 samples: not enough to fit
    policy.end_round(4, 3, [0.97, 0.92, 0.91, 0.5])
    # samples: accepted 0.95 0.9 0.97 0.92 0.91; rejected 0.45 0.5 -> stop below 0.9
    assert policy.threshold == pytest.approx(0.9)
    assert policy.history == [0.4, 0.4, 0.9]
    # In the next round a 0.6 token, which the old threshold would have drafted past, ends drafting.
    assert drafted_until_stop(policy, [0.95, 0.6, 0.99, 0.99]) == 2


def test_adaptive_ignores_tokens_after_the_first_rejection():
    policy = Adaptive(0.4)
    policy.end_round(5, 1, [0.9, 0.8, 0.1, 0.2, 0.3])
    assert policy.samples == [(0.9, True), (0.8, False)]


def test_entropy_stops_when_the_draft_is_unsure():
    policy = Entropy(max_entropy=1.0, max_tokens=10)
    entropies = [0.1, 0.5, 1.2, 0.2]
    count = 0
    for i, h in enumerate(entropies):
        count += 1
        if not policy.keep_drafting(DraftStep(i, 3, prob=0.99, entropy=h)):
            break
    assert count == 3  # the unsure token is still sent
    assert policy.start_round(0) == 10
    with pytest.raises(SpecVizError, match="entropy bound"):
        Entropy(-1)


def test_parse_modes_knows_the_extra_policies():
    adaptive, entropy = parse_modes("adaptive:0.3:10,entropy:2.5")
    assert make_policy(adaptive).label == "adaptive t0=0.3"
    assert make_policy(entropy).params == {"max_entropy": 2.5, "max_tokens": 20}


def test_one_request_names_at_most_eight_modes_each_once():
    """Each mode is a decoding run with the models held: a request may not ask for hundreds, and a
    mode named twice (even in two spellings, or under one label) would only repeat a run."""
    assert len(parse_modes(",".join(f"static:{k}" for k in range(1, 9)))) == 8
    with pytest.raises(SpecVizError, match="1250 modes given; at most 8"):
        parse_modes("static:5," * 1250)
    for twice, label in [("static:5,static:5", "static k=5"), ("dynamic:0.4,dynamic:0.4:20", "dynamic t=0.4"),
                         ("dynamic:0.4:20,dynamic:0.4:10", "dynamic t=0.4"), ("oracle,static:3,oracle", "oracle")]:
        with pytest.raises(SpecVizError, match=f"The mode '{label}' is named twice"):
            parse_modes(twice)
    assert len(parse_modes("static:3,static:5,heuristic:5,dynamic:0.3,dynamic:0.5")) == 5
    with pytest.raises(SpecVizError, match="named twice"):  # a list of specs is checked the same way
        make_request("Hi", [ModeSpec("static", {"num_assistant_tokens": 2})] * 2, 8)


# ---- the cost-aware rule ---------------------------------------------------------------------


def run_rounds(policy, rounds: list[tuple[list[float], int]]) -> list[int]:
    """Drive a policy through scripted rounds (the draft's probabilities, how many the target
    accepts); return how many tokens it drafted in each."""
    drafted_per_round, position = [], 0
    for probs, accepted in rounds:
        budget, drafted = policy.start_round(position), 0
        for index in range(budget):
            drafted += 1
            if index + 1 >= len(probs) or not policy.keep_drafting(DraftStep(index, 0, probs[index])):
                break
        policy.end_round(drafted, min(accepted, drafted), probs[:drafted])
        drafted_per_round.append(drafted)
        position += min(accepted, drafted) + 1
    return drafted_per_round


def test_cost_aware_drafts_nothing_when_a_draft_call_costs_a_target_pass():
    """A bundled copy draft: its call costs what the target's does. Plain decoding is best."""
    prices = PassCosts(draft_call_ms=100.0, target_ms=(100.0, 103.0, 106.0))
    assert run_rounds(CostAware(prices), [([0.99] * 20, 20)] * 6) == [0] * 6


def test_cost_aware_drafts_to_its_cap_when_verification_is_free_and_the_draft_always_right():
    prices = PassCosts(draft_call_ms=1.0, target_ms=(100.0,) * 21)
    assert run_rounds(CostAware(prices, max_tokens=12), [([0.99] * 30, 30)] * 5) == [12] * 5


def test_cost_aware_drafts_short_where_a_window_costs_more_and_long_where_it_is_flat():
    """The same draft (sure of itself, right 80% of the time) on today's fp32 CPU curve (a window of
    4 costs 1.9 passes) and on the bf16 one (flat): it drafts fewer tokens per round on the first."""
    probs = [0.9, 0.85, 0.9, 0.8, 0.9, 0.85, 0.9, 0.8] * 3
    rounds = [(probs, 3), (probs, 5), (probs, 2), (probs, 6)] * 4
    fp32 = PassCosts(81.0, (236.0, 244.0, 350.0, 456.0, 500.0, 540.0, 580.0, 622.0))
    bf16 = PassCosts(61.0, (168.0, 168.0, 169.0, 171.0, 172.0, 173.0, 174.0, 175.0))
    short, long = run_rounds(CostAware(fp32), rounds), run_rounds(CostAware(bf16), rounds)
    assert sum(short) < sum(long) and max(short) <= 3 < max(long), (short, long)


def test_cost_aware_comes_back_to_drafting_after_an_unlucky_start():
    """Plain rounds bring no verdicts: early rejections must not keep the rule plain for good (they
    did, on the real pair, with the draft's catch-up charged to the first token and no optimism)."""
    bf16 = PassCosts(61.0, (168.0, 168.0, 169.0, 171.0, 172.0, 173.0, 174.0, 175.0))
    probs = [0.9] * 20
    drafted = run_rounds(CostAware(bf16), [(probs, 0)] * 10 + [(probs, 6)] * 30)
    assert 0 in drafted[:12], drafted  # the unlucky start made it stop ...
    assert all(drafted[-10:]), drafted  # ... and it is drafting again, and keeps to it


# The real pair on an Intel Xeon with AMX (issue 60): a one-token pass 76.9 ms, two tokens 91.2, a
# draft call 30.1, the draft's catch-up over a backlog 30-80 ms.
XEON = PassCosts(30.1, (76.9, *(91.2 + 4.0 * w for w in range(19))),
                 catch_up_ms=tuple(30.1 + 50.0 * w / 31 for w in range(32)))


def test_cost_aware_does_not_stay_plain_after_long_accepted_rounds_and_a_backlog():
    """Issue 60: after long accepted rounds the run's rate overshot what a round's first token could
    clear, and each plain round made the next catch-up dearer: the rule as it was
    (study/variants.py's first-token) stayed plain to the end. Weighing the whole round, it never
    stops drafting here."""
    from specviz.study.variants import FirstToken

    long_rounds = [([0.88, 0.95, 1.0, 0.97] * 5, 20)] * 4  # the first plain (no verdicts yet), then 13 or more
    then = [([0.95] * 20, 5)] * 60
    as_it_was = run_rounds(FirstToken(XEON), long_rounds + then)
    assert as_it_was[4:] == [0] * 60, as_it_was  # the trap: plain from the fifth round to the end
    drafted = run_rounds(CostAware(XEON), long_rounds + then)
    assert all(drafted[1:]), drafted


def test_cost_aware_plain_streaks_end_however_long_the_backlog():
    """The backlog is a debt any drafting round pays: its size cannot keep the rule plain. After an
    unlucky stretch on a pair where drafting pays, the widened estimate brings the rule back
    within a bound set by the prices, whatever backlog the plain rounds left."""
    rule = CostAware(XEON)
    run_rounds(rule, [([0.9] * 20, 0)] * 6)  # six rounds whose first token was rejected
    position, streak = rule.position + 1, 0
    while not rule.start_round(position):
        rule.end_round(0, 0, [])
        position, streak = position + 1, streak + 1
    assert 0 < streak <= 40 and position - rule.fed > streak  # plain for a while, with a backlog, then back


def test_cost_aware_never_drafts_a_draft_that_never_pays_however_long_it_waits():
    """A copy of the target costs a pass a call: no window pays even if every token were accepted, so
    the widened estimate (which reaches 1) never makes it draft, over a whole long answer."""
    prices = PassCosts(draft_call_ms=100.0, target_ms=(100.0, 103.0, 106.0))
    assert run_rounds(CostAware(prices), [([0.99] * 20, 20)] * 300) == [0] * 300


def test_a_cost_aware_round_is_planned_at_the_window_the_rule_would_reach():
    """The plan weighs the round at its best window up to where the token-by-token test would stop,
    prices its first call over a drafting round's backlog at most, and is kept per round."""
    rule = CostAware(XEON)
    rule.fed, rule.tokens, rule.time_ms = 0, 40.0, 400.0  # a run going at 100 tokens/s: a high bar
    rule.judged_in_bin[9] = rule.accepted_in_bin[9] = 40  # its draft always right so far
    plan = rule.plan(50)  # a backlog of 50 since the draft last read
    assert plan.first_call_ms == XEON.catch_up(2)
    assert plan.drafts and plan.rate > plan.plain_rate == 1 / 76.9
    assert plan.window == 1  # past the first token, each costs a call and would not clear 100 tokens/s
    assert rule.start_round(50) == 20 and rule.plans == [rule.plan(50)]


def test_cost_aware_never_lowers_its_bar_below_plain_decoding():
    """Bad rounds drag the run's rate below plain decoding's; plain decoding is still to be had, so
    the bar a token must clear stays at its rate (else each bad round would excuse the next)."""
    policy = CostAware(PassCosts(40.0, (100.0, 150.0, 152.0, 154.0)))
    for position in range(0, 8, 2):  # rounds that drafted three tokens and kept none
        policy.start_round(position)
        policy.end_round(3, 0, [0.95] * 3)
    assert policy.tokens / policy.time_ms < 1 / 100
    assert policy.rate() == pytest.approx(1 / 100)


def test_cost_aware_learns_its_draft_calibration_from_the_verdicts():
    policy = CostAware(PassCosts(10.0, (100.0,) * 8))
    before = policy.acceptance(0.95)
    run_rounds(policy, [([0.95, 0.95, 0.95, 0.95], 0)] * 8)  # confident, and always wrong
    assert policy.acceptance(0.95) < before / 2


def test_cost_aware_modes_parse_and_need_prices():
    (spec,) = parse_modes("costaware")
    assert spec == ModeSpec("costaware", {"max_tokens": 20})
    assert parse_modes("costaware:8")[0].params == {"max_tokens": 8}
    with pytest.raises(SpecVizError, match="between 1 and"):
        parse_modes("costaware:0")
    with pytest.raises(SpecVizError, match="named twice"):
        parse_modes("costaware,costaware:20")
    with pytest.raises(SpecVizError, match="pass prices"):
        make_policy(spec)
    policy = make_policy(spec, prices=PassCosts(5.0, (10.0, 11.0)))
    assert policy.label == "cost-aware" and policy.params["prices"] == {"draft_call_ms": 5.0,
                                                                         "target_ms": [10.0, 11.0]}
    assert PassCosts(5.0, (10.0, 11.0)).verify_ms(4) == 13.0  # past the last window: its slope


def test_a_catch_up_costs_one_call_per_token_or_the_measured_call_over_the_backlog():
    apart = PassCosts(10.0, (100.0,))
    together = PassCosts(10.0, (100.0,), catch_up_ms=(10.0, 12.0, 14.0))
    assert [apart.catch_up(n) for n in (1, 3, 7)] == [10.0, 30.0, 70.0]
    assert [together.catch_up(n) for n in (1, 3, 7)] == [10.0, 14.0, 14.0 + 14.0 + 10.0]  # calls of at most 3
    assert PassCosts.from_dict(together.to_dict()) == together
    assert "catch_up_ms" not in apart.to_dict()  # as recorded before catch-up in one call existed


def test_cost_aware_prices_a_plain_stretch_by_the_draft_s_catch_up():
    """After plain rounds the draft reads what it missed: the rule's run time counts it as the
    draft reads it, so a row-exact draft's plain stretch costs it less."""
    runs = {}
    for name, prices in (("apart", PassCosts(10.0, (100.0, 110.0, 120.0))),
                         ("together", PassCosts(10.0, (100.0, 110.0, 120.0), catch_up_ms=(10.0,) + (12.0,) * 31))):
        policy = CostAware(prices)
        policy.start_round(0)
        policy.end_round(2, 2, [0.9, 0.9])  # drafted 2, kept both: position 3, the draft fed up to 1
        for position in (3, 4, 5, 6):
            policy.start_round(position)
            policy.end_round(0, 0, [])
        policy.start_round(7)
        policy.end_round(1, 1, [0.9])
        runs[name] = policy.time_ms
    plain = 120.0 + 4 * 100.0 + 110.0  # the verification passes
    assert runs["apart"] == pytest.approx(plain + 10.0 * 2 + 10.0 * 6)  # first round: backlog 1, a draft
    assert runs["together"] == pytest.approx(plain + 10.0 * 2 + 12.0)  # the backlog of 6 in one call


def test_cost_aware_copies_on_where_a_copied_token_costs_no_draft_call():
    """A hybrid draft's copy costs lookup's step, not a model call: on a copy whose tokens are a
    coin toss each, the rule goes on copying, and stops where the same chances come from the model."""
    hybrid = PassCosts(20.0, (40.0, 41.0, 42.0, 43.0, 44.0, 45.0), copy_ms=0.05)
    model = CostAware(hybrid)
    model.start_round(0)
    assert not model.keep_drafting(DraftStep(0, 7, 0.5))  # the model's token: one more call is not worth it
    copy = CostAware(hybrid)
    copy.start_round(0)
    assert copy.keep_drafting(DraftStep(0, 7, 0.5, copied=4))  # the next is a copy too: nearly free
    assert not copy.keep_drafting(DraftStep(3, 7, 0.5, copied=4))  # the copy's last: the model's call comes next
    lookup = CostAware(PassCosts(20.0, (40.0, 41.0, 42.0, 43.0)))  # no copy price: each step a draft call
    lookup.start_round(0)
    assert not lookup.keep_drafting(DraftStep(0, 7, 0.5, copied=4))
    assert PassCosts.from_dict(hybrid.to_dict()) == hybrid


def test_cost_aware_counts_a_copying_round_without_the_models_calls():
    """A round that only copied leaves the model's cache as it was (its backlog grows); a round
    that copied then drafted pays one catch-up over the backlog and the copies, then a call per
    further model token."""
    prices = PassCosts(10.0, (100.0, 110.0, 120.0, 130.0), catch_up_ms=(10.0, 12.0, 14.0, 16.0), copy_ms=0.5)
    policy = CostAware(prices)
    policy.start_round(0)
    for index in range(2):
        policy.keep_drafting(DraftStep(index, 0, 0.9, copied=2))
    policy.end_round(2, 2, [0.9, 0.9])
    assert policy.time_ms == pytest.approx(2 * 0.5 + 120.0) and policy.fed == -1  # no model call: nothing read
    policy.start_round(3)
    policy.keep_drafting(DraftStep(0, 0, 0.9, copied=1))
    policy.keep_drafting(DraftStep(1, 0, 0.9))  # the model's first token
    policy.keep_drafting(DraftStep(2, 0, 0.9))
    policy.end_round(3, 3, [0.9] * 3)
    # backlog 4 (positions 0-3) and 1 copy: one call of 4 rows and one of 1, then one more call
    assert policy.time_ms == pytest.approx(121.0 + 0.5 + 16.0 + 10.0 + 10.0 + 130.0)
    assert policy.fed == 3 + 2  # read up to its last token but one, as after any round


def test_the_registry_holds_each_policy_once_and_every_reader_agrees_with_it():
    """One entry per policy: its settings' defaults read back through the mode string, its
    policy can be made (with what it needs), and the colours, columns and defaults come from it."""
    from specviz.colors import POLICY_COLORS
    from specviz.decoding.modes import DEFAULT_MODES, POLICIES, format_modes, mode_label
    from specviz.ui.columns import ALL_COLUMNS, EXTRA_COLUMNS

    prices = PassCosts(draft_call_ms=5.0, target_ms=(20.0,))
    for name, kind in POLICIES.items():
        spec = ModeSpec.of(name)
        assert spec.params == kind.defaults()
        assert parse_modes(format_modes([spec])) == [spec]
        policy = make_policy(spec, oracle=Oracle([1, 2]), prices=prices)
        assert policy.name == name and policy.label == mode_label(spec)
        for setting in kind.settings:
            assert setting.low <= setting.default <= (setting.high if setting.high is not None else float("inf"))
    assert list(POLICY_COLORS) == list(POLICIES) and len(set(POLICY_COLORS.values())) == len(POLICIES)
    assert ALL_COLUMNS == list(POLICIES) and EXTRA_COLUMNS == [n for n, k in POLICIES.items() if k.optional]
    assert parse_modes(DEFAULT_MODES) == [ModeSpec.of(n) for n, k in POLICIES.items() if not k.optional]
    with pytest.raises(SpecVizError, match="Cost-aware maximum lookahead"):
        parse_modes("costaware:0")
