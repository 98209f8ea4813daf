"""The hybrid draft (decoding/hybrid.py, drafts.DRAFTS["hybrid"]): prompt lookup's copy where the
context matches, the pair's draft model where it does not or after the copy. On the tiny pair:
its proposal on constructed contexts (a match, no match, a copy ending mid-round), the model's
catch-up after copied rounds (its guesses those of a fresh draft fed the text, bit for bit, on a
draft fed one token per call and on a row-exact one), losslessness under every greedy policy, the
oracle the ideal, the what-if exact, and the page's marks."""

import dataclasses

import pytest
import torch

from specviz.decoding.drafters import ModelDrafter, Sampler
from specviz.decoding.drafts import DRAFTS, DraftSpec, parse_draft
from specviz.decoding.engine import generate, target_only
from specviz.decoding.hybrid import HybridSettings
from specviz.decoding.lookup import STEP_MS, propose
from specviz.decoding.oracle import finish, make_oracle
from specviz.decoding.policies import Adaptive, CostAware, Dynamic, Entropy, Heuristic, PassCosts, Static
from specviz.decoding.trace import Comparison

HYBRID = DRAFTS["hybrid"]
# Every match copied, as lookup alone copies (the tiny prompts' repeats are short); the registry's
# default copies only matches of 3 tokens or more (test_a_short_match_is_left_to_the_model).
DEFAULT = HybridSettings(max_ngram=2, max_tokens=10, min_ngram=1)
NONE = frozenset()
# Prompts whose answers repeat their context at times (copied rounds), and one of distinct tokens.
PROMPTS = [[1, 2, 3, 1, 2, 3, 1, 2], [7, 7, 7, 7, 2, 0, 1], [3, 1, 4, 1, 5, 2, 6, 5, 3, 5], [9, 8, 9, 8, 9],
           [0, 1, 2, 3, 4]]
TOKENS = 40


def hybrid_drafter(pair, prompt, settings: HybridSettings = DEFAULT):
    """What the engine makes a run's hybrid drafter with (the registry entry's `make`)."""
    return HYBRID.make(settings.to_dict())(pair, prompt)


def make(settings: HybridSettings = DEFAULT):
    return HYBRID.make(settings.to_dict())


def fresh(pair, prompt):
    """The pair's draft model alone, fed the text one token per call after the prompt."""
    return ModelDrafter(pair.draft, pair.vocab_size, pair.device, prompt, row_exact=False)


SHORT = HybridSettings(max_ngram=2, max_tokens=3, min_ngram=1)  # copies shorter than most budgets: the model drafts after them


@pytest.fixture(scope="module")
def row_exact_pair(tiny_pair):
    """The tiny pair with its draft in the bundled int8 set-up: row-exact, so that each round's
    backlog (and the copied tokens) is read in one call."""
    from specviz.pair.models import int8_draft

    return dataclasses.replace(tiny_pair, draft=int8_draft(tiny_pair.draft), draft_row_exact=True)


def greedy_policies():
    return [Static(1), Static(4), Static(12), Heuristic(5), Dynamic(0.4, max_tokens=20), Dynamic(0.9, max_tokens=20),
            Adaptive(0.4), Entropy(0.5, max_tokens=20)]


# ---- the registry entry ----------------------------------------------------------------------


def test_the_hybrid_is_a_draft_of_its_own_with_lookups_settings_and_the_models_prices():
    assert HYBRID.title == "lookup, then the draft model" and HYBRID.counts_passes and not HYBRID.from_text
    assert HYBRID.keeps_prompt  # its what-if recomputes the copy from the prompt
    assert HYBRID.defaults() == HybridSettings().to_dict() == {"max_ngram": 4, "max_tokens": 10, "min_ngram": 3}
    assert parse_draft("hybrid:3:16") == DraftSpec("hybrid", {"max_ngram": 3, "max_tokens": 16, "min_ngram": 3})
    assert parse_draft("hybrid:2:10:1") == DraftSpec("hybrid", DEFAULT.to_dict())
    assert DraftSpec.of("hybrid").label == "hybrid (n-gram 3-4, 10 tokens)"
    measured = PassCosts(20.0, (30.0, 31.0), catch_up_ms=(20.0, 21.0))
    # the model's calls are its passes, at the model's prices; a copied token at lookup's step
    assert HYBRID.prices(measured) == PassCosts(20.0, (30.0, 31.0), (20.0, 21.0), copy_ms=STEP_MS)
    from specviz.errors import SpecVizError

    with pytest.raises(SpecVizError, match="n-gram size must be a whole number from 1 to 8"):
        parse_draft("hybrid:0")
    with pytest.raises(SpecVizError, match=r"shortest n-gram must be a whole number from 1 to its longest \(2\)"):
        parse_draft("hybrid:2:10:3")


