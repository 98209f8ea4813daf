"""Policy rules on scripted inputs: no models."""

import pytest

from specviz.errors import SpecVizError
from specviz.policies import (
    MAX_LOOKAHEAD,
    DraftStep,
    Dynamic,
    Heuristic,
    ModeSpec,
    Oracle,
    Static,
    make_policy,
    parse_modes,
)


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


def test_oracle_uses_its_budgets_then_the_ideal_line():
    policy = Oracle({0: 4, 5: 0}, ideal=[4, 3, 2, 1, 0, 0, 7])
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
