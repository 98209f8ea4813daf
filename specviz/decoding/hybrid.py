"""The hybrid draft: prompt lookup where the context matches, the pair's draft model where it does not.

Each round `HybridDrafter` first asks prompt lookup (lookup.py) for its proposal after the text
so far, from a match of at least `HybridSettings.min_ngram` tokens. Where the context matches, the round drafts the copied tokens, asking the policy after
each, as a lookup round does: no forward pass. Where nothing matches, or when the copied span ends
with budget left and the policy still drafting, the pair's draft model (drafters.ModelDrafter)
drafts the rest after the text and the tokens copied so far. Its start reads the committed tokens
its cache lacks and the copied ones in calls of up to CATCH_UP_ROWS rows for a row-exact draft
(feeding.py), as it catches up after a plain round; then one call per further token. Copied
tokens carry lookup's count-based probabilities, the model's tokens the model's own; a round
records where the copy came from and how many of its tokens were copied (`Proposal.source`,
`Proposal.copied`, `trace.Round.draft_copied`), which the page marks.

Why the oracle stays the ideal. Lookup's proposal is a function of the text before the round; the
model's guess at a position is a function of the text before it (the feeding protocol). So the
hybrid's proposal from a round's start s is a function of the text up to s. Along the target's
answer (`along_reference`) it is lookup's copy from s while the copy agrees with the answer, then
the model's guesses at the positions after it, which the model draft's table along the answer
(`oracle.draft_along`) holds: the ideal at s is how many of those agree with the answer. Where a
round starts changes the copy, so the oracle plans the fewest rounds over that ideal as for a text
draft (`oracle.fewest_rounds`), and the what-if recomputes each round's proposal from the prompt
and the table (`replay_passes`), counting the model's calls as the drafter makes them.

Its entry in the draft registry is drafts.DRAFTS["hybrid"] (drafts.HybridDraft). Importing this
module imports no torch; the drafter loads it when it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import SpecVizError
from . import lookup
from .feeding import Feeding, catch_up_calls, prefill_calls, rows_per_call
from .oracle import DraftAlongReference
from .policies import DraftStep, Policy

if TYPE_CHECKING:
    import torch

    from ..pair.models import ModelPair
    from .drafters import ModelDrafter, Proposal, Sampler

DraftView = tuple[int, float, float]  # token, probability, entropy


@dataclass(frozen=True)
class HybridSettings:
    """Lookup's two settings and the shortest n-gram whose match is copied. A short match is weak
    evidence, and here, unlike lookup alone, the draft model stands behind it: replayed on the real
    pair's coding suite (24 prompts, 128 tokens, 2026-12-07), copies from 1- and 2-token matches
    cost more target passes (rejected copies) than their saved draft calls were worth (cost-aware
    1.18x modeled against the model draft's 1.38x), from matches of 3 or 4 tokens 1.38x, with 7% fewer
    draft calls; on the wall clock all three were even, and the rule keeps the model draft's target
    passes (docs/HISTORY.md)."""

    max_ngram: int = 4
    max_tokens: int = 10
    min_ngram: int = 3

    def __post_init__(self) -> None:
        lookup.LookupSettings(self.max_ngram, self.max_tokens)  # lookup's own checks of its two settings
        if isinstance(self.min_ngram, bool) or not isinstance(self.min_ngram, int) \
                or not 1 <= self.min_ngram <= self.max_ngram:
            raise SpecVizError(f"The hybrid draft's shortest n-gram must be a whole number from 1 to its longest "
                               f"({self.max_ngram}), got {self.min_ngram!r}.")

    @property
    def lookup(self) -> lookup.LookupSettings:
        return lookup.LookupSettings(self.max_ngram, self.max_tokens)

    def to_dict(self) -> dict[str, int]:
        return {"max_ngram": self.max_ngram, "max_tokens": self.max_tokens, "min_ngram": self.min_ngram}


class HybridDrafter:
    """Lookup's copy where the context matches, then the draft model (see the module's docstring).
    Its passes are the model's; a round that only copies makes none."""

    def __init__(self, model: ModelDrafter, settings: HybridSettings):
        self.model = model
        self.settings = settings

    @classmethod
    def using(cls, settings: HybridSettings) -> Callable[[ModelPair, list[int]], HybridDrafter]:
        """A `MakeDrafter` for `speculate`: the pair's draft model behind lookup with `settings`."""

        def make(pair: ModelPair, prompt_ids: list[int]) -> HybridDrafter:
            from .drafters import ModelDrafter

            return cls(ModelDrafter.for_pair(pair, prompt_ids), settings)

        return make

    @property
    def passes(self) -> int:
        return self.model.passes

    @property
    def prefill_s(self) -> float:
        return self.model.prefill_s

    def propose(self, sequence: list[int], budget: int, policy: Policy, sampler: Sampler,
                eos_ids: frozenset[int]) -> Proposal:
        """The copied tokens, then the model's, up to `budget` in all."""
        from .drafters import Proposal

        proposal = Proposal()
        if budget <= 0:
            return proposal
        found = lookup.propose(sequence, self.settings.lookup, eos_ids, self.settings.min_ngram)
        steps, more = lookup.drafted_and_more(found, budget, policy)
        for step in steps:
            proposal.add(step, None if sampler.greedy else self._certain(step.token_id))
        proposal.copied = len(steps)  # 0: no match, the model drafts every token (the page marks each)
        if steps:
            proposal.source = found.source
        if more and len(steps) < budget:
            self.model.draft_on(proposal, sequence + proposal.ids, budget, policy, sampler, eos_ids)
        return proposal

    def _certain(self, token: int) -> torch.Tensor:
        """A copied token's distribution for speculative sampling: all on it (as drafters.TextDrafter's)."""
        import torch

        distribution = torch.zeros(self.model.cached.vocab_size, device=self.model.cached.device)
        distribution[token] = 1.0
        return distribution

    def accept(self, sequence: list[int], accepted: int) -> None:
        """Nothing now: the model reads the committed tokens at its next start (ModelDrafter.accept)."""

    def keep_prefix(self, sequence: list[int]) -> None:
        self.model.keep_prefix(sequence)