# ---- its proposal on constructed contexts ------------------------------------------------------


def test_a_matching_context_proposes_the_copied_span_with_no_draft_pass(tiny_pair):
    text = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]  # "1 2" occurred at 0: the copy is 3 4 5 6 ...
    settings = HybridSettings(max_ngram=2, max_tokens=4, min_ngram=1)
    found = propose(text, settings.lookup)
    drafter = hybrid_drafter(tiny_pair, text, settings)
    with torch.inference_mode():
        proposal = drafter.propose(text, 4, Static(4), Sampler(), NONE)
    assert proposal.ids == found.ids == [3, 4, 5, 6] and proposal.probs == found.probs
    assert proposal.entropies == found.entropies
    assert proposal.source == 2 and proposal.copied == 4
    assert drafter.passes == 0 and drafter.prefill_s == 0  # the draft model never ran


def test_a_short_match_is_left_to_the_model(tiny_pair):
    """The registry's default copies a match of 3 tokens or more: after a 2-token match the model drafts."""
    text = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]  # "1 2" occurred at 0, no longer n-gram did
    assert propose(text, DEFAULT.lookup).ngram == 2 and propose(text, HybridSettings().lookup, shortest=3).ids == []
    drafter, model = hybrid_drafter(tiny_pair, text, HybridSettings()), fresh(tiny_pair, text)
    with torch.inference_mode():
        proposal = drafter.propose(text, 4, Static(4), Sampler(), NONE)
        own = model.propose(text, 4, Static(4), Sampler(), NONE)
    assert proposal.ids == own.ids and proposal.copied == 0 and proposal.source is None
    longer = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]  # "1 2 3" occurred at 0: copied
    with torch.inference_mode():
        copied = hybrid_drafter(tiny_pair, longer, HybridSettings()).propose(longer, 4, Static(4), Sampler(), NONE)
    assert copied.ids == [4, 5, 6, 7] and copied.copied == 4


def test_no_match_proposes_the_draft_models_own_tokens(tiny_pair):
    text = [0, 1, 2, 3, 4, 5]  # distinct tokens: nothing to copy
    assert propose(text, DEFAULT.lookup).ids == []
    drafter, model = hybrid_drafter(tiny_pair, text), fresh(tiny_pair, text)
    with torch.inference_mode():
        proposal = drafter.propose(text, 5, Static(5), Sampler(), NONE)
        own = model.propose(text, 5, Static(5), Sampler(), NONE)
    assert proposal.ids == own.ids and len(own.ids) == 5
    assert proposal.probs == own.probs and proposal.entropies == own.entropies
    assert proposal.source is None and proposal.copied == 0
    assert drafter.passes == model.passes == 1 + 1 + 4  # the prompt's prefill, its last token, four more


def test_a_copy_ending_mid_round_is_followed_by_the_models_tokens(tiny_pair):
    text = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
    settings = HybridSettings(max_ngram=2, max_tokens=2, min_ngram=1)  # the copy: 3 4, then the model
    drafter, model = hybrid_drafter(tiny_pair, text, settings), fresh(tiny_pair, text)
    with torch.inference_mode():
        proposal = drafter.propose(text, 5, Static(5), Sampler(), NONE)
        own = model.propose(text + [3, 4], 3, Static(3), Sampler(), NONE)  # the model after the text and the copy
    assert proposal.ids[:2] == [3, 4] and proposal.copied == 2 and proposal.source == 2
    assert proposal.probs[:2] == propose(text, settings.lookup).probs
    assert proposal.ids[2:] == own.ids and proposal.probs[2:] == own.probs and len(proposal.ids) == 5
    # the model read the prompt but its last token, then its last token and the copy one per call, then two drafts
    assert drafter.passes == model.passes == 1 + 3 + 2


