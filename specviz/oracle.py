"""The oracle: how many tokens should the draft have guessed?

Given the target's greedy continuation (the reference), the ideal lookahead at a position is
how many draft tokens in a row the target would accept from there.

One replay of the oracle's own drafting finds everything: draft until the draft's token
differs from the reference (peeking one token past the last match), then start the next round
where the target's correction lands. That gives the oracle policy's lookahead at each of its
round starts and, on the way, the draft's token, probability and entropy at every answer
position, from which the ideal line (`run_lengths`) and the what-if sweep are computed. The
replay feeds the draft exactly as the engine will in the oracle's run (a dynamically quantized
draft's output depends on how tokens are batched into forward calls, DESIGN.md), so every
oracle round's lookahead equals what the target accepts, and the ideal line agrees with the
oracle's rounds at their start positions. It costs one draft pass per answer position, about
what the draft spends in any one policy's run.
"""

from __future__ import annotations

import copy
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from .engine import CachedModel, Sampler, draft
from .policies import DraftStep, Oracle, Policy
from .trace import DraftAlongReference

if TYPE_CHECKING:
    from .models import ModelPair

T = TypeVar("T")
UNSEEN = -1  # token id recorded where the replay never runs the draft (only the answer's last position)


def run_lengths(predicted: list[int], reference: list[int]) -> list[int]:
    """At each position, how many predictions in a row from there match the reference."""
    lengths = [0] * (len(reference) + 1)
    for position in range(len(reference) - 1, -1, -1):
        lengths[position] = lengths[position + 1] + 1 if predicted[position] == reference[position] else 0
    return lengths[:-1]


class _UntilMismatch(Policy):
    """Keeps drafting while the draft agrees with the reference (used only to peek)."""

    name = "peek"

    def __init__(self, reference: list[int], position: int):
        self.reference = reference
        self.position = position

    def keep_drafting(self, step: DraftStep) -> bool:
        at = self.position + step.index
        return at < len(self.reference) and self.reference[at] == step.token_id


def oracle_replay(pair: ModelPair, prompt_ids: list[int], reference: list[int],
                  max_new_tokens: int) -> Generator[int, None, tuple[dict[int, int], DraftAlongReference]]:
    """The oracle's lookahead at each of its round start positions, and the draft's guesses along
    the reference as this replay saw them (the generator's return value). Yields the answer
    position reached after every replayed round, so that long answers can show progress."""
    drafter = CachedModel(pair.draft, pair.vocab_size, pair.device)
    greedy = Sampler()
    budgets: dict[int, int] = {}
    along = DraftAlongReference([UNSEEN] * len(reference), [0.0] * len(reference), [0.0] * len(reference))
    position = 0
    with torch.inference_mode():
        while position < len(reference):
            sequence = list(prompt_ids) + reference[:position]
            cap = max_new_tokens - position - 1  # the engine keeps one slot for the target's token
            saved = copy.deepcopy(drafter.cache), drafter.length
            proposal = draft(drafter, sequence, cap, _UntilMismatch(reference, position), greedy,
                             pair.eos_token_ids)
            along.tokens[position:position + len(proposal.ids)] = proposal.ids
            along.probs[position:position + len(proposal.ids)] = proposal.probs
            along.entropies[position:position + len(proposal.ids)] = proposal.entropies
            matched = 0
            while matched < len(proposal.ids) and proposal.ids[matched] == reference[position + matched]:
                matched += 1
            if matched == 0:
                # The engine will not run the draft in a zero-lookahead round: undo the peek.
                drafter.cache, drafter.length = saved
            else:
                # Peeking fed the last kept token to see the next one; the engine drafting exactly
                # `matched` tokens never feeds it. Drop it so both caches hold the same tokens.
                drafter.crop(len(sequence) + matched - 1)
            budgets[position] = matched
            position += matched + 1
            yield min(position, len(reference))
    return budgets, along


def oracle_search(pair: ModelPair, prompt_ids: list[int], reference: list[int], max_new_tokens: int
                  ) -> Generator[int, None, tuple[Oracle, list[int], DraftAlongReference]]:
    """The oracle policy for a greedy run, the ideal lookahead at every position, and the draft's
    behaviour along the reference (what the what-if sweep replays policies on), as the return
    value; yields the answer position reached, as `oracle_replay` does."""
    budgets, along = yield from oracle_replay(pair, prompt_ids, reference, max_new_tokens)
    ideal = run_lengths(along.tokens, reference)
    return Oracle(budgets, ideal), ideal, along


def make_oracle(pair: ModelPair, prompt_ids: list[int], reference: list[int],
                max_new_tokens: int) -> tuple[Oracle, list[int], DraftAlongReference]:
    """`oracle_search` run to the end."""
    return finish(oracle_search(pair, prompt_ids, reference, max_new_tokens))


def finish(steps: Generator[Any, None, T]) -> T:
    """Run a step-by-step computation to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
