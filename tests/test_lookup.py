"""The lookup draft (prompt lookup): its proposal rule against transformers', its count
probabilities, the no-match round, losslessness, the oracle's ideal, and the CLI's errors.
Parity with transformers' `generate(prompt_lookup_num_tokens=k)` on the bundled target is the
slow test at the end."""

import random

import pytest
import torch

from specviz.cli import main
from specviz.decoding.drafts import DEFAULT_DRAFT, DRAFTS, DraftSpec
from specviz.decoding.engine import generate, target_only
from specviz.decoding.lookup import LookupSettings, propose
from specviz.decoding.oracle import fewest_rounds, finish
from specviz.decoding.policies import Adaptive, CostAware, Dynamic, Entropy, Heuristic, PassCosts, Static
from specviz.errors import SpecVizError

DEFAULT = LookupSettings()
LOOKUP = DRAFTS["lookup"]  # the lookup draft's entry in the draft registry


def lookup_drafter(settings: LookupSettings = DEFAULT):
    """What the engine makes a run's lookup drafter with (the registry entry's `make`)."""
    return LOOKUP.make(settings.to_dict())


def transformers_candidates(text: list[int], settings: LookupSettings, eos: list[int]) -> list[int]:
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    generator = PromptLookupCandidateGenerator(eos_token_id=torch.tensor(eos) if eos else None,
                                               num_output_tokens=settings.max_tokens,
                                               max_matching_ngram_size=settings.max_ngram, max_length=10_000)
    candidates, _ = generator.get_candidates(torch.tensor([text]))
    return candidates[0, len(text):].tolist()


def test_the_proposal_is_transformers_prompt_lookup_on_many_texts():
    """Leftmost match of the longest n-gram that recurs, its continuation cut at the text's end,
    at max_tokens and before EOS; nothing when nothing matches: as transformers proposes, on
    2000 random texts over small vocabularies (so that matches of every kind happen)."""
    rng = random.Random(0)
    kinds = 0
    for _ in range(2000):
        vocab = rng.choice([3, 5, 12, 40])
        text = [rng.randrange(vocab) for _ in range(rng.randint(1, 60))]
        settings = LookupSettings(max_ngram=rng.randint(1, 4), max_tokens=rng.randint(1, 12))
        eos = [rng.randrange(vocab)] if rng.random() < 0.3 else []
        found = propose(text, settings, frozenset(eos))
        assert found.ids == transformers_candidates(text, settings, eos), (text, settings, eos)
        assert len(found.probs) == len(found.entropies) == len(found.ids)
        if found.ids:
            assert text[found.source:found.source + len(found.ids)] == found.ids
        kinds += bool(found.ids)
    assert 500 < kinds < 2000  # both proposals and empty rounds were checked


def test_each_token_gets_the_share_of_earlier_occurrences_that_continue_with_it():
    # "1 2" occurs three times before the end: followed by 3, 5 and 3. The leftmost gives 3 4 ...
    text = [1, 2, 3, 4, 9, 1, 2, 5, 8, 1, 2, 3, 7, 1, 2]
    found = propose(text, DEFAULT)
    assert found.ids == [3, 4, 9, 1, 2, 5, 8, 1, 2, 3] and found.source == 2 and found.ngram == 2
    # 3 continues 2 of 3 occurrences; after "1 2 3", 4 continues 1 of 2; then one precedent left
    assert found.probs[:3] == pytest.approx([2 / 3, 1 / 2, 1.0])
    assert found.entropies[0] == pytest.approx(-(2 / 3) * torch.log(torch.tensor(2 / 3)).item()
                                               - (1 / 3) * torch.log(torch.tensor(1 / 3)).item())
    assert found.entropies[2] == 0.0


def test_a_shorter_ngram_is_tried_when_the_longer_never_recurred():
    found = propose([4, 1, 6, 2, 1], LookupSettings(max_ngram=2, max_tokens=3))
    assert found.ngram == 1 and found.ids == [6, 2, 1] and found.probs == [1.0, 1.0, 1.0]


def test_no_match_drafts_nothing_and_the_round_is_a_plain_step(tiny_pair):
    assert propose([1, 2, 3, 4], DEFAULT).ids == [] and propose([5], DEFAULT).source is None
    # a prompt of distinct tokens and one new token: the first round cannot copy anything
    trace = generate(tiny_pair, [0, 1, 2, 3], Static(5), 1, make_drafter=lookup_drafter(DEFAULT))
    assert [r.lookahead for r in trace.rounds] == [0] and trace.draft_passes == 0


