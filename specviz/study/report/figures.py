"""The report's figures: each suite's sums per policy (`SuiteFigures`), the oracle's lookahead
over a suite (`JumpStats`), the draft's judged tokens, modeled times from the suite's own
per-pass costs (explain/costs.py), and prompt-by-prompt wins. Pure: records in, numbers out.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...explain.analysis import Judged, judged_among
from ...explain.costs import StudyPassCosts, plain_passes
from ..records import ModeResult, PromptResult, RoundRecord, pooled_costs

# The "jumps around" rule's bounds (RULES, verdicts.py, states it; `JumpStats.jumps_around` applies it).
MODAL_SHARE_MAX = 0.5  # "jumps around": fewer than half the oracle's rounds at its most common value
MEAN_CHANGE_MIN = 1.0  # ... and it moves by a token or more per round on average


def judged_tokens(rounds: Iterable[RoundRecord]) -> list[Judged]:
    """Every draft token the target judged in these rounds (the rule of `analysis.judged_among`)."""
    return [j for r in rounds for j in judged_among(r.probs, r.accepted, r.lookahead)]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


HISTOGRAM_BINS: list[tuple[str, int, int]] = [("0", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4", 4, 4),
                                              ("5", 5, 5), ("6-10", 6, 10), ("11-20", 11, 20),
                                              ("21+", 21, 10**9)]


@dataclass
class JumpStats:
    """The oracle's lookahead over a suite: its distribution and its round-to-round change."""

    prompts: int
    rounds: int
    histogram: dict[str, int]  # HISTOGRAM_BINS label -> rounds
    percentiles: dict[int, float]  # 10, 25, 50, 75, 90
    modal_value: int | None
    modal_share: float | None  # share of rounds at the most common lookahead
    changes: int  # consecutive round pairs within a prompt
    mean_abs_change: float | None
    share_change_2_plus: float | None  # share of those pairs that differ by 2 tokens or more

    @property
    def jumps_around(self) -> bool:
        """The rule (RULES): no value holds most rounds, and it moves a token or more per round."""
        return (self.modal_share is not None and self.mean_abs_change is not None
                and self.modal_share < MODAL_SHARE_MAX and self.mean_abs_change >= MEAN_CHANGE_MIN)


def jump_stats(lookaheads_per_prompt: Sequence[Sequence[int]]) -> JumpStats:
    values = [k for prompt in lookaheads_per_prompt for k in prompt]
    changes = [abs(b - a) for prompt in lookaheads_per_prompt for a, b in itertools.pairwise(prompt)]
    histogram = {label: sum(low <= k <= high for k in values) for label, low, high in HISTOGRAM_BINS}
    modal_value = modal_share = None
    if values:
        counts: dict[int, int] = {}
        for k in values:
            counts[k] = counts.get(k, 0) + 1
        modal_value = max(sorted(counts), key=lambda k: counts[k])  # the smallest of equally common values
        modal_share = counts[modal_value] / len(values)
    return JumpStats(
        prompts=len(lookaheads_per_prompt), rounds=len(values), histogram=histogram,
        percentiles={q: percentile(values, q) for q in (10, 25, 50, 75, 90)} if values else {},
        modal_value=modal_value, modal_share=modal_share, changes=len(changes),
        mean_abs_change=statistics.fmean(changes) if changes else None,
        share_change_2_plus=sum(c >= 2 for c in changes) / len(changes) if changes else None,
    )


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def modeled_time(costs: StudyPassCosts, result: PromptResult, mode: ModeResult) -> float:
    """One policy's modeled time on one prompt (RULES; explain.costs)."""
    return costs.modeled_time(mode.target_passes, mode.draft_passes, result.prompt_tokens,
                              plain_passes([rd.lookahead for rd in mode.rounds]))


@dataclass
class PolicyTotals:
    """One policy summed over a suite's prompts."""

    label: str
    policy: str
    prompts: int
    target_passes: int
    draft_passes: int
    accepted: int
    wall_s: float
    modeled_s: float
    lossless: int  # prompts whose output equals target-only decoding
    drafted: int = 0  # tokens the draft proposed

    @property
    def acceptance(self) -> float | None:
        return _ratio(self.accepted, self.drafted)


