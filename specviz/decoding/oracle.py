"""The oracle: how many tokens should the draft have guessed?

Given the target's greedy continuation (the reference), the ideal lookahead at a position is
how many draft tokens in a row the target would accept from there.

The engine feeds the draft so that its guess at a position is a function of the text before
it alone (drafters.ModelDrafter). So one pass of the draft along the reference, one token per call,
gives the guess every policy's round will see at every answer position, whatever its round
structure: the ideal line (`run_lengths`) is exactly what the policies meet (a round starting
at p accepts min(its lookahead, ideal[p]) tokens), the oracle that drafts ideal[p] tokens at p
needs the fewest target passes, and the what-if sweep replays any policy from this table. It
costs one draft pass per answer position, about what the draft spends in any one policy's run.

A draft whose proposal is read from the text (prompt lookup) has its own search,
`text_oracle_search`. Each draft kind says which search is its (`drafts.DraftKind.oracle`).
Importing this module imports no torch (the model's search does, when it runs), so that the
records (trace.py) can hold a `DraftAlongReference`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .policies import Oracle

if TYPE_CHECKING:
    from ..pair.models import ModelPair
    from .lookup import Lookup

T = TypeVar("T")
PROGRESS_EVERY = 8  # answer positions between progress reports


@dataclass
class DraftAlongReference:
    """What the draft proposes at every position of the target's greedy answer, given the answer
    before it: its token, its probability and the entropy of its distribution. The raw material
    of the oracle line and of the what-if sweep, kept with a comparison (trace.py). (Files from
    older versions may hold token -1 where their replay never ran the draft.)"""

    tokens: list[int]
    probs: list[float]
    entropies: list[float]


def run_lengths(predicted: list[int], reference: list[int]) -> list[int]:
    """At each position, how many predictions in a row from there match the reference."""
    lengths = [0] * (len(reference) + 1)
    for position in range(len(reference) - 1, -1, -1):
        lengths[position] = lengths[position + 1] + 1 if predicted[position] == reference[position] else 0
    return lengths[:-1]


def draft_along(pair: ModelPair, prompt_ids: list[int],
                reference: list[int]) -> Generator[int, None, DraftAlongReference]:
    """The draft's greedy guess, its probability and its entropy at every answer position,
    reading the reference one token per call as the engine's drafter does (the generator's
    return value). Yields the answer position reached every few positions, for progress."""
    import torch

    from .drafters import ModelDrafter, Sampler, describe

    drafter = ModelDrafter(pair.draft, pair.vocab_size, pair.device, prompt_ids)
    greedy = Sampler()
    along = DraftAlongReference([], [], [])
    with torch.inference_mode():
        logits = drafter.start(list(prompt_ids)) if reference else None
        for position, token in enumerate(reference):
            distribution = greedy.distribution(logits)
            guess = greedy.pick(distribution)
            prob, entropy = describe(distribution, guess)
            along.tokens.append(guess)
            along.probs.append(prob)
            along.entropies.append(entropy)
            if position + 1 < len(reference):
                logits = drafter.next(token)
            if (position + 1) % PROGRESS_EVERY == 0 or position + 1 == len(reference):
                yield position + 1
    return along


def oracle_search(pair: ModelPair, prompt_ids: list[int], reference: list[int]
                  ) -> Generator[int, None, tuple[Oracle, list[int], DraftAlongReference]]:
    """The oracle policy for a greedy run, the ideal lookahead at every position, and the draft's
    guesses along the reference (what the what-if sweep replays policies on), as the return
    value; yields the answer position reached, as `draft_along` does."""
    along = yield from draft_along(pair, prompt_ids, reference)
    ideal = run_lengths(along.tokens, reference)
    return Oracle(ideal), ideal, along


def make_oracle(pair: ModelPair, prompt_ids: list[int],
                reference: list[int]) -> tuple[Oracle, list[int], DraftAlongReference]:
    """`oracle_search` run to the end."""
    return finish(oracle_search(pair, prompt_ids, reference))


def finish(steps: Generator[Any, None, T]) -> T:
    """Run a step-by-step computation to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


# ---- a draft read from the text (prompt lookup) ------------------------------------------------

TextProposer = Callable[[list[int], frozenset[int]], "Lookup"]  # the text so far, EOS ids -> a proposal


def text_ideal(prompt_ids: list[int], reference: list[int], find: TextProposer,
               eos_ids: frozenset[int] = frozenset()) -> Generator[int, None, list[int]]:
    """At each answer position, how many tokens of the proposal `find` makes there the target
    would accept (the generator's return value); yields the position reached every few positions.
    Such a proposal is a function of the text before the round, so this is what a round starting
    there meets."""
    ideal = []
    for position in range(len(reference)):
        proposed = find(list(prompt_ids) + reference[:position], eos_ids).ids
        agreed = 0
        while agreed < len(proposed) and position + agreed < len(reference) \
                and proposed[agreed] == reference[position + agreed]:
            agreed += 1
        ideal.append(agreed)
        if (position + 1) % PROGRESS_EVERY == 0 or position + 1 == len(reference):
            yield position + 1
    return ideal


def fewest_rounds(ideal: list[int]) -> list[int]:
    """How many tokens to draft at each position so that the answer takes the fewest rounds.

    A round at p can end anywhere from p + 1 to p + ideal[p] + 1, and no policy can do better.
    A model draft's guess at a position does not depend on where the round began, so
    p + ideal[p] never falls as p grows and drafting ideal[p] is always best. A lookup's proposal
    does depend on it: stopping short can start the next round where a longer copy matches. So a
    shortest path over positions, preferring the longest draft among the best."""
    end = len(ideal)
    rounds_from = [0] * (end + 1)
    plan = [0] * end
    for position in range(end - 1, -1, -1):
        best = None
        for drafted in range(min(ideal[position], end - position - 1), -1, -1):
            rounds = 1 + rounds_from[position + drafted + 1]
            if best is None or rounds < best:
                best, plan[position] = rounds, drafted
        rounds_from[position] = best
    return plan


def text_oracle_search(prompt_ids: list[int], reference: list[int], find: TextProposer,
                       eos_ids: frozenset[int] = frozenset()) -> Generator[int, None, tuple[Oracle, list[int]]]:
    """The oracle for a greedy run with a draft that proposes with `find`, and the ideal
    lookahead at every position, as the return value; yields the position reached, as
    `text_ideal` does."""
    ideal = yield from text_ideal(prompt_ids, reference, find, eos_ids)
    return Oracle(fewest_rounds(ideal)), ideal
