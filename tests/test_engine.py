"""The engine on tiny random models: lossless greedy decoding, cache handling, sampling keeps
the target's distribution, and parity with transformers' assisted generation."""

import pytest
import torch

from specviz.decoding import drafters
from specviz.decoding.drafters import CachedModel, ModelDrafter, TransformersDrafter
from specviz.decoding.engine import generate, target_only
from specviz.decoding.modes import ModeSpec, make_policy
from specviz.decoding.oracle import make_oracle
from specviz.decoding.policies import Dynamic, Heuristic, Static
from specviz.decoding.trace import first_difference
from specviz.study.hf_reference import hf_assisted

PROMPTS = [[1, 2, 3], [5], [7, 7, 7, 7, 2, 0, 1], [3, 1, 4, 1, 5, 2, 6]]


def greedy_policies():
    return [Static(1), Static(4), Static(9), Heuristic(5), Dynamic(0.4, 20), Dynamic(0.0, 3), Dynamic(0.9, 20)]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_every_greedy_policy_reproduces_target_only_decoding(tiny_pair, prompt):
    reference = target_only(tiny_pair, prompt, 40).token_ids
    assert len(reference) == 40
    for policy in greedy_policies():
        trace = generate(tiny_pair, prompt, policy, 40)
        assert first_difference(trace.token_ids, reference) is None, policy.label


def test_pass_counts_follow_the_rounds(tiny_pair):
    trace = generate(tiny_pair, [1, 2, 3], Static(4), 40)
    assert trace.target_passes == len(trace.rounds)
    assert trace.drafted == sum(len(r.draft_ids) for r in trace.rounds)
    assert trace.draft_passes == sum(r.draft_passes for r in trace.rounds)
    assert trace.new_tokens == sum(len(r.committed_ids) for r in trace.rounds) == 40
    assert all(r.lookahead <= 4 for r in trace.rounds)
    # the last round never drafts past the budget: one slot stays for the target's token
    assert all(r.position + r.lookahead + 1 <= 40 for r in trace.rounds)
    assert 0 < trace.acceptance_rate < 1  # the tiny pair disagrees sometimes, agrees sometimes
    assert trace.mean_accepted_length == pytest.approx(1 + trace.accepted / trace.target_passes)


def test_oracle_needs_fewest_target_passes_and_accepts_all_it_drafts(tiny_pair):
    prompt = [3, 1, 4, 1, 5]
    reference = target_only(tiny_pair, prompt, 60).token_ids
    oracle, ideal, _ = make_oracle(tiny_pair, prompt, reference)
    trace = generate(tiny_pair, prompt, oracle, 60)
    assert trace.token_ids == reference
    assert all(r.lookahead == r.accepted for r in trace.rounds)
    assert len(ideal) == len(reference)
    for policy in greedy_policies():
        assert trace.target_passes <= generate(tiny_pair, prompt, policy, 60).target_passes, policy.label


def test_cropping_the_cache_equals_never_having_seen_the_tokens(tiny_pair):
    with torch.inference_mode():
        cropped = CachedModel(tiny_pair.target, tiny_pair.vocab_size, tiny_pair.device)
        cropped.forward([1, 2, 3, 4, 5, 6])
        cropped.crop(3)
        after_crop = cropped.forward([7])
        fresh = CachedModel(tiny_pair.target, tiny_pair.vocab_size, tiny_pair.device)
        fresh.forward([1, 2, 3])
        assert cropped.length == fresh.length + 1 == 4
        assert torch.allclose(after_crop, fresh.forward([7]), atol=1e-5)


def test_stops_at_eos(tiny_pair):
    reference = target_only(tiny_pair, [1, 2, 3], 30).token_ids
    eos = reference[5]  # pretend the sixth token is end-of-sequence
    stopping = type(tiny_pair)(**{**tiny_pair.__dict__, "eos_token_ids": frozenset({eos})})
    expected = reference[: reference.index(eos) + 1]
    assert target_only(stopping, [1, 2, 3], 30).token_ids == expected
    for policy in greedy_policies():
        trace = generate(stopping, [1, 2, 3], policy, 30)
        assert trace.token_ids == expected and trace.stop_reason == "eos", policy.label


def test_should_stop_ends_the_run_between_rounds(tiny_pair):
    calls = []
    trace = generate(tiny_pair, [1, 2], Static(2), 40, should_stop=lambda: len(calls.append(1) or calls) > 3)
    assert trace.stop_reason == "stopped" and len(trace.rounds) == 3


