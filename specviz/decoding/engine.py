"""The speculative decoding loop, and target-only decoding as its baseline.

One round, for every policy:

    1. draft   - the drafter (drafters.Drafter) proposes tokens until the policy's budget is
                 spent or the policy says stop (or it proposes EOS): a draft model one forward
                 pass at a time (`ModelDrafter`), or a lookup that copies from the text so far
                 (`TextDrafter`);
    2. verify  - the target scores the whole proposal in one forward pass;
    3. accept  - greedy: the longest prefix the target agrees with, then the target's own
                 token; sampling: rejection sampling, which keeps the target's distribution;
    4. update  - both KV caches drop what was rejected, and the drafter reads what was accepted;
    5. record  - a `Round` with tokens, probabilities, verdict, passes and timings.

The target's cache follows transformers' assisted generation: it holds every committed token
but the last, and each verify pass reads that token with the proposal. The draft is fed
differently, so that its guess at a position is a function of the text (drafters.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from .drafters import CachedModel, Drafter, MakeDrafter, ModelDrafter, Proposal, Sampler
from .policies import Policy
from .trace import Baseline, Pending, Round, Trace

if TYPE_CHECKING:
    from ..pair.models import ModelPair


# ---- the five steps of a round -----------------------------------------------------------


def draft(drafter: Drafter, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
          eos_ids: frozenset[int]) -> Proposal:
    """Propose up to `budget` tokens for the target to check, with what proposing them cost."""
    started, passes_before, prefill_before = time.perf_counter(), drafter.passes, drafter.prefill_s
    proposal = drafter.propose(sequence, budget, policy, sampler, eos_ids)
    proposal.seconds = time.perf_counter() - started
    proposal.passes, proposal.prefill_s = drafter.passes - passes_before, drafter.prefill_s - prefill_before
    return proposal


def verify(verifier: CachedModel, sequence: list[int], proposal: list[int]) -> torch.Tensor:
    """The target's logits after each committed-or-proposed token: len(proposal) + 1 rows."""
    feed = sequence[verifier.length:] + proposal
    return verifier.forward(feed, keep=len(proposal) + 1)


def accept(proposal: Proposal, target_logits: torch.Tensor, sampler: Sampler) -> tuple[int, int]:
    """How many proposed tokens the target keeps, and the token it adds itself."""
    if sampler.greedy:
        return accept_greedy(proposal.ids, target_logits)
    return accept_sampling(proposal.ids, proposal.distributions, target_logits, sampler)


