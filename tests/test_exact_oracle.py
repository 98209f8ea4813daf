"""The oracle is the true ideal on the real bundled pairs, over prompts from every suite.

The engine feeds the draft one token per call after the prompt (drafters.ModelDrafter), so the draft's
guess at an answer position is a function of the text alone. Then, for every greedy policy:

- every round accepts exactly min(its lookahead, the oracle's ideal at its start). A round cut
  by the token budget is no exception: the engine caps the lookahead (one slot is kept for the
  target's token), and the rule holds for the capped lookahead. A round that ends at EOS is no
  exception either: the draft stops at an EOS guess, and the ideal counts the reference's EOS;
- the oracle needs no more target passes than any policy;
- the what-if sweep's replay of each setting that was run predicts its target and draft passes
  exactly;
- each round carries the oracle's ideal and the draft's tokens as text, which spell the answer.
"""

import pytest

from specviz.decoding.modes import make_policy, parse_modes
from specviz.decoding.pipeline import compare, make_request
from specviz.explain.sweep import replay
from specviz.study.bench import read_suite
from specviz.study.runner import DEFAULT_SUITES

pytestmark = pytest.mark.slow

MODES = "static:5,heuristic:5,dynamic:0.4,adaptive:0.4,entropy:1.0,oracle"
MAX_NEW_TOKENS = 32  # 6 to 16 rounds a policy; the study checks the same over 128
PER_SUITE = 2  # 6 prompts: coding, summarization, questions (3 each took 4.7 and 3.8 min of a worker)


def suite_prompts():
    return [item for suite in DEFAULT_SUITES for item in read_suite(suite, limit=PER_SUITE)]


# Each preset's comparisons are computed once, in one xdist worker (tests/conftest.py hands this
# module out by preset): the two presets run side by side.
@pytest.fixture(scope="module", params=["smollm2-135m-int8", "smollm2-135m-bf16"])
def comparisons(request):
    from specviz.pair.models import get_pair

    pair = get_pair(request.param)
    return pair, [compare(pair, make_request(item.prompt, MODES, MAX_NEW_TOKENS)) for item in suite_prompts()]


def test_prompts_come_from_every_suite():
    assert {item.suite for item in suite_prompts()} == {"coding", "summarization", "questions"}
    assert len(suite_prompts()) >= 6


def test_every_round_meets_the_ideal_line(comparisons):
    _, runs = comparisons
    checked = 0
    for c in runs:
        for trace in c.traces:
            assert trace.lossless, (c.prompt[:40], trace.label, trace.first_difference)
            for r in trace.rounds:
                assert r.accepted == min(r.lookahead, c.oracle_ideal[r.position]), (c.prompt[:40], trace.label, r)
                checked += 1
    # Not a vacuous check: six policies make at least 20 rounds a prompt (about 30 on the bf16 pair, whose
    # draft is rarely wrong: the fewest; the oracle alone can need 2)
    assert checked >= 20 * len(runs), checked


def test_every_policy_answers_at_length_and_the_int8_draft_is_wrong_at_times(comparisons):
    pair, runs = comparisons
    for c in runs:
        assert len(c.baseline.token_ids) > 16, c.prompt[:40]
    if pair.preset == "smollm2-135m-int8":  # there is something to see: rejections on every prompt but
        # at most one (a summary that copies its text can be drafted without a miss: seen with the
        # fp32-packed target on an AVX2 EPYC)
        missed = [c.prompt[:40] for c in runs if c.trace("static k=5").acceptance_rate < 1.0]
        assert len(missed) >= len(runs) - 1, missed


def test_the_oracle_needs_the_fewest_target_passes(comparisons):
    _, runs = comparisons
    for c in runs:
        oracle = c.trace("oracle")
        assert all(r.accepted == r.lookahead for r in oracle.rounds)
        for trace in c.traces:
            assert oracle.target_passes <= trace.target_passes, (c.prompt[:40], trace.label)


def test_the_what_if_replay_is_exact_for_every_setting_run(comparisons):
    pair, runs = comparisons
    for c in runs:
        for spec, trace in zip([s for s in parse_modes(MODES) if s.policy != "oracle"], c.traces):
            predicted = replay(c, make_policy(spec), eos_ids=pair.eos_token_ids)
            assert (predicted.target_passes, predicted.draft_passes) == (trace.target_passes, trace.draft_passes), \
                (c.prompt[:40], trace.label)
        oracle = c.trace("oracle")
        predicted = replay(c, make_policy(parse_modes("oracle")[0], oracle=_oracle_of(c)), eos_ids=pair.eos_token_ids)
        assert (predicted.target_passes, predicted.draft_passes) == (oracle.target_passes, oracle.draft_passes)


def _oracle_of(c):
    from specviz.decoding.policies import Oracle

    return Oracle(c.oracle_ideal)


def test_rounds_carry_the_oracle_ideal_and_display_text(comparisons):
    _, runs = comparisons
    for c in runs:
        assert c.oracle_ideal is not None and len(c.oracle_ideal) == len(c.baseline.token_ids)
        for trace in c.traces:
            assert all(r.oracle_ideal == c.oracle_ideal[r.position] for r in trace.rounds), trace.label
            assert all(len(r.draft_texts) == r.lookahead for r in trace.rounds), trace.label
            shown = "".join("".join(r.draft_texts[: r.accepted]) + (r.target_text or "") for r in trace.rounds)
            assert shown.replace("<|im_end|>", "") == trace.text, (c.prompt[:40], trace.label)