@pytest.mark.parametrize("spec", [ModeSpec("static", {"num_assistant_tokens": 3}),
                                  ModeSpec("static", {"num_assistant_tokens": 1}),
                                  ModeSpec("heuristic", {"num_assistant_tokens": 5}),
                                  ModeSpec("dynamic", {"assistant_confidence_threshold": 0.4, "max_tokens": 20}),
                                  ModeSpec("adaptive", {"assistant_confidence_threshold": 0.4, "max_tokens": 20})])
@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_parity_with_transformers_assisted_generation(tiny_pair, spec, prompt):
    theirs = hf_assisted(tiny_pair, prompt, spec, 30)
    # Fed as transformers feeds its assistant: the same tokens and passes of both models.
    same_feeding = generate(tiny_pair, prompt, make_policy(spec), 30, make_drafter=TransformersDrafter.for_pair)
    assert same_feeding.token_ids == theirs.token_ids
    assert same_feeding.target_passes == theirs.target_calls
    assert same_feeding.draft_passes == theirs.draft_calls
    # Fed one token per call (the default), an fp32 draft guesses the same tokens: the same rounds,
    # and one more draft call per fully accepted round (plus the prompt's prefill).
    ours = generate(tiny_pair, prompt, make_policy(spec), 30)
    assert ours.token_ids == theirs.token_ids
    assert ours.target_passes == theirs.target_calls
    assert ours.drafted == theirs.draft_calls
    assert ours.draft_passes == theirs.draft_calls + expected_extra_calls(ours, len(prompt))


def expected_extra_calls(trace, prompt_tokens):
    """Draft calls beyond one per drafted token, by the rule of drafters.ModelDrafter: the prompt's
    prefill at the first drafting round, and one catch-up call for every committed token the
    cache lacks at a round's start but the last."""
    extra, cached = 0, -1  # answer tokens the cache holds (-1: the prompt but its last token)
    for r in trace.rounds:
        if r.lookahead:
            extra += (1 if cached == -1 and prompt_tokens > 1 else 0) + (r.position - cached - 1)
            cached = r.position + min(r.accepted, r.lookahead - 1)
    return extra


@pytest.mark.parametrize("policy", greedy_policies(), ids=lambda p: p.label)
def test_draft_calls_follow_the_catch_up_rule(tiny_pair, policy):
    trace = generate(tiny_pair, PROMPTS[3], policy, 60)
    assert trace.draft_passes == trace.drafted + expected_extra_calls(trace, len(PROMPTS[3]))


def test_the_drafter_reads_one_token_per_call_after_the_prompt(tiny_pair):
    """Every draft forward call after the prompt's prefill reads exactly one token, whatever the
    round structure: what makes the draft's guesses a function of the text alone."""
    lengths = []
    hook = tiny_pair.draft.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    try:
        prompt = PROMPTS[2]
        for policy in greedy_policies():
            lengths.clear()
            trace = generate(tiny_pair, prompt, policy, 40)
            assert lengths[0] == len(prompt) - 1 and set(lengths[1:]) == {1}, policy.label
            assert len(lengths) == trace.draft_passes
    finally:
        hook.remove()


@pytest.mark.parametrize("rereads_two", [True, False], ids=["transformers<5.25", "transformers>=5.25"])
def test_the_transformers_feeding_reads_what_that_transformers_reads(tiny_pair, monkeypatch, rereads_two):
    """Each round's first draft call reads, in one call: up to transformers 5.24 the last two
    committed tokens; from 5.25 on only what the cache lacks, the last token, or the last two
    after a round whose drafts were all accepted (its last draft token was never read)."""
    monkeypatch.setattr(drafters, "_transformers_rereads_two", lambda: rereads_two)
    lengths = []
    hook = tiny_pair.draft.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    try:
        prompt = PROMPTS[3]
        trace = generate(tiny_pair, prompt, Static(2), 40, make_drafter=TransformersDrafter.for_pair)
    finally:
        hook.remove()
    assert len(lengths) == trace.draft_passes == trace.drafted  # one call per drafted token, no catch-up
    starts = [sum(r.draft_passes for r in trace.rounds[:i]) for i in range(len(trace.rounds))]
    assert lengths[0] == len(prompt)
    after_full = [r.accepted == r.lookahead for r in trace.rounds[:-1]]
    assert True in after_full and False in after_full  # both kinds of round happened
    expected = [2 if rereads_two or full else 1 for full in after_full]
    assert [lengths[start] for start in starts[1:]] == expected