def accept_greedy(proposal: list[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Longest prefix the target agrees with, and the target's own next token."""
    predicted = target_logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(proposal) and proposal[accepted] == predicted[accepted]:
        accepted += 1
    return accepted, predicted[accepted]


def accept_sampling(proposal: list[int], draft_distributions: list[torch.Tensor], target_logits: torch.Tensor,
                    sampler: Sampler) -> tuple[int, int]:
    """Speculative sampling: keep token x with probability min(1, p(x)/q(x)); on rejection draw from
    the normalized max(0, p - q); if all are kept, draw a bonus token from p."""
    target_distributions = sampler.distribution(target_logits)
    for i, token in enumerate(proposal):
        p, q = target_distributions[i], draft_distributions[i]
        if sampler.uniform() < min(1.0, float(p[token] / q[token])):
            continue
        residual = torch.clamp(p - q, min=0.0)
        total = float(residual.sum())
        return i, sampler.pick(residual / total if total > 0 else p)
    return len(proposal), sampler.pick(target_distributions[len(proposal)])


def _commit(proposal: list[int], accepted: int, target_token: int, room: int,
            eos_ids: frozenset[int]) -> tuple[list[int], bool]:
    """The tokens this round adds, cut after an EOS or at the answer budget; and whether EOS was hit."""
    tokens = (proposal[:accepted] + [target_token])[:room]
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1], True
    return tokens, False


# ---- the loop ----------------------------------------------------------------------------


def speculate(pair: ModelPair, prompt_ids: list[int], policy: Policy, max_new_tokens: int,
              temperature: float = 0.0, seed: int | None = None,
              make_drafter: MakeDrafter = ModelDrafter.for_pair) -> Iterator[Trace]:
    """Speculative decoding of one prompt under one lookahead policy, one round at a time.

    Yields the same `Trace` before the first round, after each draft step (the proposal in
    `trace.pending`, before the target's verdict; skipped when nothing was drafted) and after
    every round, so a caller can show the draft proposing and the target deciding as they happen.
    Stop by no longer asking for the next one: between rounds (`trace.pending` is None) the trace
    keeps `stop_reason="stopped"` and every pass it counts. `wall_s` counts this function's own
    time, not the caller's between yields. `make_drafter` makes what proposes (a draft kind's `make`)."""
    started = time.perf_counter()
    sampler = Sampler(temperature, seed, pair.device)
    drafter = make_drafter(pair, prompt_ids)
    verifier = CachedModel(pair.target, pair.vocab_size, pair.device)
    sequence = list(prompt_ids)
    trace = _new_trace(policy, temperature, seed)
    answer = trace.token_ids
    trace.wall_s = time.perf_counter() - started
    yield trace
    while len(answer) < max_new_tokens:
        started = time.perf_counter()
        room = max_new_tokens - len(answer)
        # One slot is kept for the target's own token, as transformers does.
        budget = max(0, min(policy.start_round(len(answer)), room - 1))
        threshold = policy.threshold

        # inference_mode is not held across a yield: the caller's code runs there.
        with torch.inference_mode():
            proposal = draft(drafter, sequence, budget, policy, sampler, pair.eos_token_ids)
        if proposal.ids:  # the proposal, shown before the verdict
            trace.pending = Pending(proposal.ids, proposal.probs)
            trace.wall_s += time.perf_counter() - started
            yield trace
            started = time.perf_counter()
        with torch.inference_mode():
            verify_started = time.perf_counter()
            accepted, target_token = accept(proposal, verify(verifier, sequence, proposal.ids), sampler)
            verify_s = time.perf_counter() - verify_started
        committed, hit_eos = _commit(proposal.ids, accepted, target_token, room, pair.eos_token_ids)
        accepted = min(accepted, len(committed))
        verifier.crop(len(sequence) + accepted)  # the drafter keeps what still holds at its next start
        sequence += committed
        answer += committed
        drafter.accept(sequence, accepted)
        policy.end_round(len(proposal.ids), accepted, proposal.probs)
        trace.pending = None
        trace.rounds.append(Round(
            index=len(trace.rounds), position=len(answer) - len(committed), budget=budget,
            draft_ids=proposal.ids, draft_probs=proposal.probs, draft_entropies=proposal.entropies,
            accepted=accepted, target_id=target_token if len(committed) > accepted else None,
            draft_passes=proposal.passes, draft_s=proposal.seconds, verify_s=verify_s, threshold=threshold,
            draft_prefill_s=proposal.prefill_s, draft_source=proposal.source, draft_copied=proposal.copied,
        ))
        if hit_eos or len(answer) >= max_new_tokens:
            trace.stop_reason = "eos" if hit_eos else "max_new_tokens"
        trace.wall_s += time.perf_counter() - started
        yield trace
        if hit_eos:
            return


def _new_trace(policy: Policy, temperature: float, seed: int | None) -> Trace:
    return Trace(policy=policy.name, label=policy.label, params=policy.params, token_ids=[], rounds=[], wall_s=0.0,
                 stop_reason="stopped", temperature=temperature, seed=seed if temperature > 0 else None)


def generate(pair: ModelPair, prompt_ids: list[int], policy: Policy, max_new_tokens: int,
             temperature: float = 0.0, seed: int | None = None,
             should_stop: Callable[[], bool] | None = None,
             make_drafter: MakeDrafter = ModelDrafter.for_pair) -> Trace:
    """`speculate` run to the end, or until `should_stop()` says so between rounds."""
    return _run(speculate(pair, prompt_ids, policy, max_new_tokens, temperature, seed, make_drafter), should_stop)


def decode_target_only(pair: ModelPair, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
                       seed: int | None = None) -> Iterator[Baseline]:
    """Plain autoregressive decoding with the target alone, one forward pass per token; yields the
    same `Baseline` before the first token and after every token (stop by no longer asking, as
    with `speculate`; `wall_s` likewise counts only this function's own time)."""
    started = time.perf_counter()
    sampler = Sampler(temperature, seed, pair.device)
    verifier = CachedModel(pair.target, pair.vocab_size, pair.device)
    feed = list(prompt_ids)
    baseline = Baseline(token_ids=[], wall_s=0.0, stop_reason="stopped", temperature=temperature,
                        seed=seed if temperature > 0 else None)
    baseline.wall_s = time.perf_counter() - started
    yield baseline
    while len(baseline.token_ids) < max_new_tokens:
        started = time.perf_counter()
        with torch.inference_mode():
            token = sampler.pick(sampler.distribution(verifier.forward(feed)[-1]))
        baseline.token_ids.append(token)
        if len(baseline.token_ids) == 1:
            baseline.prefill_s = time.perf_counter() - started
        feed = [token]
        hit_eos = token in pair.eos_token_ids
        if hit_eos or len(baseline.token_ids) >= max_new_tokens:
            baseline.stop_reason = "eos" if hit_eos else "max_new_tokens"
        baseline.wall_s += time.perf_counter() - started
        yield baseline
        if baseline.stop_reason != "stopped":
            return


def target_only(pair: ModelPair, prompt_ids: list[int], max_new_tokens: int, temperature: float = 0.0,
                seed: int | None = None, should_stop: Callable[[], bool] | None = None) -> Baseline:
    """`decode_target_only` run to the end, or until `should_stop()` says so between tokens."""
    return _run(decode_target_only(pair, prompt_ids, max_new_tokens, temperature, seed), should_stop)


def _run(steps: Iterator, should_stop: Callable[[], bool] | None):
    """Drive a step-by-step decoder, asking `should_stop` between rounds; its record at the end."""
    record = next(steps)  # yielded before any model work, updated in place by every step
    while True:
        between_rounds = getattr(record, "pending", None) is None  # a drafted round is always verified
        if between_rounds and should_stop is not None and should_stop():
            break
        if next(steps, None) is None:
            break
    return record