@pytest.mark.parametrize("kwargs", [{"max_ngram": 0}, {"max_ngram": 9}, {"max_tokens": 0}, {"max_tokens": 65},
                                    {"max_tokens": 2.5}, {"max_ngram": True}, {"max_tokens": "10"}])
def test_hostile_settings_are_one_line_errors(kwargs):
    with pytest.raises(SpecVizError) as error:
        LookupSettings(**kwargs)
    assert "\n" not in str(error.value) and "lookup" in str(error.value)


PROMPTS = [[1, 2, 3, 1, 2, 3, 1, 2], [5], [7, 7, 7, 7, 2, 0, 1], [3, 1, 4, 1, 5, 2, 6, 5, 3, 5], [9, 8, 9, 8, 9]]


def lookup_policies():
    return [Static(3), Static(10), Heuristic(5), Dynamic(0.4, max_tokens=20), Dynamic(0.9, max_tokens=20),
            Entropy(0.5, max_tokens=20)]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_every_greedy_policy_with_a_lookup_draft_is_lossless_and_counts_no_draft_pass(tiny_pair, prompt):
    reference = target_only(tiny_pair, prompt, 50).token_ids
    accepted = 0
    for settings in (DEFAULT, LookupSettings(max_ngram=1, max_tokens=4), LookupSettings(max_ngram=3, max_tokens=16)):
        for policy in lookup_policies():
            trace = generate(tiny_pair, prompt, policy, 50, make_drafter=lookup_drafter(settings))
            assert trace.token_ids == reference, (policy.label, settings)
            assert trace.draft_passes == 0 and trace.target_passes == len(trace.rounds)
            assert all(r.lookahead <= settings.max_tokens for r in trace.rounds)
            accepted += trace.accepted
    assert accepted > 0  # the answer repeats itself: lookup drafts were made and kept


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_lookup_oracle_needs_fewest_target_passes_and_rounds_meet_the_ideal(tiny_pair, prompt):
    settings = DEFAULT
    reference = target_only(tiny_pair, prompt, 60).token_ids
    oracle, ideal, along = finish(LOOKUP.oracle(tiny_pair, prompt, reference, settings.to_dict()))
    assert along is None  # the what-if recomputes a lookup's proposals from the text: no table
    drafter = lookup_drafter(settings)
    best = generate(tiny_pair, prompt, oracle, 60, make_drafter=drafter)
    assert best.token_ids == reference and all(r.accepted == r.lookahead for r in best.rounds)
    for policy in lookup_policies():
        trace = generate(tiny_pair, prompt, policy, 60, make_drafter=drafter)
        assert best.target_passes <= trace.target_passes, policy.label
        # the proposal is a function of the text before the round: each round meets the ideal
        assert all(r.accepted == min(r.lookahead, ideal[r.position]) for r in trace.rounds), policy.label


def test_the_oracle_may_stop_short_of_the_ideal_when_that_saves_a_round():
    # drafting 1 at position 0 reaches position 2, where 7 tokens are right: 2 rounds to 10;
    # drafting all 2 reaches position 3, from where one token a round is all there is
    ideal = [2, 0, 7, 0, 0, 0, 0, 0, 0, 0]
    plan = fewest_rounds(ideal)
    assert plan[0] == 1 and plan[2] == 7
    assert fewest_rounds([3, 2, 1, 0]) == [3, 2, 1, 0]  # a model draft's shape: the greedy plan


@pytest.mark.slow
def test_sampling_with_a_lookup_draft_runs_and_keeps_the_target_distribution(tiny_unrelated_pair):
    """A lookup draft's proposal is certain, so rejection sampling keeps a copied token with the
    target's own probability for it. Over many seeds, the first answer token's frequencies match
    the target's distribution."""
    pair = tiny_unrelated_pair
    prompt = [1, 2, 3, 1, 2]  # "1 2" recurs: the first round copies 3 1 2
    counts = torch.zeros(pair.vocab_size)
    runs = 600
    for seed in range(runs):
        trace = generate(pair, prompt, Static(3), 2, temperature=1.0, seed=seed,
                         make_drafter=lookup_drafter(DEFAULT))
        assert trace.rounds[0].lookahead == 1  # room for one draft token and the target's
        counts[trace.token_ids[0]] += 1
    with torch.inference_mode():
        logits = pair.target(torch.tensor([prompt])).logits[0, -1, : pair.vocab_size].float()
    expected = torch.softmax(logits, dim=-1)
    assert torch.allclose(counts / runs, expected, atol=0.06)


