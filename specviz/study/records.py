"""The study's records: one prompt's figures on one preset, as stored in results.jsonl (one JSON
object a line), and the cost model pooled over them (`pooled_costs`). Below everything in the
study that reads them (the report, the runner), so that those import one way. Pure: no torch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..explain.costs import PolicyRun, StudyPassCosts, TargetOnlyRun, draft_prefill_calls, plain_passes


@dataclass
class RoundRecord:
    lookahead: int
    accepted: int
    probs: list[float]  # the draft's probability for each token it proposed
    ideal: int | None = None  # the oracle's ideal lookahead at the round's start (older records: None)

    @property
    def meets_ideal(self) -> bool | None:
        """The round accepted exactly min(its lookahead, the ideal), as an exact oracle implies."""
        return None if self.ideal is None else self.accepted == min(self.lookahead, self.ideal)


@dataclass
class ModeResult:
    label: str  # e.g. "static k=5"
    policy: str  # e.g. "static"
    new_tokens: int
    target_passes: int
    draft_passes: int
    accepted: int
    wall_s: float
    draft_s: float
    verify_s: float
    lossless: bool | None
    rounds: list[RoundRecord] = field(default_factory=list)
    # The prompt's prefill, measured apart (older records: None): the draft's own call, and the
    # target's first verification pass, which reads the prompt with the first proposal.
    draft_prefill_s: float | None = None
    first_verify_s: float | None = None

    @property
    def drafted(self) -> int:
        """Tokens the draft proposed (draft passes also count catch-up calls)."""
        return sum(r.lookahead for r in self.rounds)


@dataclass
class PromptResult:
    """One prompt of one suite on one preset: the baseline and every policy's figures."""

    preset: str
    suite: str
    prompt_id: str
    index: int  # position in the suite file (0 = the suite's first prompt)
    max_new_tokens: int
    prompt_tokens: int
    new_tokens: int  # target-only decoding's answer length
    target_only_wall_s: float
    seconds: float  # the whole comparison, baseline and oracle included
    partial: bool
    torch_threads: int
    finished: str  # ISO date
    modes: list[ModeResult]
    target_only_prefill_s: float | None = None  # its first pass: the prompt and one token (older records: None)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.preset, self.suite, self.prompt_id, self.max_new_tokens)

    def mode(self, policy: str) -> ModeResult | None:
        return next((m for m in self.modes if m.policy == policy), None)

    @property
    def prefill_timed_apart(self) -> bool:
        """The record timed the prompt's prefill apart (records made before that have None there)."""
        return self.target_only_prefill_s is not None and all(
            m.draft_prefill_s is not None and m.first_verify_s is not None for m in self.modes)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptResult:
        modes = [ModeResult(**{**m, "rounds": [RoundRecord(**r) for r in m["rounds"]]}) for m in data["modes"]]
        return cls(**{**data, "modes": modes})


def pooled_costs(results: Sequence[PromptResult]) -> StudyPassCosts:
    """The cost model pooled over study records (a suite's prompts, every policy), for the report."""
    target_only = [TargetOnlyRun(r.target_only_wall_s, r.new_tokens, r.target_only_prefill_s) for r in results]
    policies = [PolicyRun(m.target_passes, m.verify_s, m.first_verify_s, m.draft_passes, m.draft_s,
                          m.draft_prefill_s, draft_prefill_calls(r.prompt_tokens, m.draft_passes),
                          plain_passes([rd.lookahead for rd in m.rounds]))
                for r in results for m in r.modes]
    return StudyPassCosts.pooled(target_only, policies)
