"""Records of what a speculative decoding run did, the metrics derived from them, and export.

A `Round` is one draft-then-verify step. A `Trace` is one policy's whole run. A `Comparison`
holds one prompt's baseline (target-only decoding) and the traces of every policy run on it,
and is what the CLI writes as JSON and the app can load back without any model.

Counting follows docs/DESIGN.md: one target forward pass per round (the prompt prefill is merged
into the first round); a draft pass is one draft forward call: one per drafted token, plus the
catch-up calls and the prompt prefill of drafters.ModelDrafter, which `Round.draft_passes` counts.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .drafts import DEFAULT_DRAFT, DRAFTS, DraftSpec
from .oracle import DraftAlongReference


@dataclass
class Round:
    """One round: the draft proposes `draft_ids`, the target verifies them in one pass."""

    index: int
    position: int  # answer tokens committed before this round
    budget: int  # most tokens the policy allowed this round
    draft_ids: list[int]
    draft_probs: list[float]  # the draft's probability for each token it proposed
    accepted: int  # leading draft tokens the target kept
    target_id: int | None  # the target's own token: correction or bonus (None if the run ended first)
    draft_entropies: list[float] = field(default_factory=list)  # entropy (nats) of each draft distribution
    # Draft forward calls this round: one per drafted token, plus catch-up calls (and the prompt's
    # prefill in the first round that drafts); see drafters.ModelDrafter. Not given: one per drafted token.
    draft_passes: int | None = None
    draft_s: float = 0.0
    verify_s: float = 0.0  # in the first round this includes the target's prefill of the prompt
    draft_prefill_s: float = 0.0  # of draft_s: the draft's prefill of the prompt (first drafting round)
    threshold: float | None = None  # confidence threshold in force, for threshold policies
    oracle_ideal: int | None = None  # the oracle's ideal lookahead at `position` (greedy runs)
    draft_source: int | None = None  # a text draft's (a lookup's): where in the text its tokens were copied from
    # How many of the draft tokens, from the first, were copied from `draft_source`; None: all of them (a
    # lookup's round). A hybrid draft's round copies some and its draft model drafts the rest.
    draft_copied: int | None = None
    draft_texts: list[str] = field(default_factory=list)  # display text of each draft token
    target_text: str | None = None

    def __post_init__(self) -> None:
        if self.draft_passes is None:
            self.draft_passes = self.lookahead

    @property
    def lookahead(self) -> int:
        return len(self.draft_ids)

    @property
    def rejected(self) -> int:
        return self.lookahead - self.accepted

    def copied(self, i: int) -> bool:
        """Whether draft token `i` was copied from the text (at `draft_source + i`), not drafted by a model."""
        return self.draft_source is not None and (self.draft_copied is None or i < self.draft_copied)

    @property
    def committed_ids(self) -> list[int]:
        tail = [] if self.target_id is None else [self.target_id]
        return self.draft_ids[: self.accepted] + tail

    @property
    def target_kind(self) -> str | None:
        """'bonus' when every draft token was accepted, 'correction' otherwise."""
        if self.target_id is None:
            return None
        return "bonus" if self.accepted == self.lookahead else "correction"


@dataclass
class Pending:
    """A round's draft tokens after the draft step and before the target's verdict: what a live
    view shows for a moment. Never part of a finished trace or of a file."""

    draft_ids: list[int]
    draft_probs: list[float]
    draft_texts: list[str] = field(default_factory=list)


@dataclass
class Trace:
    """One policy's run on one prompt."""

    policy: str  # e.g. "static"
    label: str  # e.g. "static k=5"
    params: dict[str, Any]
    token_ids: list[int]
    rounds: list[Round]
    wall_s: float
    stop_reason: str  # "eos", "max_new_tokens", "stopped" (time budget or cancel)
    temperature: float = 0.0
    seed: int | None = None
    text: str = ""
    lossless: bool | None = None  # output identical to the target-only baseline
    first_difference: int | None = None  # first differing answer position, when not identical
    pending: Pending | None = None  # the round under way, drafted but not yet verified (live runs)

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def target_passes(self) -> int:
        return len(self.rounds)

    @property
    def draft_passes(self) -> int:
        """Draft forward calls, catch-up calls included."""
        return sum(r.draft_passes for r in self.rounds)

    @property
    def drafted(self) -> int:
        """Tokens the draft proposed."""
        return sum(r.lookahead for r in self.rounds)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """vLLM's mean acceptance length: tokens committed per target pass, 1 + accepted / rounds."""
        return 1.0 + self.accepted / self.target_passes if self.target_passes else 0.0

    @property
    def draft_s(self) -> float:
        return sum(r.draft_s for r in self.rounds)

    @property
    def verify_s(self) -> float:
        return sum(r.verify_s for r in self.rounds)

    @property
    def draft_prefill_s(self) -> float:
        return sum(r.draft_prefill_s for r in self.rounds)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def per_position_acceptance(self) -> list[float]:
        """Acceptance rate of the i-th draft token of a round, over rounds that drafted it."""
        longest = max((r.lookahead for r in self.rounds), default=0)
        rates = []
        for i in range(longest):
            offered = [r for r in self.rounds if r.lookahead > i]
            rates.append(sum(r.accepted > i for r in offered) / len(offered))
        return rates