def test_the_drafter_keeps_what_still_holds_and_guesses_the_same(tiny_pair):
    """Logits after a round trip through drafting, rejection and catch-up equal those of a drafter
    fed the same text straight; the cache keeps exactly the shared prefix."""
    prompt, text = [3, 1, 4, 1], [5, 9, 2, 6, 5]
    with torch.inference_mode():
        straight = ModelDrafter(tiny_pair.draft, tiny_pair.vocab_size, tiny_pair.device, prompt)
        expected = straight.start(prompt + text)
        wandering = ModelDrafter(tiny_pair.draft, tiny_pair.vocab_size, tiny_pair.device, prompt)
        wandering.start(prompt + text[:1])
        wandering.next(7)
        wandering.next(7)  # two wrong draft tokens, then the round is over
        assert torch.equal(wandering.start(prompt + text), expected)
        assert wandering.tokens == prompt + text
        assert wandering.passes == 1 + 2 + 2 + 4  # prefill, first start, two drafts, catch-up of four


# ---- sampling keeps the target's distribution ---------------------------------------------


def exact_first_two_token_distribution(pair, prompt, temperature):
    """p(x0) and the marginal p(x1) = sum_x0 p(x0) p(x1 | x0), computed from the target directly."""
    with torch.inference_mode():
        logits = pair.target(torch.tensor([prompt])).logits[0, -1] / temperature
        first = torch.softmax(logits, -1)
        batch = torch.tensor([prompt + [x] for x in range(pair.vocab_size)])
        second_given = torch.softmax(pair.target(batch).logits[:, -1] / temperature, -1)
        return first, first @ second_given


def total_variation(counts, expected):
    observed = counts / counts.sum()
    return 0.5 * float((observed - expected).abs().sum())


@pytest.mark.slow
def test_speculative_sampling_keeps_the_target_distribution(tiny_unrelated_pair):
    tiny_pair = tiny_unrelated_pair
    prompt, temperature, draws = [2, 5, 1], 1.0, 1500
    p_first, p_second = exact_first_two_token_distribution(tiny_pair, prompt, temperature)
    with torch.inference_mode():
        q_first = torch.softmax(tiny_pair.draft(torch.tensor([prompt])).logits[0, -1] / temperature, -1)
    # The draft must differ clearly from the target, or a broken rule could not be told apart.
    assert 0.5 * float((q_first - p_first).abs().sum()) > 0.2

    counts = [torch.zeros(tiny_pair.vocab_size), torch.zeros(tiny_pair.vocab_size)]
    for seed in range(draws):
        trace = generate(tiny_pair, prompt, Static(3), 2, temperature=temperature, seed=seed)
        for i in range(2):
            counts[i][trace.token_ids[i]] += 1
    # With 1500 draws over 8 outcomes an exact sampler's total variation is about
    # sqrt(8 / (2 * pi * 1500)) ~= 0.03 (and rarely above 0.06); 0.08 leaves room for chance and
    # still fails a rule that keeps the draft's distribution (total variation > 0.2, checked above).
    bound = 0.08
    assert total_variation(counts[0], p_first) < bound
    assert total_variation(counts[1], p_second) < bound


def test_sampling_is_reproducible_with_a_seed(tiny_pair):
    a = generate(tiny_pair, [1, 2, 3], Dynamic(0.4), 30, temperature=0.8, seed=11)
    b = generate(tiny_pair, [1, 2, 3], Dynamic(0.4), 30, temperature=0.8, seed=11)
    c = generate(tiny_pair, [1, 2, 3], Dynamic(0.4), 30, temperature=0.8, seed=12)
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids


@pytest.mark.slow
def test_target_only_sampling_matches_target_distribution(tiny_unrelated_pair):
    tiny_pair = tiny_unrelated_pair
    prompt = [2, 5, 1]
    p_first, _ = exact_first_two_token_distribution(tiny_pair, prompt, 1.0)
    counts = torch.zeros(tiny_pair.vocab_size)
    for seed in range(1500):
        counts[target_only(tiny_pair, prompt, 1, temperature=1.0, seed=seed).token_ids[0]] += 1
    assert total_variation(counts, p_first) < 0.08


def test_each_round_is_shown_drafted_before_it_is_judged(tiny_pair):
    """speculate yields after the draft step (the proposal pending) and after the verdict; the
    pending proposal is the round's draft, and stopping by should_stop never drops a drafted round."""
    from specviz.decoding.engine import speculate

    frames = []
    for trace in speculate(tiny_pair, [1, 2, 3], Dynamic(0.4, 20), 40):
        frames.append((len(trace.rounds), None if trace.pending is None else list(trace.pending.draft_ids)))
    rounds = trace.rounds
    assert trace.pending is None and trace.stop_reason == "max_new_tokens"
    drafting = [r for r in rounds if r.draft_ids]
    assert drafting, "the tiny pair drafted nothing"
    pending = [(judged, ids) for judged, ids in frames if ids is not None]
    assert pending == [(r.index, r.draft_ids) for r in drafting]  # shown after exactly the rounds before it
    judged = [judged for judged, ids in frames if ids is None]
    assert judged == list(range(len(rounds) + 1))  # and after every verdict (and once before any)
    assert trace.wall_s >= sum(r.draft_s + r.verify_s for r in rounds)

    calls = []
    stopped = generate(tiny_pair, [1, 2, 3], Static(4), 40, should_stop=lambda: len(calls.append(1) or calls) > 2)
    assert stopped.pending is None and len(stopped.rounds) == 2
    assert stopped.draft_passes == sum(r.draft_passes for r in stopped.rounds) > 0