def test_the_policy_stopping_in_the_copy_ends_the_round_there(tiny_pair):
    text = [1, 2, 3, 4, 1, 2, 5, 6, 1, 2, 3, 7, 1, 2]  # "1 2" continues with 3 twice of three: p = 2/3 first
    assert propose(text, DEFAULT.lookup).probs[0] == pytest.approx(2 / 3)
    drafter = hybrid_drafter(tiny_pair, text)
    with torch.inference_mode():
        proposal = drafter.propose(text, 10, Dynamic(0.9, max_tokens=10), Sampler(), NONE)
    assert proposal.ids == [3] and proposal.probs == pytest.approx([2 / 3]) and drafter.passes == 0


# ---- catch-up after copied rounds: the model's guesses are a function of the text -------------


@pytest.mark.parametrize("row_exact", [False, True], ids=["one-per-call", "row-exact"])
def test_the_models_tokens_equal_a_fresh_drafts_fed_the_text_after_copied_rounds(tiny_pair, row_exact_pair, row_exact):
    """Every round's model tokens (after its copy) are, bit for bit, what a fresh draft fed the
    committed text and the copy one token per call proposes: the catch-up after copied rounds (one
    call for a row-exact draft) loses nothing. A round that only copies makes no draft pass."""
    pair = row_exact_pair if row_exact else tiny_pair
    checked = copied_only = 0
    for prompt, policy in [(prompt, policy) for prompt in PROMPTS[:4] for policy in (Static(2), Static(6))]:
        trace = generate(pair, prompt, policy, TOKENS, make_drafter=make(SHORT))
        for r in trace.rounds:
            copied = r.draft_copied or 0
            for i in range(copied):  # a copied token is the text's at draft_source + i
                assert (prompt + trace.token_ids)[r.draft_source + i] == r.draft_ids[i]
            if copied == r.lookahead:
                copied_only += r.lookahead > 0
                assert r.draft_passes == 0
                continue
            model = fresh(pair, prompt)
            text = prompt + trace.token_ids[:r.position] + r.draft_ids[:copied]
            with torch.inference_mode():
                own = model.propose(text, r.lookahead - copied, Static(r.lookahead - copied), Sampler(), NONE)
            assert own.ids == r.draft_ids[copied:] and own.probs == r.draft_probs[copied:], (prompt, r.index)
            assert own.entropies == r.draft_entropies[copied:]
            checked += 1
    assert checked > 10 and copied_only > 0  # both kinds of round happened


def test_a_row_exact_draft_reads_the_backlog_and_the_copy_in_one_call(row_exact_pair):
    lengths = []  # the tokens each draft call reads (its embedding's input, whichever forward path runs)
    hook = row_exact_pair.draft.get_input_embeddings().register_forward_pre_hook(
        lambda module, args: lengths.append(args[0].shape[1]))
    try:
        trace = generate(row_exact_pair, PROMPTS[0], Static(6), TOKENS, make_drafter=make(SHORT))
    finally:
        hook.remove()
    assert len(lengths) == trace.draft_passes
    # the first round copies "3 1 2" after "1 2": the model reads the prompt's last token and the copy in one call
    assert trace.rounds[0].draft_copied == 3 and lengths[:2] == [len(PROMPTS[0]) - 1, 1 + 3]