def test_the_cli_offers_the_lookup_draft_and_refuses_bad_settings(capsys):
    assert main(["compare", "--prompt", "hi", "--draft", "lookup", "--lookup-tokens", "0"]) == 2
    assert main(["compare", "--prompt", "hi", "--draft", "lookup", "--lookup-ngram", "99"]) == 2
    err = capsys.readouterr().err
    assert "tokens per lookup must be a whole number from 1 to 64, got 0" in err
    assert "n-gram size must be a whole number from 1 to 8, got 99" in err and "Traceback" not in err


# ---- the real bundled target -----------------------------------------------------------------

EDIT_PROMPT = """Rename the variable `total` to `running_sum` in this function and return the code:

def mean(values):
    total = 0
    for value in values:
        total += value
    return total / len(values)
"""


@pytest.mark.slow
@pytest.mark.parametrize("num_tokens", [3, 10])
def test_parity_with_transformers_prompt_lookup(bundled_pair, num_tokens):
    """Greedy, static k = num_tokens: the same tokens and target passes as transformers'
    `generate(prompt_lookup_num_tokens=k)` on the bundled target, on prompts that copy a lot,
    a little and not at all."""
    from specviz.pair.models import encode_prompt
    from specviz.study.hf_reference import hf_prompt_lookup

    prompts = [EDIT_PROMPT, "Write a Python function that returns the second largest number in a list.",
               "Repeat this sentence three times: the quick brown fox jumps over the lazy dog."]
    for prompt in prompts:
        ids = encode_prompt(bundled_pair, prompt)
        ours = generate(bundled_pair, ids, Static(num_tokens), 40,
                        make_drafter=lookup_drafter(LookupSettings(max_tokens=num_tokens)))
        theirs = hf_prompt_lookup(bundled_pair, ids, num_tokens, 40)
        assert ours.token_ids == theirs.token_ids
        assert ours.target_passes == theirs.target_calls
        assert ours.draft_passes == 0


# ---- the page and the API ----------------------------------------------------------------------


@pytest.mark.parametrize("draft, ngram, tokens, says", [
    ("telepathy", 2, 10, 'The draft must be "model" or "lookup"'),
    ("lookup", 2.5, 10, "The lookup n-gram must be a whole number"),
    ("lookup", float("nan"), 10, "The lookup n-gram"),
    ("lookup", 2, 0, "tokens per lookup must be a whole number from 1 to 64"),
    ("lookup", 2, 10**9, "tokens per lookup must be a whole number from 1 to 64"),
    ("lookup", -1, 10, "n-gram size must be a whole number from 1 to 8"),
])
def test_the_page_and_the_api_refuse_hostile_lookup_settings_in_one_line(draft, ngram, tokens, says):
    from specviz.ui import endpoints
    from specviz.ui.inputs import draft_value

    with pytest.raises(SpecVizError, match=says) as error:
        draft_value(draft, lookup_ngram=ngram, lookup_tokens=tokens)
    assert "\n" not in str(error.value)
    import gradio as gr

    with pytest.raises(gr.Error, match=says):  # the API endpoint says it to the client before any model work
        next(endpoints.compare("Hello", draft=draft, lookup_ngram=ngram, lookup_tokens=tokens))


def test_the_draft_model_stays_the_default_everywhere():
    from specviz.ui.inputs import draft_value

    assert draft_value("model", lookup_ngram=2, lookup_tokens=10) == DEFAULT_DRAFT
    assert draft_value(None, lookup_ngram=None, lookup_tokens=None) == DEFAULT_DRAFT
    # number boxes give floats
    given = draft_value("lookup", lookup_ngram=2.0, lookup_tokens=10.0)
    assert given == DraftSpec("lookup", LookupSettings(2, 10).to_dict())


def test_a_copied_token_says_where_it_was_copied_from_and_escapes_it():
    from specviz.decoding.trace import Round
    from specviz.ui.render import _round_html

    copied = Round(index=2, position=7, budget=10, draft_ids=[5, 6], draft_probs=[0.5, 1.0], accepted=1,
                   target_id=9, draft_source=40, draft_texts=["<b>", "x"], target_text="y")
    html = _round_html(copied, None)
    assert "copied from token 40 of the prompt and answer · share p=0.50" in html
    assert "copied from token 41" in html and "<b>" not in html and "&lt;b&gt;" in html
    modeled = Round(index=0, position=0, budget=2, draft_ids=[5], draft_probs=[0.9], accepted=1, target_id=9)
    assert "draft p=0.90" in _round_html(modeled, None) and "copied" not in _round_html(modeled, None)