# ---- along the target's answer: the oracle's ideal and the what-if ----------------------------


@dataclass(frozen=True)
class AlongReference:
    """The hybrid's proposal at an answer position, along the target's answer: `views` (lookup's
    copy, then the model's guesses from the table at the positions after it), how many of them
    were `copied`, and how many lead `agreed` with the answer (the ideal there). The model's
    guesses past a disagreement are the table's at the same positions: stand-ins for guesses the
    table cannot see (the draft read a wrong token there), as explain/sweep.py uses for a model draft."""

    views: list[DraftView]
    copied: int
    agreed: int
    observed: int = 0  # leading views a real round starting here proposed (`seen`)

    def real(self, index: int) -> bool:
        """Whether view `index` is what the drafter proposes there: a copied token, a model guess
        up to the first disagreement, or what a real round proposed."""
        return index < self.copied or index <= self.agreed or index < self.observed

    def seen(self, views: Sequence[DraftView]) -> AlongReference:
        """This proposal, its first views those a real round starting here proposed (the same up to
        the first disagreement: a function of the text; past it, the model's own guesses, which
        the table cannot see)."""
        if len(views) <= self.observed:
            return self
        return replace(self, views=[*views, *self.views[len(views):]], observed=len(views))


def along_reference(prompt_ids: list[int], reference: list[int], along: DraftAlongReference, position: int,
                    settings: HybridSettings, eos_ids: frozenset[int]) -> AlongReference:
    """The hybrid's proposal at `position` of `reference` (see `AlongReference`)."""
    found = lookup.propose(list(prompt_ids) + reference[:position], settings.lookup, eos_ids, settings.min_ngram)
    after = position + len(found.ids)
    views = [*zip(found.ids, found.probs, found.entropies),
             *zip(along.tokens[after:], along.probs[after:], along.entropies[after:])]
    agreed = 0
    while agreed < len(views) and position + agreed < len(reference) \
            and views[agreed][0] == reference[position + agreed]:
        agreed += 1
    return AlongReference(views, len(found.ids), agreed)


def ideal_along(prompt_ids: list[int], reference: list[int], along: DraftAlongReference,
                settings: HybridSettings, eos_ids: frozenset[int] = frozenset()) -> list[int]:
    """At each answer position, how many tokens of the hybrid's proposal there the target would
    accept: what a round starting there meets."""
    return [along_reference(prompt_ids, reference, along, position, settings, eos_ids).agreed
            for position in range(len(reference))]


def round_steps(proposal: AlongReference, budget: int, policy: Policy, eos_ids: frozenset[int]) -> list[DraftStep]:
    """The steps a round drafts from its proposal along the answer, as `HybridDrafter.propose` does:
    the copied ones while the policy drafts on, then the model's until the budget, the policy or
    an EOS guess stops it."""
    steps: list[DraftStep] = []
    copied = min(proposal.copied, budget)
    for index, (token, prob, entropy) in enumerate(proposal.views[:budget]):
        steps.append(DraftStep(index, token, prob, entropy, copied))
        modeled = index >= proposal.copied
        if (modeled and proposal.real(index) and token in eos_ids) or not policy.keep_drafting(steps[-1]):
            break
    return steps


def replay_passes(policy: Policy, prompt_ids: list[int], reference: list[int], along: DraftAlongReference,
                  settings: HybridSettings, max_new_tokens: int, eos_ids: Iterable[int] = (),
                  row_exact: bool = False, observed: Mapping[int, Sequence[DraftView]] | None = None
                  ) -> tuple[int, int, int]:
    """Target passes, draft passes and plain passes (after the first, a pass that checked no
    draft token) `policy` needs to produce `reference` with the hybrid draft, each round's proposal
    recomputed from the prompt and the model draft's table, and taken from `observed` (what real
    rounds starting at an answer position proposed) where a real round started there. Exact up to
    each round's first rejected token, and for every setting that was run; past a rejection the
    table's stand-ins may make a confidence rule stop at another point (its draft passes, and the
    cost-aware rule's later choices, may then differ)."""
    eos = frozenset(eos_ids)
    end = len(reference)
    # The model's cache, as drafters.ModelDrafter fills it (feeding.py): a round whose model drafts
    # reads the backlog and the round's copied tokens, then a call per model token but the last.
    feeding, prefill, per_call = Feeding(), prefill_calls(len(prompt_ids)), rows_per_call(row_exact)
    position = target_passes = draft_passes = plain = 0
    while position < end:
        budget = max(0, min(policy.start_round(position), max_new_tokens - position - 1))
        proposal = along_reference(prompt_ids, reference, along, position, settings, eos) if budget else None
        if proposal is not None and observed and position in observed:
            proposal = proposal.seen(observed[position])
        steps = round_steps(proposal, budget, policy, eos) if proposal else []
        accepted = min(len(steps), proposal.agreed) if proposal else 0
        policy.end_round(len(steps), accepted, [step.prob for step in steps])
        modeled = len(steps) - min(len(steps), proposal.copied) if proposal else 0
        if modeled:
            copied = len(steps) - modeled
            draft_passes += prefill + catch_up_calls(feeding.backlog(position) + copied, per_call) + modeled - 1
            prefill = 0
            feeding.after_round(position, len(steps), accepted)
        plain += target_passes > 0 and not steps
        target_passes += 1
        position += accepted + 1
    return target_passes, draft_passes, plain
