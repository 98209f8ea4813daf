"""The real bundled pair (SmolLM2-135M-Instruct, int8 and bf16 drafts): parity with transformers,
the bf16 draft's agreement, and the errors a user can hit. Lossless output and the oracle's
optimality over prompts of every suite: tests/test_exact_oracle.py."""

import pytest

from specviz.decoding.drafters import TransformersDrafter
from specviz.decoding.engine import generate, target_only
from specviz.decoding.modes import make_policy, parse_modes
from specviz.decoding.pipeline import Limits, make_request, prompt_ids_for
from specviz.errors import SpecVizError
from specviz.pair.models import check_same_vocabulary, encode_prompt, get_pair
from specviz.study.hf_reference import hf_assisted

pytestmark = pytest.mark.slow

PROMPTS = {
    "code": "Write a Python function that returns the second largest number in a list.",
    "prose": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "list": "List ten common kitchen herbs, one per line, with a few words on each.",
    "chat": "Hi! I just moved to a new city and feel a bit lonely. Any advice?",
}


@pytest.mark.parametrize("preset", ["smollm2-135m-int8", "smollm2-135m-bf16"])
@pytest.mark.parametrize("mode, prompts", [("static:5", ("code", "chat")), ("heuristic:5", ("chat",)),
                                           ("dynamic:0.4:20", ("code",)), ("adaptive:0.4:20", ("chat",))])
def test_parity_with_transformers(preset, mode, prompts):
    """Fed as transformers feeds its assistant (TransformersDrafter), the engine makes the same
    rounds: the same tokens and the same passes of both models, on the real quantized draft
    (32 new tokens: 6 to 15 rounds a prompt, every one of which must match; both prompts for the
    static rule, one each for the others, so that each prompt meets a fixed and a confidence rule)."""
    pair = get_pair(preset)
    spec = parse_modes(mode)[0]
    for prompt in (PROMPTS[name] for name in prompts):
        ids = encode_prompt(pair, prompt)
        ours = generate(pair, ids, make_policy(spec), 32, make_drafter=TransformersDrafter.for_pair)
        theirs = hf_assisted(pair, ids, spec, 32)
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
    from specviz.pair.models import load_pair

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(SpecVizError, match="'qwen2.5-1.5b'.*Qwen/Qwen2.5-1.5B-Instruct"):
        load_pair("qwen2.5-1.5b")