# ---- every greedy policy, the oracle and the what-if ------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_every_greedy_policy_with_the_hybrid_is_lossless(tiny_pair, row_exact_pair, prompt):
    for pair, settings in [(tiny_pair, DEFAULT), (tiny_pair, HybridSettings(max_ngram=1, max_tokens=3, min_ngram=1)),
                           (row_exact_pair, SHORT)]:
        reference = target_only(pair, prompt, TOKENS).token_ids
        for policy in greedy_policies():
            trace = generate(pair, prompt, policy, TOKENS, make_drafter=make(settings))
            assert trace.token_ids == reference, (policy.label, settings, pair.draft_row_exact)
            assert trace.draft_passes == sum(r.draft_passes for r in trace.rounds)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_hybrid_oracle_needs_fewest_target_passes_and_every_round_meets_the_ideal(tiny_pair, prompt):
    reference = target_only(tiny_pair, prompt, TOKENS).token_ids
    oracle, ideal, along = finish(HYBRID.oracle(tiny_pair, prompt, reference, DEFAULT.to_dict()))
    _, _, model_along = make_oracle(tiny_pair, prompt, reference)
    assert along == model_along and len(ideal) == len(reference)  # the model draft's table, kept for the what-if
    best = generate(tiny_pair, prompt, oracle, TOKENS, make_drafter=make())
    assert best.token_ids == reference and all(r.accepted == r.lookahead for r in best.rounds)
    for policy in [*greedy_policies(), CostAware(HYBRID.prices(PassCosts(5.0, (10.0, 11.0, 12.0))))]:
        trace = generate(tiny_pair, prompt, policy, TOKENS, make_drafter=make())
        assert best.target_passes <= trace.target_passes, policy.label
        assert all(r.accepted == min(r.lookahead, ideal[r.position]) for r in trace.rounds), policy.label


@pytest.mark.parametrize("prompt", PROMPTS[2:])
def test_the_hybrid_ideal_is_the_models_where_nothing_is_copied_and_runs_on_after_a_right_copy(tiny_pair, prompt):
    reference = target_only(tiny_pair, prompt, TOKENS).token_ids
    _, ideal, _ = finish(HYBRID.oracle(tiny_pair, prompt, reference, SHORT.to_dict()))
    _, model_ideal, _ = make_oracle(tiny_pair, prompt, reference)
    uncopied = 0
    for position, found in enumerate(ideal):
        copy = propose(prompt + reference[:position], SHORT.lookup).ids
        if not copy:  # nothing copied: the model's own ideal
            assert found == model_ideal[position]
            uncopied += 1
        elif reference[position:position + len(copy)] == copy:  # a right copy: the model drafts on after it
            after = position + len(copy)
            assert found == len(copy) + (model_ideal[after] if after < len(reference) else 0)
        else:
            assert found < len(copy)  # the copy goes wrong first
    assert uncopied > 0


def replay_policies():
    return [Static(1), Static(4), Static(10), Heuristic(2), Heuristic(5), Dynamic(0.3, max_tokens=20),
            Dynamic(0.7, max_tokens=20), Adaptive(0.4), Entropy(0.5, max_tokens=20),
            CostAware(PassCosts(5.0, (10.0, 11.0, 12.0))),
            CostAware(HYBRID.prices(PassCosts(5.0, (10.0, 11.0, 12.0))))]  # copies at lookup's step


@pytest.mark.parametrize("prompt", PROMPTS)
def test_the_what_if_replays_a_hybrid_run_exactly(tiny_pair, row_exact_pair, prompt):
    """The what-if recomputes each round's copy from the prompt and takes the model's guesses from its
    table: every setting that was run gets its real target, draft and plain passes."""
    from specviz.explain.costs import plain_passes
    from specviz.explain.sweep import can_replay, replayed_passes, sweep

    for pair in (tiny_pair, row_exact_pair):
        baseline = target_only(pair, prompt, TOKENS)
        _, ideal, along = finish(HYBRID.oracle(pair, prompt, baseline.token_ids, DEFAULT.to_dict()))
        runs = [generate(pair, prompt, policy, TOKENS, make_drafter=make()) for policy in replay_policies()]
        comparison = Comparison("tiny", "tiny", TOKENS, baseline, runs, prompt_tokens=len(prompt),
                                oracle_ideal=ideal, draft_along_reference=along, draft=DraftSpec("hybrid", DEFAULT.to_dict()),
                                prompt_ids=list(prompt), draft_row_exact=pair.draft_row_exact)
        comparison = Comparison.from_dict(comparison.to_dict())  # as a file keeps it
        assert comparison.draft == DraftSpec("hybrid", DEFAULT.to_dict()) and can_replay(comparison)
        for policy, run in zip(replay_policies(), runs):
            passes = replayed_passes(comparison, policy, pair.eos_token_ids)
            assert (passes.target, passes.draft) == (run.target_passes, run.draft_passes), (policy.label, pair.preset)
            assert passes.plain == plain_passes([r.lookahead for r in run.rounds]), policy.label
        # settings never run: the target passes still follow from the text and the table (but for the
        # cost-aware rule, whose later choices weigh what a round drafted past its rejected token)
        alone = Comparison.from_dict({**comparison.to_dict(), "modes": []})
        for policy, run in zip(replay_policies(), runs):
            if not isinstance(policy, CostAware):
                assert replayed_passes(alone, policy, pair.eos_token_ids).target == run.target_passes, policy.label
        result = sweep(comparison, pair.eos_token_ids)
        assert len(result.static) and any(r.draft_passes > 0 for r in result.static)
    # a hybrid comparison without its prompt, or without the draft's table, is not replayed
    assert not can_replay(dataclasses.replace(comparison, prompt_ids=None))
    assert not can_replay(dataclasses.replace(comparison, draft_along_reference=None))