def policy_totals(results: Sequence[PromptResult], policy: str, costs: StudyPassCosts) -> PolicyTotals | None:
    runs = [(r, m) for r in results if (m := r.mode(policy)) is not None]
    modes = [m for _, m in runs]
    if not modes:
        return None
    return PolicyTotals(
        label=modes[0].label, policy=policy, prompts=len(modes),
        target_passes=sum(m.target_passes for m in modes), draft_passes=sum(m.draft_passes for m in modes),
        accepted=sum(m.accepted for m in modes), wall_s=sum(m.wall_s for m in modes),
        modeled_s=sum(modeled_time(costs, r, m) for r, m in runs),
        lossless=sum(m.lossless is True for m in modes), drafted=sum(m.drafted for m in modes),
    )


@dataclass
class Wins:
    first: int
    second: int
    ties: int


def prompt_wins(results: Sequence[PromptResult], first: str, second: str, costs: StudyPassCosts,
                measured: bool = False) -> Wins:
    """On how many prompts `first` needed strictly less (modeled or measured) time than `second`."""
    wins = Wins(0, 0, 0)
    for r in results:
        a, b = r.mode(first), r.mode(second)
        if a is None or b is None:
            continue
        ta, tb = ((a.wall_s, b.wall_s) if measured else
                  (modeled_time(costs, r, a), modeled_time(costs, r, b)))
        if ta < tb:
            wins.first += 1
        elif tb < ta:
            wins.second += 1
        else:
            wins.ties += 1
    return wins


@dataclass
class SuiteFigures:
    preset: str
    suite: str
    results: list[PromptResult]
    costs: StudyPassCosts
    totals: dict[str, PolicyTotals]  # by policy name
    new_tokens: int
    target_only_wall_s: float
    target_only_modeled_s: float
    jumps: JumpStats
    judged: list[Judged]  # from static k=5's rounds

    def measured_speedup(self, policy: str) -> float | None:
        t = self.totals.get(policy)
        return _ratio(self.target_only_wall_s, t.wall_s) if t else None

    def modeled_speedup(self, policy: str) -> float | None:
        t = self.totals.get(policy)
        return _ratio(self.target_only_modeled_s, t.modeled_s) if t else None

    def median_measured_speedup(self, policy: str) -> float | None:
        """The median over prompts of target-only's wall time over the policy's."""
        speedups = [r.target_only_wall_s / m.wall_s for r in self.results
                    if (m := r.mode(policy)) is not None and m.wall_s > 0]
        return statistics.median(speedups) if speedups else None


def suite_figures(preset: str, suite: str, results: Sequence[PromptResult]) -> SuiteFigures:
    results = sorted(results, key=lambda r: r.index)
    costs = pooled_costs(results)
    totals = {p: t for p in ("static", "heuristic", "dynamic", "costaware", "oracle")
              if (t := policy_totals(results, p, costs)) is not None}
    new_tokens = sum(r.new_tokens for r in results)
    oracle_rounds = [[rd.lookahead for rd in m.rounds] for r in results if (m := r.mode("oracle")) is not None]
    static_rounds = [rd for r in results if (m := r.mode("static")) is not None for rd in m.rounds]
    return SuiteFigures(preset, suite, list(results), costs, totals, new_tokens,
                        sum(r.target_only_wall_s for r in results),
                        sum(costs.target_only_modeled_time(r.new_tokens) for r in results),
                        jump_stats(oracle_rounds), judged_tokens(static_rounds))


def preset_figures(preset: str, done: Sequence[PromptResult], suites: Sequence[str]) -> list[SuiteFigures]:
    """Each suite's figures for one preset, in the order `suites` gives (suites it did not run left out)."""
    return [suite_figures(preset, suite, [r for r in done if r.preset == preset and r.suite == suite])
            for suite in suites if any(r.preset == preset and r.suite == suite for r in done)]


def oracle_lowest(result: PromptResult) -> bool | None:
    """The oracle needed no more target passes than any other policy on this prompt."""
    oracle = result.mode("oracle")
    if oracle is None:
        return None
    return all(oracle.target_passes <= m.target_passes for m in result.modes)
