"""What if the lookahead rule had been different? Replay any policy on one greedy run, no models.

In greedy decoding the answer is fixed (it is the target's), so a round that starts at position
p ends at the first position where the draft's token differs from the answer. The engine feeds
the draft so that its guess at a position depends on the text before it alone (drafters.ModelDrafter),
so what the draft proposes along the answer (`DraftAlongReference`, from the oracle step) is
what every policy's round sees there, and the rounds of any policy follow by bookkeeping alone:

* target passes are exact;
* draft passes are counted as the engine counts them (a forward call per drafted token, the
  catch-up calls, the prompt prefill) and are exact where every drafted token is known. Up to a
  round's first rejected token they come from the table. Beyond it the draft continues from its
  own wrong token, which the table cannot see: a real round that drafted past a rejection at
  the same position says what it proposed (greedy drafts are deterministic); where no run went
  that far, the draft's probabilities along the answer stand in for it. That only changes when
  a policy that stops on the draft's confidence stops after a rejection, never the target passes.

A draft read from the text (prompt lookup, decoding/lookup.py: a draft kind whose `from_text` is
set, decoding/drafts.py) needs no table: its proposal at a position is a function of the prompt
and the answer before it, so the replay recomputes it there with the kind's proposal rule
(`replay_text_passes`), and everything it counts is exact. It makes no draft pass; a round it
drafted nothing in is a plain pass, priced as one.

A draft kind may bring its own replay (`DraftKind.replay`, given what the comparison keeps: the
prompt where the kind `keeps_prompt`, the draft's table from its oracle): the hybrid draft
(decoding/hybrid.py) recomputes each round's copy from the text and takes the model's guesses
from the table.

Time is modeled from the per-pass costs measured in the real run (explain.costs: the prompt's
prefill priced once per prompt, apart from the per-token passes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..decoding.feeding import Feeding, catch_up_calls, prefill_calls, rows_per_call
from ..decoding.lookup import drafted
from ..decoding.oracle import TextProposer
from ..decoding.policies import DraftStep, Dynamic, Policy, Static
from ..decoding.trace import Comparison, DraftAlongReference
from .costs import StudyPassCosts

THRESHOLDS = [round(0.05 * i, 2) for i in range(1, 20)]  # 0.05 .. 0.95
STATIC_KS = list(range(1, 21))


@dataclass(frozen=True)
class Replay:
    label: str
    target_passes: int
    draft_passes: int
    estimated_s: float
    estimated_speedup: float


DraftView = tuple[int, float, float]  # token, probability, entropy


@dataclass(frozen=True)
class Observations:
    """What the draft really proposed in the runs that were made, to prefer over the table.

    `round_starts[p]`: the longest proposal of a real round that started at answer position p.
    `after_rejection[p]`: what the draft proposed after a rejected token at position p.
    """

    round_starts: dict[int, list[DraftView]]
    after_rejection: dict[int, list[DraftView]]


def observations(comparison: Comparison) -> Observations:
    starts: dict[int, list[DraftView]] = {}
    after: dict[int, list[DraftView]] = {}
    for trace in comparison.traces:
        if trace.temperature > 0:
            continue
        for r in trace.rounds:
            if len(r.draft_entropies) != r.lookahead:
                continue  # an import from an older file: no entropies, use the table
            views = list(zip(r.draft_ids, r.draft_probs, r.draft_entropies))
            if len(views) > len(starts.get(r.position, [])):
                starts[r.position] = views
            tail = views[r.accepted + 1:]
            if r.accepted < r.lookahead and len(tail) > len(after.get(r.position + r.accepted, [])):
                after[r.position + r.accepted] = tail
    return Observations(starts, after)


def replay_passes(policy: Policy, reference: list[int], along: DraftAlongReference, max_new_tokens: int,
                  eos_ids: Iterable[int] = (), seen: Observations | None = None,
                  prompt_tokens: int = 2, row_exact: bool = False) -> tuple[int, int]:
    """Target and draft passes `policy` needs to produce `reference` after a prompt of
    `prompt_tokens` tokens, from the draft table and whatever real rounds were observed; a
    `row_exact` draft reads each round's backlog in calls of up to CATCH_UP_ROWS tokens."""
    eos = set(eos_ids)
    seen = seen or Observations({}, {})
    end = len(reference)
    position = target_passes = draft_passes = 0
    # The draft's cache, as drafters.ModelDrafter fills it (decoding/feeding.py): the prompt is read
    # in one call at its first start, then each round's backlog in calls of up to `per_call` tokens.
    feeding, prefill, per_call = Feeding(), prefill_calls(prompt_tokens), rows_per_call(row_exact)
    while position < end:
        budget = max(0, min(policy.start_round(position), max_new_tokens - position - 1))
        observed = seen.round_starts.get(position, [])
        drafted = accepted = 0
        rejected_at: int | None = None  # answer position of this round's first wrong draft token
        probs: list[float] = []
        for index in range(budget):
            at = position + index
            beyond = seen.after_rejection.get(rejected_at, []) if rejected_at is not None else []
            steps_beyond = at - rejected_at - 1 if rejected_at is not None else -1
            # `real`: the draft's own token here, not a stand-in from along the answer
            if index < len(observed):
                (token, prob, entropy), real = observed[index], True
            elif 0 <= steps_beyond < len(beyond):
                (token, prob, entropy), real = beyond[steps_beyond], True
            else:
                clamped = min(at, end - 1)  # past the answer's end: reuse its last entry
                token, prob, entropy = along.tokens[clamped], along.probs[clamped], along.entropies[clamped]
                real = rejected_at is None
            drafted += 1
            probs.append(prob)
            if rejected_at is None and at < end and token == reference[at]:
                accepted += 1
            elif rejected_at is None:
                rejected_at = at
            if (real and token in eos) or not policy.keep_drafting(DraftStep(index, token, prob, entropy)):
                break
        policy.end_round(drafted, accepted, probs)
        target_passes += 1
        if drafted:
            # catch up to the round's start (one token per call, or in one call), then a call per draft token but the last
            draft_passes += prefill + catch_up_calls(feeding.backlog(position), per_call) + (drafted - 1)
            prefill = 0
        feeding.after_round(position, drafted, accepted)
        position += accepted + 1
    return target_passes, draft_passes


