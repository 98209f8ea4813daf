"""The cost model behind every modeled time: seconds per forward pass, the prompt's prefill apart.

A run's modeled time is its forward passes priced at what each kind of pass costs. The passes
that read the prompt cost per prompt, not per token, and are priced apart:

* target-only decoding's first pass (the prompt and the first token);
* a policy's first verification pass (the prompt and the first proposal, engine.speculate);
* the draft's prefill call (the prompt but its last token, drafters.ModelDrafter), made once per prompt
  by a policy that drafts at all, when the prompt has more than one token. It is one of the
  run's draft passes.

Every other pass reads one token (target-only, draft calls) or a few (verification). A
verification pass of a round that drafted nothing (the cost-aware rule decodes plainly where a
draft does not pay) reads one token too: it is target-only's pass, and is priced as one. So:

    target-only = target_prefill_s + (new tokens - 1) x target_token_s
    a policy    = first_verify_s + (target passes - 1 - plain) x verify_s + plain x target_token_s
                  + draft_prefill_s + (draft passes - 1) x draft_call_s   (the draft read the prompt)
                  or  draft passes x draft_call_s                         (it did not)

with `plain` its verification passes after the first that checked no draft token. verify_s is
measured over the other passes: on a CPU where a pass over several tokens costs about two
one-token passes, pooling the plain ones into it would price plain decoding at about twice what
it costs.

Pooling the prefills into one mean per pass, as earlier versions did, inflates the per-token
costs, most where prompts are long (the summarization suite). Runs recorded before the prefill was
timed apart (study records with None there, comparison files with Baseline.prefill_s = 0) fall
back to that pooled model: `prefill_apart` is False and the prefill passes cost what any other
pass of their kind costs, which gives the earlier figures exactly.

Used by the what-if (explain.sweep: one run) and the study's report (study.report: pooled over a
suite, from its records by study.records.pooled_costs). Pure: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..decoding.feeding import prefill_calls

if TYPE_CHECKING:
    from ..decoding.trace import Comparison, Trace


@dataclass(frozen=True)
class TargetOnlyRun:
    """Target-only decoding of one prompt, as the cost model needs it."""

    wall_s: float
    new_tokens: int  # one pass per token
    prefill_s: float | None  # its first pass; None: not timed apart


@dataclass(frozen=True)
class PolicyRun:
    """One policy's run on one prompt, as the cost model needs it."""

    target_passes: int
    verify_s: float
    first_verify_s: float | None  # None: not timed apart
    draft_passes: int  # the prefill call included
    draft_s: float
    draft_prefill_s: float | None  # None: not timed apart
    prefill_calls: int  # 1 when the draft read the prompt in a call of its own, else 0
    plain_passes: int = 0  # verification passes after the first that checked no draft token


def plain_passes(lookaheads: Sequence[int]) -> int:
    """A run's verification passes after the first that checked no draft token, from its rounds'
    lookaheads in order."""
    return sum(1 for lookahead in lookaheads[1:] if lookahead == 0)


def draft_prefill_calls(prompt_tokens: int, draft_passes: int) -> int:
    """The draft reads the prompt (but its last token) in one call before its first proposal, and
    only when the prompt has more than one token (drafters.ModelDrafter, decoding/feeding.py)."""
    return prefill_calls(prompt_tokens) if draft_passes > 0 else 0


def _policy_run(trace: Trace, prompt_tokens: int, prefill_timed: bool) -> PolicyRun:
    first_verify = trace.rounds[0].verify_s if trace.rounds else 0.0
    return PolicyRun(trace.target_passes, trace.verify_s, first_verify if prefill_timed else None,
                     trace.draft_passes, trace.draft_s, trace.draft_prefill_s if prefill_timed else None,
                     draft_prefill_calls(prompt_tokens, trace.draft_passes),
                     plain_passes([r.lookahead for r in trace.rounds]))


def _per(total: float, count: int) -> float:
    return total / count if count > 0 else 0.0


def _ratio(a: float, b: float) -> float | None:
    return a / b if a > 0 and b > 0 else None