def drafting_view(trace: Trace, rounds: int) -> Trace:
    """The trace as a live view showed it just after round `rounds` was drafted: the rounds
    before it judged, its draft tokens pending (none past the last round). For playing back a
    finished run as it streamed."""
    rounds = max(0, min(rounds, len(trace.rounds)))
    done = trace.rounds[:rounds]
    committed = sum(len(r.committed_ids) for r in done)
    following = trace.rounds[rounds] if rounds < len(trace.rounds) else None
    pending = None if following is None or not following.draft_ids else Pending(
        following.draft_ids, following.draft_probs, following.draft_texts)
    return replace(trace, rounds=done, token_ids=trace.token_ids[:committed], pending=pending,
                   stop_reason="stopped", lossless=None, first_difference=None)


@dataclass
class Baseline:
    """Target-only decoding: the reference for the lossless check and the base of every speedup."""

    token_ids: list[int]
    wall_s: float
    stop_reason: str
    temperature: float = 0.0
    seed: int | None = None
    text: str = ""
    prefill_s: float = 0.0  # the first pass: the prompt's prefill and the first token

    @property
    def target_passes(self) -> int:
        return len(self.token_ids)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first position where two token lists differ, or None if identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class Comparison:
    """One prompt run through the baseline and several policies."""

    preset: str
    prompt: str
    max_new_tokens: int
    baseline: Baseline | None  # None until target-only decoding has run (it runs last)
    traces: list[Trace]
    temperature: float = 0.0
    seed: int | None = None
    prompt_tokens: int = 0
    oracle_ideal: list[int] | None = None  # ideal lookahead at every answer position (greedy)
    draft_along_reference: DraftAlongReference | None = None  # greedy runs
    partial: bool = False  # the run was cut short (time budget or stop)
    # The run whose answer served the oracle as the target's greedy answer (None: the baseline's).
    oracle_reference: str | None = None
    oracle_s: float = 0.0  # seconds spent finding the oracle's ideal (draft passes along the answer)
    # Where and when a stored comparison was computed (date, machine, versions), for showing it later.
    provenance: dict[str, str] | None = None
    # The draft read each round's backlog in one call (a row-exact draft, drafters.ModelDrafter), not
    # one call per token: how the what-if replay counts its passes.
    draft_row_exact: bool = False
    # What proposed the tokens (drafts.DRAFTS): the pair's draft model, or e.g. prompt lookup.
    draft: DraftSpec = DEFAULT_DRAFT
    # The prompt's token ids, kept with a draft that reads the text (a lookup): its proposals are a
    # function of the text, so the what-if replay recomputes them from these and the answer.
    prompt_ids: list[int] | None = None

    def speedup(self, trace: Trace) -> float | None:
        """Target-only wall time over the trace's; None until the baseline has run."""
        if self.baseline is None:
            return None
        return self.baseline.wall_s / trace.wall_s if trace.wall_s > 0 else 0.0

    def model_s(self) -> float:
        """Seconds of model work as the engine timed it: every policy run, the oracle's
        preparation and target-only decoding (what the app's overhead is measured against)."""
        return (sum(t.wall_s for t in self.traces) + self.oracle_s
                + (self.baseline.wall_s if self.baseline is not None else 0.0))

    def reference_ids(self) -> list[int]:
        """The target's greedy answer the oracle and the what-if sweep were computed along."""
        if self.oracle_reference is not None:
            return self.trace(self.oracle_reference).token_ids
        return self.baseline.token_ids if self.baseline is not None else []

    def trace(self, label: str) -> Trace:
        for t in self.traces:
            if t.label == label:
                return t
        raise KeyError(label)

    # ---- export -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = {
            "preset": self.preset,
            "prompt": self.prompt,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
            "prompt_tokens": self.prompt_tokens,
            "partial": self.partial,
            "oracle_ideal": self.oracle_ideal,
            "draft_along_reference": asdict(self.draft_along_reference) if self.draft_along_reference else None,
            "oracle_reference": self.oracle_reference,
            "oracle_s": self.oracle_s,
            "provenance": self.provenance,
            "draft_row_exact": self.draft_row_exact,
            "baseline": None if self.baseline is None else {
                "token_ids": self.baseline.token_ids,
                "text": self.baseline.text,
                "target_passes": self.baseline.target_passes,
                "wall_s": self.baseline.wall_s,
                "prefill_s": self.baseline.prefill_s,
                "stop_reason": self.baseline.stop_reason,
            },
            "modes": [self._mode_dict(t) for t in self.traces],
        }
        # Any other draft than the pair's model: its settings under its name ("lookup": {"max_ngram":
        # 2, ...}), as lookup drafts have always been written; a model draft's file as before them.
        if self.draft.name != DEFAULT_DRAFT.name:
            out[self.draft.name] = dict(self.draft.params)
        if self.prompt_ids is not None:
            out["prompt_ids"] = self.prompt_ids
        return out

    def _mode_dict(self, t: Trace) -> dict[str, Any]:
        return {
            "name": t.label,
            "policy": t.policy,
            "params": t.params,
            "token_ids": t.token_ids,
            "text": t.text,
            "target_passes": t.target_passes,
            "draft_passes": t.draft_passes,
            "drafted": t.drafted,
            "accepted": t.accepted,
            "acceptance_rate": t.acceptance_rate,
            "mean_accepted_length": t.mean_accepted_length,
            "wall_s": t.wall_s,
            "draft_s": t.draft_s,
            "verify_s": t.verify_s,
            "draft_prefill_s": t.draft_prefill_s,
            "speedup": self.speedup(t),
            "lossless": t.lossless,
            "first_difference": t.first_difference,
            "stop_reason": t.stop_reason,
            "rounds": [_round_dict(r) for r in t.rounds],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1)

    def to_csv(self) -> str:
        """One row per round per policy."""
        out = io.StringIO()
        columns = ["mode", "round", "position", "budget", "lookahead", "accepted", "oracle_ideal",
                   "threshold", "target_kind", "draft_s", "verify_s", "draft_probs"]
        writer = csv.writer(out)
        writer.writerow(columns)
        for t in self.traces:
            for r in t.rounds:
                writer.writerow([t.label, r.index, r.position, r.budget, r.lookahead, r.accepted,
                                 r.oracle_ideal, r.threshold, r.target_kind, f"{r.draft_s:.6f}",
                                 f"{r.verify_s:.6f}", " ".join(f"{p:.4f}" for p in r.draft_probs)])
        return out.getvalue()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        """Rebuild a comparison from `to_dict()` output (for showing a past run without models)."""
        b = data["baseline"]
        baseline = None if b is None else Baseline(
            token_ids=list(b["token_ids"]), wall_s=float(b["wall_s"]), stop_reason=b.get("stop_reason", ""),
            text=b.get("text", ""), temperature=float(data.get("temperature") or 0.0), seed=data.get("seed"),
            prefill_s=float(b.get("prefill_s") or 0.0))
        traces = []
        for m in data["modes"]:
            traces.append(Trace(
                policy=m.get("policy", m["name"].split()[0]), label=m["name"], params=dict(m.get("params", {})),
                token_ids=list(m["token_ids"]), rounds=[_round_from_dict(r) for r in m["rounds"]],
                wall_s=float(m["wall_s"]), stop_reason=m.get("stop_reason", ""),
                temperature=float(data.get("temperature") or 0.0), seed=data.get("seed"),
                text=m.get("text", ""), lossless=m.get("lossless"), first_difference=m.get("first_difference"),
            ))
        return cls(preset=data["preset"], prompt=data["prompt"], max_new_tokens=int(data.get("max_new_tokens", 0)),
                   baseline=baseline, traces=traces, temperature=float(data.get("temperature") or 0.0),
                   seed=data.get("seed"), prompt_tokens=int(data.get("prompt_tokens", 0)),
                   oracle_ideal=data.get("oracle_ideal"), partial=bool(data.get("partial", False)),
                   oracle_reference=data.get("oracle_reference"), provenance=data.get("provenance"),
                   oracle_s=float(data.get("oracle_s") or 0.0), draft_row_exact=bool(data.get("draft_row_exact", False)),
                   draft=_draft_from(data), prompt_ids=data.get("prompt_ids"),
                   draft_along_reference=DraftAlongReference(**along) if (along := data.get(
                       "draft_along_reference")) else None)

    @classmethod
    def from_json(cls, text: str) -> Comparison:
        return cls.from_dict(json.loads(text))


def _draft_from(data: dict[str, Any]) -> DraftSpec:
    """The draft a comparison's JSON names: the registered draft whose settings it holds under
    the draft's name (see `to_dict`), its other settings at their defaults; none: the pair's model."""
    for name in DRAFTS:
        if name != DEFAULT_DRAFT.name and isinstance(data.get(name), dict):
            return DraftSpec.of(name, **data[name])
    return DEFAULT_DRAFT


_ROUND_FIELDS = [f.name for f in fields(Round)]


def _round_dict(r: Round) -> dict[str, Any]:
    d = asdict(r)
    if d["draft_source"] is None:  # a model draft's rounds: files as before text drafts existed
        del d["draft_source"]
    if d["draft_copied"] is None:  # a lookup's or a model's rounds: files as before the hybrid draft
        del d["draft_copied"]
    d["lookahead"] = r.lookahead
    d["target_kind"] = r.target_kind
    return d


def _round_from_dict(d: dict[str, Any]) -> Round:
    # A file from before catch-up calls were counted has no draft_passes: one per drafted token.
    return Round(**{k: d[k] for k in _ROUND_FIELDS if k in d})