def test_a_lookup_comparison_round_trips_and_a_model_one_keeps_its_file_form():
    from specviz.decoding.trace import Baseline, Comparison, Round, Trace
    from specviz.ui.columns import done_message

    rounds = [Round(index=0, position=0, budget=3, draft_ids=[1, 2], draft_probs=[1.0, 0.5], accepted=2, target_id=3,
                    draft_passes=0, draft_source=4)]
    trace = Trace("static", "static k=3", {}, [1, 2, 3], rounds, 0.1, "max_new_tokens")
    baseline = Baseline(token_ids=[1, 2, 3], wall_s=0.2, stop_reason="max_new_tokens")
    lookup = DraftSpec("lookup", {"max_ngram": 2, "max_tokens": 10})
    comparison = Comparison("p", "x", 3, baseline, [trace], draft=lookup)
    assert comparison.to_dict()["lookup"] == {"max_ngram": 2, "max_tokens": 10}  # the file's field, as it always was
    again = Comparison.from_dict(comparison.to_dict())
    assert again.draft == comparison.draft and again.traces[0].rounds[0].draft_source == 4
    assert again.traces[0].draft_passes == 0
    assert "drafts by prompt lookup (n-gram 2, 10 tokens, no draft model)" in done_message(comparison)
    model = Comparison("p", "x", 3, baseline, [Trace("static", "static k=3", {}, [], [], 0.1, "eos")])
    assert "lookup" not in model.to_dict() and "lookup" not in done_message(model)
    plain = Round(index=0, position=0, budget=1, draft_ids=[1], draft_probs=[0.9], accepted=1, target_id=3)
    assert "draft_source" not in Comparison("p", "x", 2, baseline, [Trace("static", "static k=1", {}, [1, 3], [plain], 0.1,
                                                                          "eos")]).to_dict()["modes"][0]["rounds"][0]


def test_the_round_replay_says_where_a_lookup_copied_from(tiny_pair):
    from specviz.ui.replay import replay_html, replay_step

    trace = generate(tiny_pair, PROMPTS[0], Static(4), 20, make_drafter=lookup_drafter(DEFAULT))
    copied = next(i for i, r in enumerate(trace.rounds) if r.lookahead)
    step = replay_step(trace, copied)
    assert step.copied_from == trace.rounds[copied].draft_source is not None and step.draft_passes == 0
    assert f"copied from token {step.copied_from} of the prompt and answer" in replay_html(step)


def replay_policies():
    step_ms = LOOKUP.step_ms  # what the cost-aware rule is told a lookup's step costs
    return [Static(1), Static(4), Static(10), Heuristic(2), Heuristic(5), Dynamic(0.3, max_tokens=20),
            Dynamic(0.7, max_tokens=20), Adaptive(0.4), Entropy(0.5, max_tokens=20),
            CostAware(PassCosts(step_ms, (10.0, 11.0, 12.0)))]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_what_if_replays_a_lookup_run_exactly(tiny_pair, prompt):
    """A lookup's proposal is a function of the text: the replay, recomputing it from the prompt
    and the answer, gives every policy's real target passes and plain passes, for every policy."""
    from specviz.decoding.trace import Comparison
    from specviz.explain.costs import plain_passes
    from specviz.explain.sweep import can_replay, replayed_passes, sweep

    for settings in (DEFAULT, LookupSettings(max_ngram=1, max_tokens=4)):
        baseline = target_only(tiny_pair, prompt, 50)
        runs = [generate(tiny_pair, prompt, policy, 50, make_drafter=lookup_drafter(settings))
                for policy in replay_policies()]
        comparison = Comparison("tiny", "tiny", 50, baseline, runs[:2], prompt_tokens=len(prompt),
                                draft=DraftSpec("lookup", settings.to_dict()), prompt_ids=list(prompt))
        comparison = Comparison.from_dict(comparison.to_dict())  # as a file keeps it
        assert can_replay(comparison)
        for policy, run in zip(replay_policies(), runs):
            passes = replayed_passes(comparison, policy, tiny_pair.eos_token_ids)
            assert (passes.target, passes.draft) == (run.target_passes, 0), (policy.label, settings)
            assert passes.plain == plain_passes([r.lookahead for r in run.rounds]), (policy.label, settings)
        result = sweep(comparison, tiny_pair.eos_token_ids)
        assert len(result.thresholds) and all(r.draft_passes == 0 for r in result.static)
    # a lookup comparison from before it kept its prompt is not replayed
    before = Comparison("tiny", "tiny", 50, baseline, [], draft=DraftSpec("lookup", DEFAULT.to_dict()))
    assert not can_replay(before)
