"""The real bundled pair (SmolLM2-135M-Instruct, int8 and bf16 drafts): lossless output, the
oracle's optimality, parity with transformers, and the errors a user can hit."""

import pytest

from specviz.core.engine import TransformersDrafter, generate, target_only
from specviz.core.models import check_same_vocabulary, encode_prompt, get_pair
from specviz.core.pipeline import Limits, compare, make_request, prompt_ids_for
from specviz.core.policies import make_policy, parse_modes
from specviz.errors import SpecVizError
from specviz.study.hf_reference import hf_assisted

pytestmark = pytest.mark.slow

PROMPTS = {
    "code": "Write a Python function that returns the second largest number in a list.",
    "prose": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "list": "List ten common kitchen herbs, one per line, with a few words on each.",
    "chat": "Hi! I just moved to a new city and feel a bit lonely. Any advice?",
}


@pytest.fixture(scope="module")
def comparisons(bundled_pair):
    request = {name: make_request(text, "static:5,heuristic:5,dynamic:0.4,oracle", 128)
               for name, text in PROMPTS.items()}
    return {name: compare(bundled_pair, r) for name, r in request.items()}


@pytest.mark.parametrize("name", list(PROMPTS))
def test_every_greedy_policy_is_lossless(comparisons, name):
    c = comparisons[name]
    assert len(c.baseline.token_ids) > 20
    for trace in c.traces:
        assert trace.token_ids == c.baseline.token_ids, (trace.label, trace.first_difference)
        assert trace.lossless is True


@pytest.mark.parametrize("name", list(PROMPTS))
def test_oracle_needs_the_fewest_target_passes_and_accepts_what_it_drafts(comparisons, name):
    c = comparisons[name]
    oracle = c.trace("oracle")
    assert all(r.lookahead == r.accepted for r in oracle.rounds)
    # Exact because the draft's guess at a position depends on the text alone (engine.Drafter);
    # tests/test_exact_oracle.py checks it over prompts of every suite.
    for trace in c.traces:
        assert oracle.target_passes <= trace.target_passes, trace.label
    assert oracle.target_passes <= sum(t.target_passes for t in c.traces) / len(c.traces)
    # the int8 draft disagrees with the target sometimes: there is something to see
    assert c.trace("static k=5").acceptance_rate < 1.0


def test_rounds_carry_the_oracle_ideal_and_display_text(comparisons):
    c = comparisons["code"]
    assert c.oracle_ideal is not None and len(c.oracle_ideal) == len(c.baseline.token_ids)
    trace = c.trace("dynamic t=0.4")
    assert all(r.oracle_ideal == c.oracle_ideal[r.position] for r in trace.rounds)
    assert all(len(r.draft_texts) == r.lookahead for r in trace.rounds)
    shown = "".join("".join(r.draft_texts[: r.accepted]) + (r.target_text or "") for r in trace.rounds)
    assert shown.replace("<|im_end|>", "") == trace.text


@pytest.mark.parametrize("preset", ["smollm2-135m-int8", "smollm2-135m-bf16"])
@pytest.mark.parametrize("mode", ["static:5", "heuristic:5", "dynamic:0.4:20", "adaptive:0.4:20"])
def test_parity_with_transformers(preset, mode):
    """Fed as transformers feeds its assistant (TransformersDrafter), the engine makes the same
    rounds: the same tokens and the same passes of both models, on the real quantized draft."""
    pair = get_pair(preset)
    spec = parse_modes(mode)[0]
    for prompt in (PROMPTS["code"], PROMPTS["chat"], PROMPTS["list"]):
        ids = encode_prompt(pair, prompt)
        ours = generate(pair, ids, make_policy(spec), 64, feeding=TransformersDrafter)
        theirs = hf_assisted(pair, ids, spec, 64)
        assert ours.token_ids == theirs.token_ids
        assert ours.target_passes == theirs.target_calls
        assert ours.draft_passes == theirs.draft_calls


def test_bf16_draft_agrees_more_than_int8(bundled_pair, bundled_bf16_pair):
    ids = encode_prompt(bundled_pair, PROMPTS["code"])
    int8 = generate(bundled_pair, ids, make_policy(parse_modes("static:5")[0]), 64)
    bf16 = generate(bundled_bf16_pair, ids, make_policy(parse_modes("static:5")[0]), 64)
    assert bf16.acceptance_rate > int8.acceptance_rate
    assert int8.token_ids == bf16.token_ids == target_only(bundled_pair, ids, 64).token_ids


# ---- bad input: one error type, a readable message ------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": ""}, "empty"),
    ({"prompt": "   \n\t "}, "empty"),
    ({"max_new_tokens": 0}, "between 1 and"),
    ({"max_new_tokens": -5}, "between 1 and"),
    ({"max_new_tokens": 100_000}, "between 1 and"),
    ({"temperature": -1.0}, "Temperature"),
    ({"modes": "dynamic:1.5"}, "threshold"),
    ({"modes": "static:0"}, "between 1"),
    ({"modes": "heuristic:1000"}, "between 1"),
])
def test_bad_requests_raise_one_clear_error(kwargs, message):
    args = {"prompt": "Hello", "modes": "static:5", "max_new_tokens": 16, **kwargs}
    with pytest.raises(SpecVizError, match=message):
        make_request(**args)


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(SpecVizError, match="Unknown preset 'gpt-17'"):
        get_pair("gpt-17")


def test_prompt_longer_than_the_limit_is_a_clear_error(bundled_pair):
    request = make_request("word " * 9000, "static:5", 64)  # over 8192 - 64 tokens
    with pytest.raises(SpecVizError, match="prompt is .* tokens long"):
        prompt_ids_for(bundled_pair, request, Limits(max_prompt_tokens=2048))
    with pytest.raises(SpecVizError, match="context"):
        prompt_ids_for(bundled_pair, request, Limits(max_prompt_tokens=100_000))


def test_mismatched_vocabularies_are_refused(bundled_pair):
    import copy

    other = copy.deepcopy(bundled_pair.tokenizer)
    other.add_tokens(["<a-token-the-target-does-not-have>"])
    with pytest.raises(SpecVizError, match="different vocabularies"):
        check_same_vocabulary(bundled_pair.tokenizer, other)
    check_same_vocabulary(bundled_pair.tokenizer, copy.deepcopy(bundled_pair.tokenizer))


def test_hub_preset_offline_fails_fast_with_the_preset_name(monkeypatch, tmp_path):
    from specviz.core.models import load_pair

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(SpecVizError, match="'qwen2.5-1.5b'.*Qwen/Qwen2.5-1.5B-Instruct"):
        load_pair("qwen2.5-1.5b")
