"""The oracle: how many tokens should the draft have guessed?

Given the target's greedy continuation (the reference), the ideal lookahead at a position is
how many draft tokens in a row the target would accept from there. Two views of it:

* `draft_predictions` + `run_lengths`: the ideal at every answer position, from one pass of
  the draft along the reference, one token per forward call as drafting does. This is the line
  the charts draw and the value recorded next to every policy's rounds. (The engine feeds two
  tokens at a round's start; with the int8 draft that can change a prediction now and then, so
  this line is a close estimate, not an exact one.)
* `oracle_budgets`: the oracle policy's own rounds, found by replaying the engine's drafting
  with peeking: draft until the draft's token differs from the reference, then start the next
  round where the target's correction lands. Because a dynamically quantized draft's output
  depends on how tokens are batched into forward calls (DESIGN.md, cautions), this replay feeds
  the draft exactly as the engine will in the oracle's run, so that every oracle round's
  lookahead equals what the target accepts.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from .engine import CachedModel, Sampler, draft
from .policies import DraftStep, Oracle, Policy
from .trace import DraftAlongReference

if TYPE_CHECKING:
    from .models import ModelPair


def draft_predictions(pair: ModelPair, prompt_ids: list[int], reference: list[int]) -> DraftAlongReference:
    """The draft's greedy token, probability and entropy at every answer position, reading the
    reference one token per forward call as drafting does (the prompt in one call)."""
    drafter = CachedModel(pair.draft, pair.vocab_size, pair.device)
    along = DraftAlongReference([], [], [])
    feed = list(prompt_ids)
    with torch.inference_mode():
        for position in range(len(reference)):
            distribution = torch.softmax(drafter.forward(feed)[-1], dim=-1)
            token = int(distribution.argmax())
            along.tokens.append(token)
            along.probs.append(float(distribution[token]))
            along.entropies.append(float(torch.special.entr(distribution).sum()))
            feed = [reference[position]]
    return along


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


def oracle_budgets(pair: ModelPair, prompt_ids: list[int], reference: list[int],
                   max_new_tokens: int) -> dict[int, int]:
    """The oracle's lookahead at each of its round start positions."""
    drafter = CachedModel(pair.draft, pair.vocab_size, pair.device)
    greedy = Sampler()
    budgets: dict[int, int] = {}
    position = 0
    with torch.inference_mode():
        while position < len(reference):
            sequence = list(prompt_ids) + reference[:position]
            cap = max_new_tokens - position - 1  # the engine keeps one slot for the target's token
            saved = copy.deepcopy(drafter.cache), drafter.length
            proposal = draft(drafter, sequence, cap, _UntilMismatch(reference, position), greedy,
                             pair.eos_token_ids).ids
            matched = 0
            while matched < len(proposal) and proposal[matched] == reference[position + matched]:
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
    return budgets


def make_oracle(pair: ModelPair, prompt_ids: list[int], reference: list[int],
                max_new_tokens: int) -> tuple[Oracle, list[int], DraftAlongReference]:
    """The oracle policy for a greedy run, the ideal lookahead at every position, and the draft's
    behaviour along the reference (what the what-if sweep replays policies on)."""
    along = draft_predictions(pair, prompt_ids, reference)
    ideal = run_lengths(along.tokens, reference)
    return Oracle(oracle_budgets(pair, prompt_ids, reference, max_new_tokens), ideal), ideal, along