def replay_text_passes(policy: Policy, prompt_ids: list[int], reference: list[int], find: TextProposer,
                       max_new_tokens: int, eos_ids: Iterable[int] = ()) -> tuple[int, int]:
    """Target passes `policy` needs to produce `reference` with a draft read from the text that
    proposes with `find` (a lookup: drafts.TextDraft.proposer), and how many of them after the
    first checked no draft token (plain passes): each round's proposal recomputed from the text
    before it, as drafters.TextDrafter makes it."""
    eos = frozenset(eos_ids)
    end = len(reference)
    position = target_passes = plain = 0
    while position < end:
        budget = max(0, min(policy.start_round(position), max_new_tokens - position - 1))
        found = find(list(prompt_ids) + reference[:position], eos) if budget else None
        steps = drafted(found, budget, policy) if found else []
        accepted = 0
        while accepted < len(steps) and position + accepted < end \
                and steps[accepted].token_id == reference[position + accepted]:
            accepted += 1
        policy.end_round(len(steps), accepted, [step.prob for step in steps])
        plain += target_passes > 0 and not steps
        target_passes += 1
        position += accepted + 1
    return target_passes, plain


@dataclass(frozen=True)
class ReplayedPasses:
    target: int
    draft: int
    plain: int  # target passes after the first that checked no draft token


def can_replay(comparison: Comparison) -> bool:
    """A whole greedy run with what the replay needs: the draft table, the prompt for a draft that
    keeps it, and only the prompt for a draft read from the text."""
    if comparison.baseline is None or comparison.temperature > 0:
        return False
    kind = comparison.draft.kind
    if kind.keeps_prompt and comparison.prompt_ids is None:
        return False
    return kind.from_text or comparison.draft_along_reference is not None