# ---- what a run records, and what the page shows ----------------------------------------------


def test_a_hybrid_round_records_its_copied_tokens_and_round_trips(tiny_pair):
    trace = generate(tiny_pair, PROMPTS[0], Static(12), TOKENS, make_drafter=make())
    mixed = [r for r in trace.rounds if r.draft_source is not None and 0 < r.draft_copied < r.lookahead]
    assert mixed  # a round copied some tokens, then the model drafted
    r = mixed[0]
    assert [r.copied(i) for i in range(r.lookahead)] == [i < r.draft_copied for i in range(r.lookahead)]
    assert all(r.draft_copied == 0 for r in trace.rounds if r.draft_source is None and r.lookahead)
    baseline = target_only(tiny_pair, PROMPTS[0], TOKENS)
    comparison = Comparison("tiny", "tiny", TOKENS, baseline, [trace], draft=DraftSpec("hybrid", DEFAULT.to_dict()),
                            prompt_ids=list(PROMPTS[0]))
    data = comparison.to_dict()
    assert data["hybrid"] == DEFAULT.to_dict()
    again = Comparison.from_dict(data)
    assert again.draft == DraftSpec("hybrid", DEFAULT.to_dict()) and again.traces[0].rounds == trace.rounds


def test_the_page_marks_copied_tokens_and_the_models():
    from specviz.decoding.trace import Round
    from specviz.ui.render import TOKEN_CSS, _round_html

    mixed = Round(index=1, position=4, budget=4, draft_ids=[5, 6, 7], draft_probs=[1.0, 0.5, 0.8], accepted=2,
                  target_id=9, draft_source=10, draft_copied=2, draft_texts=["a", "b", "c"], target_text="d")
    html = _round_html(mixed, None)
    assert "copied from token 10 of the prompt and answer · share p=1.00" in html
    assert "copied from token 11 of the prompt and answer · share p=0.50" in html
    assert "copied from token 12" not in html and "drafted by the draft model · draft p=0.80" in html
    assert html.count('data-source="copied"') == 2 and html.count('data-source="model"') == 1
    assert '.tok[data-source="copied"]' in TOKEN_CSS
    lookup = dataclasses.replace(mixed, draft_copied=None)  # a lookup's round: every token copied, no mark
    assert "copied from token 12" in _round_html(lookup, None) and "data-source" not in _round_html(lookup, None)
    model = Round(index=0, position=0, budget=2, draft_ids=[5], draft_probs=[0.9], accepted=1, target_id=9)
    assert "data-source" not in _round_html(model, None) and "drafted by" not in _round_html(model, None)


def test_the_round_replay_says_how_many_tokens_were_copied(tiny_pair):
    from specviz.ui.replay import replay_html, replay_step

    trace = generate(tiny_pair, PROMPTS[0], Static(12), TOKENS, make_drafter=make())
    index = next(i for i, r in enumerate(trace.rounds) if r.draft_source is not None and 0 < r.draft_copied < r.lookahead)
    step = replay_step(trace, index)
    r = trace.rounds[index]
    assert step.copied == r.draft_copied and step.copied_from == r.draft_source
    html = replay_html(step)
    assert f"the first {r.draft_copied} token" in html and "the rest drafted by the draft model" in html


def test_sampling_with_the_hybrid_runs_and_is_reproducible(tiny_pair):
    runs = [generate(tiny_pair, PROMPTS[0], Static(4), 20, temperature=0.8, seed=3, make_drafter=make())
            for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids and len(runs[0].token_ids) == 20