@dataclass(frozen=True)
class StudyPassCosts:
    """Mean seconds per forward pass of each kind (0.0: none measured). The three prefill costs are
    per prompt; with `prefill_apart` False they equal the per-pass cost of their kind."""

    target_token_s: float  # target-only: a one-token pass after its first
    verify_s: float  # a policy's verification pass after its first
    draft_call_s: float  # a draft forward call but the prefill call (one token: proposals and catch-up)
    target_prefill_s: float  # target-only's first pass: the prompt and the first token
    first_verify_s: float  # a policy's first verification pass: the prompt and the first proposal
    draft_prefill_s: float  # the draft's prefill call
    prefill_apart: bool

    # ---- constructors ----

    @classmethod
    def pooled(cls, target_only: Sequence[TargetOnlyRun], policies: Sequence[PolicyRun]) -> StudyPassCosts:
        """Total time over total passes of each kind. The prefill is priced apart only when every
        run timed it: a mix of older and newer runs would price the prompts of some runs only."""
        apart = bool(target_only or policies) and all(t.prefill_s is not None for t in target_only) and all(
            p.first_verify_s is not None and p.draft_prefill_s is not None for p in policies)
        return cls._apart(target_only, policies) if apart else cls._prefill_pooled(target_only, policies)

    @classmethod
    def _prefill_pooled(cls, target_only: Sequence[TargetOnlyRun], policies: Sequence[PolicyRun]) -> StudyPassCosts:
        token = _per(sum(t.wall_s for t in target_only), sum(t.new_tokens for t in target_only))
        plain = sum(p.plain_passes for p in policies)
        verify = _per(sum(p.verify_s for p in policies) - plain * token,
                      sum(p.target_passes for p in policies) - plain)
        call = _per(sum(p.draft_s for p in policies), sum(p.draft_passes for p in policies))
        return cls(token, verify, call, token, verify, call, prefill_apart=False)

    @classmethod
    def _apart(cls, target_only: Sequence[TargetOnlyRun], policies: Sequence[PolicyRun]) -> StudyPassCosts:
        decoded = [t for t in target_only if t.new_tokens > 0]
        verified = [p for p in policies if p.target_passes > 0]
        target_prefill = _per(sum(t.prefill_s or 0.0 for t in decoded), len(decoded))
        first_verify = _per(sum(p.first_verify_s or 0.0 for p in verified), len(verified))
        # Runs of one pass measure no later pass: those are then priced like the first.
        later_tokens, later_verifies = sum(t.new_tokens - 1 for t in decoded), sum(p.target_passes - 1 for p in verified)
        target_token = (_per(sum(t.wall_s - (t.prefill_s or 0.0) for t in decoded), later_tokens)
                        if later_tokens else target_prefill)
        plain = sum(p.plain_passes for p in verified)
        verify = (_per(sum(p.verify_s - (p.first_verify_s or 0.0) for p in verified) - plain * target_token,
                       later_verifies - plain)
                  if later_verifies > plain else first_verify)
        return cls(
            target_token_s=target_token,
            verify_s=verify,
            draft_call_s=_per(sum(p.draft_s - (p.draft_prefill_s or 0.0) for p in policies),
                              sum(p.draft_passes - p.prefill_calls for p in policies)),
            target_prefill_s=target_prefill,
            first_verify_s=first_verify,
            draft_prefill_s=_per(sum(p.draft_prefill_s or 0.0 for p in policies),
                                 sum(p.prefill_calls for p in policies)),
            prefill_apart=True,
        )

    @classmethod
    def from_comparison(cls, comparison: Comparison) -> StudyPassCosts:
        """One run's costs, for the what-if: its target-only decoding and every policy's rounds. A
        file from before the prefill was timed has Baseline.prefill_s = 0 (a real first pass never
        takes 0 s): priced pooled. So is a run without a baseline, whose prompt timing is unknown."""
        b = comparison.baseline
        apart = b is not None and b.prefill_s > 0
        target_only = [] if b is None else [TargetOnlyRun(b.wall_s, len(b.token_ids), b.prefill_s if apart else None)]
        policies = [_policy_run(t, comparison.prompt_tokens, apart) for t in comparison.traces]
        return cls.pooled(target_only, policies)

    # ---- modeled times ----

    def modeled_time(self, target_passes: int, draft_passes: int, prompt_tokens: int, plain: int = 0) -> float:
        """A policy's passes on a prompt of `prompt_tokens` tokens: its first verification reads the
        prompt, and so does one of its draft passes if the draft read the prompt in its own call;
        `plain` of its later verification passes checked no draft token (priced as one-token passes)."""
        later = (target_passes - 1 - plain) * self.verify_s + plain * self.target_token_s
        target = self.first_verify_s + later if target_passes > 0 else 0.0
        prefill = draft_prefill_calls(prompt_tokens, draft_passes)
        return target + prefill * self.draft_prefill_s + (draft_passes - prefill) * self.draft_call_s

    def target_only_modeled_time(self, new_tokens: int) -> float:
        """Target-only decoding: one pass per new token, the first reads the prompt."""
        return self.target_prefill_s + (new_tokens - 1) * self.target_token_s if new_tokens > 0 else 0.0

    # ---- ratios ----

    @property
    def draft_ratio(self) -> float | None:
        """A draft call's cost over a verification pass's: what the what-if's draft cost sets, since
        those are the two passes a policy's time is made of (None: either not measured)."""
        return _ratio(self.draft_call_s, self.verify_s)

    @property
    def draft_to_token_pass(self) -> float | None:
        """A draft call's cost over a target-only one-token pass's (the report's draft / target)."""
        return _ratio(self.draft_call_s, self.target_token_s)

    @property
    def verify_to_token_pass(self) -> float | None:
        return _ratio(self.verify_s, self.target_token_s)

    def with_draft_ratio(self, ratio: float) -> StudyPassCosts:
        """The same target with a draft call costing `ratio` of a verification pass: what a cheaper
        (or dearer) draft would make of the same passes.

        The draft's prefill scales by the same factor as its call: both are forward calls of the
        same draft model, and a model k times cheaper per call is about k times cheaper reading the
        prompt. So the prefill keeps its measured relation to the draft's call, and the measured
        ratio gives the measured costs back. With no draft call measured to scale from, the
        prefill costs `ratio` of the target's own prompt-reading pass, its first verification."""
        if not ratio >= 0:
            raise ValueError("the draft cost ratio must be a number >= 0")
        call = self.verify_s * ratio
        prefill = (self.draft_prefill_s * call / self.draft_call_s if self.draft_call_s > 0
                   else self.first_verify_s * ratio)
        return replace(self, draft_call_s=call, draft_prefill_s=prefill)
