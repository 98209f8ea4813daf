"""The lookup draft: a draft that is not a model, but copies from the text so far.

Prompt lookup (transformers' `PromptLookupCandidateGenerator`, `generate(prompt_lookup_num_tokens=k)`):
take the last `max_ngram` tokens of the prompt and answer so far, find their first (leftmost)
earlier occurrence, and propose the up to `max_tokens` tokens that followed it there; if that
n-gram never occurred before, try a shorter one, down to one token; if nothing matches, propose
nothing (the round is a plain decoding step). It costs microseconds and no forward pass, and
wins where the answer repeats its context: code to edit, quotes, extraction.

A probability for each proposed token, so that the confidence policies have something to stop
on: of the matched n-gram's earlier occurrences whose continuation agrees with the proposal so
far, the share that continue with this token (a count estimate of P(token | n-gram, proposal so
far)). One occurrence gives 1.0 all along: a single precedent is all the evidence there is.

The proposal is a function of the text before the round alone, so the oracle's ideal at a
position (how many proposed tokens the target would accept from there) is what every policy's
round starting there meets.

Its entry in the draft registry (drafts.DRAFTS["lookup"]) names its settings, its labels and
`propose`; the engine's `TextDrafter`, the oracle and the what-if replay call `propose` through it.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from ..errors import SpecVizError
from .policies import DraftStep, Policy

MAX_NGRAM = 8  # longer n-grams almost never recur verbatim; they only slow the search
MAX_TOKENS = 64  # as policies.MAX_LOOKAHEAD
# What the cost-aware rule is told a lookup's step costs: a measured proposal takes well under
# a millisecond (microseconds to a few hundred, with the context's length), against tens of
# milliseconds for a target pass on the smallest pair.
STEP_MS = 0.05


@dataclass(frozen=True)
class LookupSettings:
    """transformers' defaults: `max_matching_ngram_size` 2, `prompt_lookup_num_tokens` 10."""

    max_ngram: int = 2
    max_tokens: int = 10

    def __post_init__(self) -> None:
        for name, value, most in (("n-gram size", self.max_ngram, MAX_NGRAM),
                                  ("tokens per lookup", self.max_tokens, MAX_TOKENS)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise SpecVizError(f"The lookup draft's {name} must be a whole number from 1 to {most}, "
                                   f"got {value!r}.")

    @property
    def label(self) -> str:
        return f"lookup (n-gram {self.max_ngram}, {self.max_tokens} tokens)"

    def to_dict(self) -> dict[str, int]:
        return {"max_ngram": self.max_ngram, "max_tokens": self.max_tokens}


@dataclass
class Lookup:
    """One proposal: the tokens, each one's count estimate and the entropy (nats) of the counts
    it was picked from, and where they were copied from (`source`: the index in the text of the
    first copied token; None when nothing matched)."""

    ids: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    source: int | None = None
    ngram: int = 0  # the length of the n-gram that matched


def occurrences(text: list[int], ngram: list[int]) -> list[int]:
    """Where `ngram` starts in `text`, left to right, among the places a token follows it."""
    size = len(ngram)
    return [i for i in range(len(text) - size) if text[i:i + size] == ngram]


def propose(text: list[int], settings: LookupSettings, eos_ids: frozenset[int] = frozenset(),
            shortest: int = 1) -> Lookup:
    """The lookup draft's proposal after `text` (see the module's docstring). As transformers
    does, the proposal stops before an EOS token, and a match whose continuation starts with
    EOS gives an empty proposal rather than a shorter n-gram's. `shortest`: no match of fewer
    tokens counts (the hybrid draft's model drafts instead)."""
    for size in range(min(settings.max_ngram, len(text) - 1), shortest - 1, -1):
        found = occurrences(text, text[-size:])
        if not found:
            continue
        start = found[0] + size
        copied = text[start:start + settings.max_tokens]
        for i, token in enumerate(copied):
            if token in eos_ids:
                copied = copied[:i]
                break
        if not copied:
            return Lookup()
        return Lookup(copied, *_shares(text, found, size, copied), source=start, ngram=size)
    return Lookup()


def drafted(found: Lookup, budget: int, policy: Policy) -> list[DraftStep]:
    """The steps a round drafts from a proposal: at most `budget` tokens, until the policy stops
    (the token it stops on is still sent, as with a model draft). The engine and the what-if
    replay both draft this way, so the replay meets what a run did."""
    return drafted_and_more(found, budget, policy)[0]


def drafted_and_more(found: Lookup, budget: int, policy: Policy) -> tuple[list[DraftStep], bool]:
    """`drafted`'s steps, and whether the policy would draft on past them (a hybrid draft's model
    then takes over)."""
    steps, copied = [], min(len(found.ids), budget)
    for index, (token, prob, entropy) in enumerate(zip(found.ids[:budget], found.probs, found.entropies)):
        steps.append(DraftStep(index, token, prob, entropy, copied))
        if not policy.keep_drafting(steps[-1]):
            return steps, False
    return steps, True


def _shares(text: list[int], found: list[int], size: int, copied: list[int]) -> tuple[list[float], list[float]]:
    """For each copied token: of the occurrences still agreeing with the copy before it (and with
    a token at that offset), the share continuing with it, and the entropy of what they continue
    with."""
    probs, entropies = [], []
    agreeing = found
    for offset, token in enumerate(copied):
        present = [i for i in agreeing if i + size + offset < len(text)]
        counts = Counter(text[i + size + offset] for i in present)
        agreeing = [i for i in present if text[i + size + offset] == token]
        probs.append(counts[token] / len(present))
        entropies.append(sum(n / len(present) * math.log(len(present) / n) for n in counts.values()))
    return probs, entropies