def replayed_passes(comparison: Comparison, policy: Policy, eos_ids: Iterable[int] = (),
                    seen: Observations | None = None) -> ReplayedPasses:
    """The passes `policy` needs on this run's answer, with the run's own draft."""
    if not can_replay(comparison):
        raise ValueError("what-if replays need a whole greedy run (its draft table or prompt, and its baseline)")
    reference = comparison.reference_ids()
    kind = comparison.draft.kind
    eos_ids = frozenset(eos_ids)
    if not kind.from_text:
        seen = seen if seen is not None else observations(comparison)
    own = kind.replay(policy, comparison.draft.params, prompt_ids=comparison.prompt_ids, reference=reference,
                      along=comparison.draft_along_reference, max_new_tokens=comparison.max_new_tokens,
                      eos_ids=eos_ids, row_exact=comparison.draft_row_exact,
                      observed=seen.round_starts if seen is not None else None)
    if own is not None:  # the kind's own replay (the hybrid draft's)
        return ReplayedPasses(*own)
    if kind.from_text:  # its proposals recomputed from the text: no table, no draft pass
        target, plain = replay_text_passes(policy, comparison.prompt_ids, reference,
                                           kind.proposer(comparison.draft.params), comparison.max_new_tokens, eos_ids)
        return ReplayedPasses(target, 0, plain)
    target, draft = replay_passes(policy, reference, comparison.draft_along_reference, comparison.max_new_tokens,
                                  eos_ids, seen, comparison.prompt_tokens, comparison.draft_row_exact)
    return ReplayedPasses(target, draft, 0)


def replay(comparison: Comparison, policy: Policy, costs: StudyPassCosts | None = None,
           eos_ids: Iterable[int] = (), seen: Observations | None = None) -> Replay:
    costs = costs if costs is not None else StudyPassCosts.from_comparison(comparison)
    passes = replayed_passes(comparison, policy, eos_ids, seen)
    seconds = costs.modeled_time(passes.target, passes.draft, comparison.prompt_tokens, passes.plain)
    return Replay(policy.label, passes.target, passes.draft, seconds,
                  modeled_speedup(comparison, passes, costs))


@dataclass(frozen=True)
class Sweep:
    thresholds: list[Replay]  # dynamic, max 20, one per THRESHOLDS value
    static: list[Replay]  # one per STATIC_KS value
    oracle_target_passes: int | None
    costs: StudyPassCosts | None = None  # the per-pass costs the times were modeled with
    measured_costs: StudyPassCosts | None = None  # the costs measured in the run

    @property
    def cost_modeled(self) -> bool:
        """True when the draft's cost was set by hand rather than measured."""
        return self.costs is not None and self.costs != self.measured_costs


def sweep(comparison: Comparison, eos_ids: Iterable[int] = (), draft_ratio: float | None = None) -> Sweep:
    """Dynamic thresholds 0.05..0.95 and static k 1..20, replayed on one greedy run. Times use the
    run's measured per-pass costs, or, with `draft_ratio`, a draft call costing that fraction of
    a verification pass."""
    measured = StudyPassCosts.from_comparison(comparison)
    costs = measured if draft_ratio is None else measured.with_draft_ratio(draft_ratio)
    eos = list(eos_ids)
    seen = None if comparison.draft.kind.from_text else observations(comparison)
    oracle = next((t for t in comparison.traces if t.policy == "oracle"), None)
    return Sweep(
        thresholds=[replay(comparison, Dynamic(t, 20), costs, eos, seen) for t in THRESHOLDS],
        static=[replay(comparison, Static(k), costs, eos, seen) for k in STATIC_KS],
        oracle_target_passes=oracle.target_passes if oracle else None,
        costs=costs,
        measured_costs=measured,
    )


def modeled_speedup(comparison: Comparison, passes: ReplayedPasses, costs: StudyPassCosts) -> float:
    """Target-only decoding's modeled time over the time `costs` give these passes. With the run's
    own costs, target-only's modeled time is its measured wall time (its costs are that time spread
    over its passes); a draft cost set by hand leaves the target's costs, and so that time, alone."""
    seconds = costs.modeled_time(passes.target, passes.draft, comparison.prompt_tokens, passes.plain)
    baseline = costs.target_only_modeled_time(len(comparison.baseline.token_ids))
    return baseline / seconds if seconds > 0 else 0.0