def test_the_prompt_prefill_is_timed_apart_in_the_first_drafting_round(tiny_pair):
    """The draft's prompt prefill is a cost per prompt: the first round that drafts records it as
    part of its draft time, no other round does; target-only records its first pass."""
    trace = generate(tiny_pair, [3, 1, 4, 1, 5, 2, 6], Static(4), 20)
    first, *rest = [r for r in trace.rounds if r.draft_ids]
    assert 0 < first.draft_prefill_s < first.draft_s
    assert all(r.draft_prefill_s == 0 for r in rest)
    assert trace.draft_prefill_s == first.draft_prefill_s
    assert generate(tiny_pair, [5], Static(4), 8).draft_prefill_s == 0  # a one-token prompt has no prefill call
    baseline = target_only(tiny_pair, [3, 1, 4, 1, 5, 2, 6], 20)
    assert 0 < baseline.prefill_s < baseline.wall_s


# ---- a row-exact draft catches up in one call (issue 44) -------------------------------------


def _int8_row_draft(target):
    from specviz.pair.models import int8_draft

    return int8_draft(target)


def test_a_row_exact_draft_catches_up_in_one_call_with_the_logits_of_one_by_one_feeding(tiny_pair):
    """The bundled int8 draft's set-up (dynamic int8 computed row by row, row attention) is row-exact:
    a backlog read in one call gives the very logits and cache that one call per token gives."""
    from specviz.pair.forward import draft_rows_exact

    draft = _int8_row_draft(tiny_pair.target)
    assert draft_rows_exact(draft)
    prompt, text = [3, 1, 4, 1], [5, 9, 2, 6, 5, 3, 5]
    with torch.inference_mode():
        apart = ModelDrafter(draft, tiny_pair.vocab_size, tiny_pair.device, prompt, row_exact=False)
        together = ModelDrafter(draft, tiny_pair.vocab_size, tiny_pair.device, prompt, row_exact=True)
        for drafter in (apart, together):
            drafter.start(prompt + text[:1])
            drafter.next(7)  # a wrong draft token, dropped at the next start
        expected, got = apart.start(prompt + text), together.start(prompt + text)
        assert torch.equal(got, expected)
        assert torch.equal(together.next(4), apart.next(4))  # the caches hold the same bits too
    assert together.passes == 1 + 1 + 1 + 1 + 1  # prefill, first start, a draft, the backlog in one call, a draft
    assert apart.passes == 1 + 2 + 1 + (len(text) - 1) + 1  # the same, one call per token


def test_a_draft_that_is_not_row_exact_is_fed_one_token_per_call(tiny_pair):
    """torch's plain dynamic int8 picks one activation scale per call: not row-exact, so the pair
    says so and its drafter reads the backlog one token per call."""
    import warnings

    from specviz.pair.forward import draft_rows_exact

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = torch.ao.quantization.quantize_dynamic(tiny_pair.target, {torch.nn.Linear}, dtype=torch.qint8)
    assert not draft_rows_exact(plain)
    lengths = []
    hook = plain.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]),
                                           with_kwargs=True)
    try:
        with torch.inference_mode():
            drafter = ModelDrafter(plain, tiny_pair.vocab_size, tiny_pair.device, [3, 1, 4, 1])
            drafter.start([3, 1, 4, 1, 5, 9, 2])
    finally:
        hook.remove()
    assert lengths == [3, 1, 1, 1, 1]


def test_a_long_backlog_is_read_in_calls_of_at_most_catch_up_rows(tiny_pair):
    from specviz.decoding.feeding import CATCH_UP_ROWS

    draft = _int8_row_draft(tiny_pair.target)
    prompt = [3, 1]
    text = [(7 * i) % 30 + 1 for i in range(CATCH_UP_ROWS + 5)]
    with torch.inference_mode():
        together = ModelDrafter(draft, tiny_pair.vocab_size, tiny_pair.device, prompt, row_exact=True)
        apart = ModelDrafter(draft, tiny_pair.vocab_size, tiny_pair.device, prompt, row_exact=False)
        assert torch.equal(together.start(prompt + text), apart.start(prompt + text))
    assert together.passes == 1 + 2  # the prefill, then 32 and 6 tokens
