"""The best fixed threshold in hindsight: what dynamic lookahead would have done on a suite at
every threshold, had it known the suite's answers, by the what-if replay of each prompt's saved
comparison (sweep.py), priced with the suite's own per-pass costs (costs.py).

It is the bar a rule that adapts has to clear: a threshold tuned on the very prompts it is judged
on is the best any fixed threshold can do there, and no practical rule can know it in advance.
Pure: comparisons in, passes and modeled seconds out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..decoding.policies import Dynamic
from ..decoding.trace import Comparison
from .costs import StudyPassCosts
from .sweep import replayed_passes

THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05 ... 0.95


@dataclass(frozen=True)
class SavedRun:
    """A prompt's whole comparison as the study kept it, with the pair's end-of-text ids (a draft
    stops at one, so the replay needs them)."""

    comparison: Comparison
    eos_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Hindsight:
    threshold: float
    target_passes: int
    draft_passes: int
    modeled_s: float  # summed over the suite's prompts


def replayed(run: SavedRun, threshold: float, costs: StudyPassCosts) -> tuple[int, int, float]:
    """Dynamic lookahead at `threshold` on one saved prompt: its target and draft passes, and its
    modeled seconds."""
    c = run.comparison
    try:
        passes = replayed_passes(c, Dynamic(threshold), run.eos_ids)
    except ValueError as error:
        raise ValueError(f"{c.prompt[:40]!r}: {error}") from None
    return passes.target, passes.draft, costs.modeled_time(passes.target, passes.draft, c.prompt_tokens, passes.plain)


def best_dynamic(runs: Sequence[SavedRun], costs: StudyPassCosts,
                 thresholds: Iterable[float] = THRESHOLDS) -> Hindsight:
    """The threshold with the least modeled time summed over `runs` (the lowest of equal ones)."""
    best: Hindsight | None = None
    for threshold in thresholds:
        per_prompt = [replayed(run, threshold, costs) for run in runs]
        candidate = Hindsight(threshold, sum(p[0] for p in per_prompt), sum(p[1] for p in per_prompt),
                              sum(p[2] for p in per_prompt))
        if best is None or candidate.modeled_s < best.modeled_s:
            best = candidate
    if best is None:
        raise ValueError("no thresholds given")
    return best
