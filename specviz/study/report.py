"""The study's records and everything computed from them: per-suite figures, the verdict rules
and the STUDY.md report (`python -m specviz study`, see study.py for the runs).

Pure: records in, numbers and markdown out; no model and no torch, so a report can be rebuilt
from `results.jsonl` alone. The verdicts are never written in: each follows a rule in `RULES`,
implemented by the small functions below (`headline_holds`, `JumpStats.jumps_around`,
`dynamic_wins`, `majority`).
"""

from __future__ import annotations

import csv
import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..explain.analysis import Judged, auc, judged_among, split_at
from ..explain.costs import StudyPassCosts, plain_passes
from ..explain.hindsight import Hindsight, SavedRun, best_dynamic
from ..explain.sweep import can_replay
from ..pair.presets import PRESETS
from .records import ModeResult, PromptResult, RoundRecord, pooled_costs

STUDY_MODES = "static:5,heuristic:5,dynamic:0.4,oracle"
THRESHOLD = 0.4  # dynamic's confidence threshold, where the calibration is split
HEADLINE_SUITE = "coding"  # the study's headline is an MBPP prompt: our MBPP-style suite
HINDSIGHT_MARGIN = 0.05  # the cost-aware rule "keeps up" with the best threshold in hindsight within this
COST_AWARE_RIVALS = ("dynamic", "heuristic")  # what it has to beat, suite by suite

# The study's published figures (docs/DESIGN.md), quoted beside ours; never used in a verdict.
STUDY_HEADLINE = {"static": (38, 192), "oracle": (27, 129)}  # (target passes, draft passes)

# The rules the verdicts follow. The report prints them; the functions below implement them.
MODAL_SHARE_MAX = 0.5  # "jumps around": fewer than half the oracle's rounds at its most common value
MEAN_CHANGE_MIN = 1.0  # ... and it moves by a token or more per round on average
AUC_WELL, AUC_WEAKLY = 0.75, 0.6  # how to describe the draft's calibration
FEW_REJECTED = 20  # below this many rejected tokens, say the AUC is rough
# The bundled pairs draft with a copy of the target; every other pair's dynamic-vs-heuristic
# verdict is decided by measured time (RULES).
MODELED_PRESETS = frozenset({"smollm2-135m-int8", "smollm2-135m-bf16"})
# A pair whose draft is not its model is a pair of its own (runner.study_name): "smollm2-135m-int8+lookup"
# or "...+lookup-n3-k16", its records and verdicts apart, timed by the wall clock (not in MODELED_PRESETS).
PAIR_DRAFT_MARK = "+"
LOOKUP_MARK = PAIR_DRAFT_MARK + "lookup"  # the lookup draft's pairs, which have a section of their own
STOP_FLOOR = 0.95  # a policy suits a lookup draft only if it never falls below this on a suite
RULES = f"""\
- **A fixed lookahead wastes work** (headline): *reproduced* when, summed over the coding suite,
  the oracle needs fewer target passes **and** fewer draft passes than static k=5. The first
  prompt's figures are shown beside the sum (as the study quotes one prompt) but do not decide.
- **The oracle's lookahead jumps around**: in a suite, *reproduced* when fewer than
  {MODAL_SHARE_MAX:.0%} of the oracle's rounds have its most common lookahead (no fixed k
  would match most rounds) **and** its lookahead changes by at least {MEAN_CHANGE_MIN:g} token
  on average from one round to the next within a prompt. Over a preset: reproduced in more
  than half of the suites run.
- **The dynamic rule beats the heuristic**: in a suite, dynamic wins when its time summed over
  the suite is lower than the heuristic's. On a pair whose draft is a model of its own (the real
  pair, Qwen2.5-Coder 0.5B drafting for 1.5B) that is the *measured* wall-clock time, the study's
  own currency, with modeled time beside it. On the bundled pairs, whose draft is a copy of the
  target ({", ".join(sorted(MODELED_PRESETS))}) and costs 0.5-1.0 of a target pass on a CPU, it
  is the *modeled* time. A prompt's modeled time prices each
  forward pass at the mean cost of its kind, measured in that suite over all four policies
  (target-only decoding for its own passes), and the passes that read the prompt at a cost per
  prompt: a policy's modeled time = its first verification pass + (target passes - 1) x a later
  verification pass + the draft's prefill call + (draft passes - 1) x a draft call (the draft
  passes count the prefill call; a one-token prompt has none); target-only's modeled time = its
  first pass + (new tokens - 1) x a one-token pass. Where any record of a suite predates the
  timing of the prefill (section 4 says which suites), the passes that read the prompt are
  priced like any other pass of their kind, pooled, as in earlier reports: long prompts then
  inflate every per-pass cost. For the bundled pairs modeled time decides because their wall
  clock says little of what the passes would buy with a cheaper draft, and a wall-clock ratio
  also carries whatever else the machine did during each run; their measured speedups are shown
  beside it. Each suite also gives the median over its prompts of each policy's measured speedup
  (target-only's wall time over the policy's, per prompt). Over a preset: reproduced when
  dynamic wins in more than half of the suites run. Per prompt, a win is a strictly lower
  modeled (or measured) time; equal times are ties.
- **Why, for this pair** (no verdict): the draft's calibration is measured on static k=5's
  rounds (the one policy whose stopping ignores the draft's confidence): in a round, draft
  tokens before the first rejection are *accepted*, the first rejected one is *rejected*, later
  ones are not judged. AUC = the chance that a random accepted token had a higher draft
  probability than a random rejected one (ties count half); it is described as separating
  them well at {AUC_WELL} or more, weakly from {AUC_WEAKLY}, barely below that. A draft call's
  cost is its mean time over a target-only one-token pass's, both measured in the same suite
  (the passes that read the prompt left out, where they were timed apart).
- **The cost-aware rule** (issue 29; where a run has it): in a suite it *wins* when its time summed
  over the suite is lower than both dynamic 0.4's and the heuristic's (measured or modeled time,
  as for the dynamic rule above), and it *keeps up* when its modeled time is at most
  {HINDSIGHT_MARGIN:.0%} above the best dynamic threshold's in hindsight: the threshold among
  0.05, 0.10, ... 0.95 whose what-if replay (the saved comparisons, sweep.py) gives the least
  modeled time summed over that suite, priced with the same per-pass costs. Hindsight is modeled
  time only: no run measured those thresholds. Over a preset: *holds* when it wins in at least
  2 of 3 suites (more than half of the suites run) and keeps up in every suite.
- Records cut short by the time budget (partial) are left out of every figure and redone by
  the next run."""


# ---- pure figures ------------------------------------------------------------------------


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


def majority(flags: Sequence[bool]) -> bool:
    """More than half: the rule for a preset's verdict over its suites."""
    return sum(flags) * 2 > len(flags)


def headline_holds(static: PolicyTotals, oracle: PolicyTotals) -> bool:
    return oracle.target_passes < static.target_passes and oracle.draft_passes < static.draft_passes


def decided_by_measured_time(preset: str) -> bool:
    """The rule (RULES): a pair with a draft model of its own is judged by its wall clock."""
    return preset not in MODELED_PRESETS


def faster(first: PolicyTotals, second: PolicyTotals, measured: bool = False) -> bool:
    """`first` took less time over the suite than `second`: measured or modeled (RULES)."""
    if measured:
        return first.wall_s < second.wall_s
    return first.modeled_s < second.modeled_s


def dynamic_wins(dynamic: PolicyTotals, heuristic: PolicyTotals, measured: bool = False) -> bool:
    return faster(dynamic, heuristic, measured)


def verdict(holds: bool) -> str:
    return "**reproduced**" if holds else "**not reproduced on this pair**"


# ---- one suite's figures -----------------------------------------------------------------


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


# ---- the report ----------------------------------------------------------------------------


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def _change(ours: int, base: int) -> str:
    return f"{(ours - base) / base:+.0%}" if base else "n/a"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def duration(seconds: float) -> str:
    """"1 h 04 min" or "3 min 07 s"."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def headline_section(figures: SuiteFigures | None) -> tuple[list[str], bool | None]:
    lines = ["### 1. A fixed lookahead wastes work (the MBPP headline)", ""]
    if figures is None or "static" not in figures.totals or "oracle" not in figures.totals:
        return lines + ["Not checked: the coding suite was not run for this preset.", ""], None
    first = figures.results[0]
    f_static, f_oracle = first.mode("static"), first.mode("oracle")
    static, oracle = figures.totals["static"], figures.totals["oracle"]
    (s_t, s_d), (o_t, o_d) = STUDY_HEADLINE["static"], STUDY_HEADLINE["oracle"]
    holds = headline_holds(static, oracle)
    lines += [
        (f"Target and draft forward passes, in the study's format. Ours: the coding suite's first prompt "
        f"({first.prompt_id}, {first.new_tokens} new tokens) and the sum over its {_n(len(figures.results), 'prompt')} "
        f"({figures.new_tokens} new tokens)."), "",
        ("| policy | study (MBPP prompt): target | draft | ours, first prompt: target | draft "
        "| ours, suite sum: target | draft |"),
        "|---|---|---|---|---|---|---|",
        (f"| static k=5 | {s_t} | {s_d} | {f_static.target_passes} | {f_static.draft_passes} "
        f"| {static.target_passes} | {static.draft_passes} |"),
        (f"| oracle | {o_t} | {o_d} | {f_oracle.target_passes} | {f_oracle.draft_passes} "
        f"| {oracle.target_passes} | {oracle.draft_passes} |"),
        (f"| oracle vs static | {_change(o_t, s_t)} | {_change(o_d, s_d)} "
        f"| {_change(f_oracle.target_passes, f_static.target_passes)} "
        f"| {_change(f_oracle.draft_passes, f_static.draft_passes)} "
        f"| {_change(oracle.target_passes, static.target_passes)} "
        f"| {_change(oracle.draft_passes, static.draft_passes)} |"),
        "",
        (f"Summed over the suite the oracle needs {oracle.target_passes} target passes against static's "
         f"{static.target_passes} ({'fewer' if oracle.target_passes < static.target_passes else 'not fewer'}) and "
         f"{oracle.draft_passes} draft passes against {static.draft_passes} "
         f"({'fewer' if oracle.draft_passes < static.draft_passes else 'not fewer'}): {verdict(holds)}. "
         f"On the first prompt alone: "
         f"{'fewer of both' if headline_holds(_as_totals(f_static), _as_totals(f_oracle)) else 'not fewer of both'}."),
        "",
    ]
    return lines, holds


def _as_totals(mode: ModeResult) -> PolicyTotals:
    return PolicyTotals(mode.label, mode.policy, 1, mode.target_passes, mode.draft_passes, mode.accepted,
                        mode.wall_s, 0.0, int(mode.lossless is True), mode.drafted)


def jumps_section(suites: Sequence[SuiteFigures]) -> tuple[list[str], bool | None]:
    lines = ["### 2. The oracle's lookahead jumps around", "",
             ("The oracle's lookahead in every round of every prompt: how often each value occurs (rounds), its "
             "percentiles, the share of rounds at its most common value, and how much it changes from one round to "
             "the next within a prompt."), "",
             "| suite | rounds | " + " | ".join(f"k={label}" for label, _, _ in HISTOGRAM_BINS)
             + " | p10 / p25 / p50 / p75 / p90 | most common k (share) | mean abs change | changes of 2+ | jumps? |",
             "|---|---" + "|---" * len(HISTOGRAM_BINS) + "|---|---|---|---|---|"]
    flags = []
    for s in suites:
        j = s.jumps
        if not j.rounds:
            continue
        flags.append(j.jumps_around)
        pcts = " / ".join(f"{j.percentiles[q]:g}" for q in (10, 25, 50, 75, 90))
        lines.append(f"| {s.suite} | {j.rounds} | " + " | ".join(str(j.histogram[label]) for label, _, _ in
                                                                 HISTOGRAM_BINS)
                     + f" | {pcts} | {j.modal_value} ({_pct(j.modal_share)}) | {_f(j.mean_abs_change)} "
                     f"| {_pct(j.share_change_2_plus)} | {'yes' if j.jumps_around else 'no'} |")
    if not flags:
        return lines + ["", "Not checked: no oracle rounds.", ""], None
    holds = majority(flags)
    lines += ["", f"Jumps around in {sum(flags)} of {len(flags)} suites: {verdict(holds)}.", ""]
    return lines, holds


def dynamic_section(suites: Sequence[SuiteFigures], measured: bool = False) -> tuple[list[str], bool | None]:
    """Section 3; `measured`: the verdict follows measured time (a pair with a draft of its own)."""
    decides = "measured" if measured else "modeled"
    lines = ["### 3. The dynamic rule against the heuristic", "",
             ("Per suite, summed over its prompts. Measured speedup = target-only wall time / the policy's wall time "
             "(totals); median = the median over prompts of that ratio per prompt; modeled speedup from this suite's "
             "own per-pass costs (section 4 and the rules above). Lossless = prompts whose output equals target-only "
             f"decoding. For this pair **{decides}** time decides (the rules above)."), ""]
    flags = []
    for s in suites:
        dyn, heu = s.totals.get("dynamic"), s.totals.get("heuristic")
        lines += [(f"**{s.suite}** ({_n(len(s.results), 'prompt')}, {s.new_tokens} new tokens; target-only "
                  f"{s.target_only_wall_s:.1f} s measured, {s.target_only_modeled_s:.1f} s modeled)"), "",
                  ("| policy | target passes | draft passes | acceptance | measured speedup | median measured "
                   "speedup | modeled speedup | lossless |"), "|---|---|---|---|---|---|---|---|"]
        for t in s.totals.values():
            lines.append(f"| {t.label} | {t.target_passes} | {t.draft_passes} | {_f(t.acceptance)} "
                         f"| {_x(s.measured_speedup(t.policy))} | {_x(s.median_measured_speedup(t.policy))} "
                         f"| {_x(s.modeled_speedup(t.policy))} | {t.lossless}/{t.prompts} |")
        if dyn is None or heu is None:
            lines += ["", "Not checked: dynamic or heuristic missing.", ""]
            continue
        wins = dynamic_wins(dyn, heu, measured)
        flags.append(wins)
        by_model = prompt_wins(s.results, "dynamic", "heuristic", s.costs)
        by_wall = prompt_wins(s.results, "dynamic", "heuristic", s.costs, measured=True)
        median = s.median_measured_speedup("dynamic")
        faster = "" if median is None else (
            f" The median prompt ran {median:.2f}x as fast with dynamic as with the target alone "
            f"({'faster' if median > 1 else 'not faster'} in wall-clock time).")
        lines += ["", (f"Dynamic {'beats' if wins else 'does not beat'} the heuristic here by {decides} time "
                       f"(measured {_x(s.measured_speedup('dynamic'))} vs {_x(s.measured_speedup('heuristic'))}; "
                       f"modeled {s.modeled_speedup('dynamic'):.2f}x vs {s.modeled_speedup('heuristic'):.2f}x). "
                       f"Prompts won, by measured time: dynamic {by_wall.first}, heuristic {by_wall.second}, ties "
                       f"{by_wall.ties}; by modeled time: dynamic {by_model.first}, heuristic {by_model.second}, "
                       f"ties {by_model.ties}.{faster}"), ""]
    if not flags:
        return lines, None
    holds = majority(flags)
    lines += [f"Dynamic wins in {sum(flags)} of {len(flags)} suites ({decides} time): {verdict(holds)}.", ""]
    return lines, holds


def _both(s: SuiteFigures, policy: str) -> str:
    return f"{_x(s.measured_speedup(policy))} ({_x(s.modeled_speedup(policy))} modeled)"


def _slowest(s: SuiteFigures) -> str:
    """The cost-aware rule's lowest modeled speedup over the suite's prompts, and which prompt: where
    drafting does not pay it should decode plainly, at about target-only's speed."""
    speedups = [(s.costs.target_only_modeled_time(r.new_tokens) / t, r.prompt_id) for r in s.results
                if (m := r.mode("costaware")) is not None and (t := modeled_time(s.costs, r, m)) > 0]
    if not speedups:
        return "n/a"
    worst, prompt = min(speedups)
    return f"{_x(worst)} ({prompt})"


def cost_aware_section(suites: Sequence[SuiteFigures], saved: Mapping[tuple[str, str, str, int], SavedRun],
                       measured: bool = False) -> tuple[list[str], bool | None]:
    """Section 5: the cost-aware rule against dynamic 0.4, the heuristic and the best threshold in
    hindsight (None: no suite ran it)."""
    if not any("costaware" in s.totals for s in suites):
        return [], None
    decides = "measured" if measured else "modeled"
    lines = ["### 5. The cost-aware rule", "",
             ("Per suite, summed over its prompts: speedups over target-only decoding, measured (wall time) and "
              "modeled (section 4's per-pass costs); the best dynamic threshold in hindsight is modeled only "
              f"(the rules above). For this pair **{decides}** time decides wins."), "",
             ("| suite | cost-aware | dynamic 0.4 | heuristic | best threshold in hindsight | cost-aware / best "
              "(modeled time) | wins | keeps up | its slowest prompt against target-only (modeled) |"),
             "|---|---|---|---|---|---|---|---|---|"]
    wins_flags, keeps_flags = [], []
    for s in suites:
        ca = s.totals.get("costaware")
        if ca is None or any(p not in s.totals for p in COST_AWARE_RIVALS):
            continue
        wins = all(faster(ca, s.totals[p], measured) for p in COST_AWARE_RIVALS)
        # runs from before a lookup draft's comparison kept its prompt cannot be replayed
        runs = [saved[r.key] for r in s.results if r.key in saved and can_replay(saved[r.key].comparison)]
        best: Hindsight | None = best_dynamic(runs, s.costs) if len(runs) == len(s.results) else None
        over = ca.modeled_s / best.modeled_s if best is not None and best.modeled_s > 0 else None
        keeps = None if over is None else over <= 1 + HINDSIGHT_MARGIN
        wins_flags.append(wins)
        if keeps is not None:
            keeps_flags.append(keeps)

        hindsight = ("n/a (no what-if replay for these runs)" if best is None else
                     f"t={best.threshold:g}: {_x(s.target_only_modeled_s / best.modeled_s)} modeled")
        lines.append(f"| {s.suite} | {_both(s, 'costaware')} | {_both(s, 'dynamic')} | {_both(s, 'heuristic')} | {hindsight} "
                     f"| {'n/a' if over is None else f'{over:.3f}'} | {'yes' if wins else 'no'} "
                     f"| {'n/a' if keeps is None else ('yes' if keeps else 'no')} | {_slowest(s)} |")
    if not wins_flags:
        return lines + ["", "Not checked: dynamic or the heuristic missing.", ""], None
    all_checked = len(keeps_flags) == len(wins_flags)
    holds = majority(wins_flags) and all_checked and all(keeps_flags)
    lines += ["", (f"The cost-aware rule wins in {sum(wins_flags)} of {len(wins_flags)} suites ({decides} time) and "
                   f"keeps up with the best threshold in hindsight in {sum(keeps_flags)} of {len(wins_flags)}"
                   + ("" if all_checked else " (the others could not be replayed)")
                   + f": **{'holds' if holds else 'does not hold'}**."), ""]
    return lines, holds


def _calibration_words(value: float | None) -> str:
    if value is None:
        return "cannot be measured (no accepted or no rejected tokens)"
    if value >= AUC_WELL:
        return "separates accepted from rejected tokens well"
    if value >= AUC_WEAKLY:
        return "separates accepted from rejected tokens weakly"
    return "barely separates accepted from rejected tokens"


def why_section(suites: Sequence[SuiteFigures]) -> list[str]:
    lines = ["### 4. Why, for this pair", "",
             "Calibration from static k=5's judged draft tokens.", "",
             (f"| suite | judged tokens | accepted | AUC | accepted with p >= {THRESHOLD:g} | accepted with p < "
              f"{THRESHOLD:g} |"), "|---|---|---|---|---|---|"]
    everything: list[Judged] = []
    for s in suites:
        everything += s.judged
        split = split_at(s.judged, THRESHOLD)
        lines.append(f"| {s.suite} | {len(s.judged)} | {_pct(_ratio(sum(j.accepted for j in s.judged), len(s.judged)))} "
                     f"| {_f(auc(s.judged))} | {_pct(split.above_share)} of {split.above} "
                     f"| {_pct(split.below_share)} of {split.below} |")
    lines += [""] + costs_table(suites)
    pooled = auc(everything)
    rejected = sum(not j.accepted for j in everything)
    few = f"; with fewer than {FEW_REJECTED} rejections the AUC is a rough figure" if rejected < FEW_REJECTED else ""
    split = split_at(everything, THRESHOLD)
    fractions = [f"{ratio:.2f} ({s.suite})" for s in suites if (ratio := s.costs.draft_to_token_pass) is not None]
    lines += ["", (f"Over all suites the draft's probability {_calibration_words(pooled)} (AUC {_f(pooled)} on "
                   f"{len(everything)} judged tokens, {rejected} of them rejected{few}): "
                   f"{_pct(split.above_share)} of the tokens it gave {THRESHOLD:g} or more were accepted, "
                   f"{_pct(split.below_share)} of those below, where dynamic stops drafting. A draft call costs "
                   f"{', '.join(fractions) or 'n/a'} of a one-token target pass: every rejected draft token "
                   f"wastes that much, and every round the threshold ends early costs one more verification pass."), ""]
    return lines


def costs_table(suites: Sequence[SuiteFigures]) -> list[str]:
    """The per-pass costs behind the modeled times, and which suites timed the prefill apart."""
    lines = [("Costs per forward pass, the means behind the modeled times (the rules above): draft calls and "
              "verification passes over all four policies, one-token passes from target-only decoding. The passes "
              "that read the prompt cost per prompt and are shown apart where they were timed apart."), "",
             ("| suite | prefill timed apart | draft call | draft prefill call | target pass (1 token) "
              "| target-only first pass | verification pass | first verification pass | draft / target "
              "| verification / target |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for s in suites:
        c, timed = s.costs, sum(r.prefill_timed_apart for r in s.results)
        lines.append(f"| {s.suite} | {'yes' if c.prefill_apart else 'no'} ({timed} of {_n(len(s.results), 'record')}) "
                     f"| {_ms(c.draft_call_s or None)} | {_prefill_ms(c, c.draft_prefill_s)} "
                     f"| {_ms(c.target_token_s or None)} | {_prefill_ms(c, c.target_prefill_s)} "
                     f"| {_ms(c.verify_s or None)} | {_prefill_ms(c, c.first_verify_s)} "
                     f"| {_f(c.draft_to_token_pass)} | {_f(c.verify_to_token_pass)} |")
    return lines + ["", prefill_coverage_sentence(suites)]


def _prefill_ms(costs: StudyPassCosts, seconds: float) -> str:
    return _ms(seconds or None) if costs.prefill_apart else "not apart"


def prefill_coverage_sentence(suites: Sequence[SuiteFigures]) -> str:
    pooled = [s.suite for s in suites if not s.costs.prefill_apart]
    if not pooled:
        return "Every suite here timed the prompt's prefill apart."
    apart = [s.suite for s in suites if s.costs.prefill_apart]
    return ((f"The prefill was timed apart in {', '.join(apart)}; not in " if apart else "The prefill was not timed "
             "apart in ") + f"{', '.join(pooled)}: those records predate its timing (all of a suite's must have it), "
            "so there the passes that read the prompt are priced like any other, pooled, and the longer the prompts "
            "the more they inflate every per-pass cost. Re-running those suites with `--force` "
            f"(`python -m specviz study --preset {suites[0].preset} --force`, narrowed with `--suites`) times it.")


def oracle_lowest(result: PromptResult) -> bool | None:
    """The oracle needed no more target passes than any other policy on this prompt."""
    oracle = result.mode("oracle")
    if oracle is None:
        return None
    return all(oracle.target_passes <= m.target_passes for m in result.modes)


def exactness_sentence(results: Sequence[PromptResult]) -> str:
    """How often the oracle was lowest and the rounds met the ideal line, over these prompts."""
    lowest = [flag for r in results if (flag := oracle_lowest(r)) is not None]
    met = [flag for r in results for m in r.modes for rd in m.rounds if (flag := rd.meets_ideal) is not None]
    words = (f"The oracle is the true ideal: it needed no more target passes than any other policy on "
             f"{sum(lowest)} of {_n(len(lowest), 'prompt')}")
    if met:
        words += (f", and {sum(met)} of {_n(len(met), 'round')} of every policy accepted exactly "
                  f"min(its lookahead, the oracle's ideal at its start)")
    return words + "."


def prefill_coverage_line(records: Sequence[PromptResult]) -> str:
    """Per preset, the suites whose costs price the prefill apart (every record timed it) and the rest."""
    parts = []
    for preset in dict.fromkeys(r.preset for r in records):
        suites = list(dict.fromkeys(r.suite for r in records if r.preset == preset))
        apart = [s for s in suites if all(r.prefill_timed_apart for r in records if (r.preset, r.suite) == (preset, s))]
        pooled = [s for s in suites if s not in apart]
        words = ("every suite" if not pooled else
                 f"{', '.join(apart)}; not {', '.join(pooled)}" if apart else "none of its suites")
        parts.append(f"{preset}: {words}")
    return (f"The prompt's prefill timed apart (priced per prompt; section 4): {'; '.join(parts)}. Records made "
            f"before it was timed price it pooled with the other passes; re-running them with `--force` times it.")


Verdicts = dict[str, bool | None]  # claim key (CLAIMS) -> holds; None: not checked

# The claims, in the order the verdict tables list them.
CLAIMS = [("headline", ("A fixed lookahead wastes work: the oracle needs fewer target and draft passes than "
                        "static k=5 (coding)")),
          ("jumps", "The oracle's lookahead jumps around from round to round"),
          ("dynamic", "The dynamic rule (threshold 0.4) beats the heuristic schedule"),
          ("costaware", ("The cost-aware rule beats dynamic 0.4 and the heuristic and keeps up with the best "
                         "threshold in hindsight"))]


def model_preset(name: str) -> str:
    """The model pair a studied pair's name stands for."""
    return name.split(PAIR_DRAFT_MARK)[0]


def preset_figures(preset: str, done: Sequence[PromptResult], suites: Sequence[str]) -> list[SuiteFigures]:
    """Each suite's figures for one preset, in the order `suites` gives (suites it did not run left out)."""
    return [suite_figures(preset, suite, [r for r in done if r.preset == preset and r.suite == suite])
            for suite in suites if any(r.preset == preset and r.suite == suite for r in done)]


def preset_sections(preset: str, done: Sequence[PromptResult], suites: Sequence[str],
                    saved: Mapping[tuple[str, str, str, int], SavedRun] | None,
                    intro: Sequence[str] = ()) -> tuple[list[str], Verdicts]:
    """One preset's part of a report (sections 1-5 under its own heading) and its verdicts."""
    figures = preset_figures(preset, done, suites)
    coding = next((f for f in figures if f.suite == HEADLINE_SUITE), None)
    headline, h = headline_section(coding)
    jumps, j = jumps_section(figures)
    dynamic, d = dynamic_section(figures, measured=decided_by_measured_time(preset))
    cost_aware, c = cost_aware_section(figures, saved or {}, measured=decided_by_measured_time(preset))
    lossless = sum(m.lossless is True for f in figures for r in f.results for m in r.modes)
    modes_run = sum(len(r.modes) for f in figures for r in f.results)
    suites_run = ", ".join(f"{f.suite} ({_n(len(f.results), 'prompt')})" for f in figures)
    body = [f"## {preset}", "", *intro,
            (f"Suites: {suites_run}. Lossless check: "
             f"{lossless} of {modes_run} policy runs produced exactly target-only decoding's tokens."), "",
            exactness_sentence([r for f in figures for r in f.results]), ""]
    body += headline + jumps + dynamic + why_section(figures) + cost_aware
    return body, {"headline": h, "jumps": j, "dynamic": d, "costaware": c}


def verdict_cell(key: str, holds: bool | None) -> str:
    if holds is None:
        return "not checked"
    if key == "costaware":
        return f"**{'holds' if holds else 'does not hold'}**"
    return verdict(holds)


def verdict_table(columns: Sequence[str], verdicts: Mapping[str, Verdicts],
                  about: Sequence[tuple[str, Sequence[str]]] = ()) -> list[str]:
    """A claim a row, a column a preset; `about`: rows put first that say what each column ran
    (their first cell, then one per column)."""
    lines = ["| claim | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in about]
    for key, text in CLAIMS:
        if key == "costaware" and all(verdicts[p][key] is None for p in columns):
            continue  # no run had the rule
        lines.append(f"| {text} | " + " | ".join(verdict_cell(key, verdicts[p][key]) for p in columns) + " |")
    return lines



def report_markdown(records: Sequence[PromptResult], invocations: Sequence[dict[str, Any]],
                    results_link: str, report_command: str | None = None,
                    saved: Mapping[tuple[str, str, str, int], SavedRun] | None = None) -> str:
    """STUDY.md from the records. `invocations`: the runs that produced them (meta.json); `saved`:
    the prompts' whole comparisons where kept, for the what-if replays (section 5)."""
    done = [r for r in records if not r.partial]
    partial = len(records) - len(done)
    presets = list(dict.fromkeys(r.preset for r in done))
    suites_seen = list(dict.fromkeys(r.suite for r in done))
    lines = ["# The study's claims, checked on SpecViz's pairs", "",
             (f"Each claim of the Hugging Face / Intel Labs study of dynamic speculation lookahead (docs/DESIGN.md), "
              f"checked on the prompts below. Every figure is computed from [`{results_link}`]({results_link}) "
              f"(one record per prompt; the same figures per prompt and mode in `results.csv` beside it) by "
              f"`specviz/study/runner.py`; the verdicts follow the rules stated below, from those numbers."), ""]
    lines += ["## How these figures were made", ""]
    for inv in invocations:
        lines += [f"- `{inv.get('command', '?')}`",
                  (f"  - {inv.get('started', '?')} to {inv.get('finished') or 'interrupted'}; "
                   f"{duration(float(inv.get('wall_s') or 0.0))} wall time, {inv.get('prompts_run', 0)} prompts "
                   f"computed ({inv.get('prompts_skipped', 0)} already done)"),
                  (f"  - machine: {inv.get('cpu', '?')}, {inv.get('cores', '?')} cores; torch threads "
                   f"(`torch.get_num_threads()`) {inv.get('torch_threads', '?')}; "
                   + ", ".join(f"{k} {v}" for k, v in (inv.get('versions') or {}).items()))]
        lines += [f"  - {preset} ran as: {setup}" for preset, setup in (inv.get("setups") or {}).items()]
    if report_command:
        lines.append(f"- report regenerated with `{report_command}`")
    total = sum(r.seconds for r in done)
    per_preset_count = ", ".join(f"{p}: {sum(r.preset == p for r in done)}" for p in presets)
    budgets = ", ".join(sorted({str(r.max_new_tokens) for r in done}))
    lines += ["", (f"Prompts: {len(done)} records ({per_preset_count}), at most {budgets} new tokens, greedy, "
                   f"modes {', '.join(dict.fromkeys(m.label for r in done for m in r.modes)) or STUDY_MODES}, one prompt at a time. Compute time of these prompts: {duration(total)} "
                   f"(mean {total / len(done) if done else 0:.1f} s per prompt)."
                   + (f" Left out: {partial} partial records (time budget ran out)." if partial else "")), ""]
    if done:
        lines += [prefill_coverage_line(done), ""]
    if not done:
        return "\n".join(lines + ["No finished prompts yet.", ""])

    verdicts: dict[str, Verdicts] = {}
    bodies: list[str] = []
    for preset in presets:
        body, verdicts[preset] = preset_sections(preset, [r for r in done if r.preset == preset], suites_seen, saved)
        bodies += body
    lines += ["## Verdicts", ""] + verdict_table(presets, verdicts)
    lines += ["", "## The rules", "", RULES, ""]
    return "\n".join(lines + bodies) + "\n"


CSV_COLUMNS = ["preset", "suite", "prompt_id", "max_new_tokens", "mode", "policy", "new_tokens", "target_passes",
               "draft_passes", "accepted", "acceptance_rate", "wall_s", "draft_s", "verify_s", "measured_speedup",
               "modeled_speedup", "lossless", "partial"]


def write_csv(path: Path, records: Sequence[PromptResult]) -> None:
    """One row per prompt and mode (target-only included); modeled speedups use the suite's costs."""
    costs: dict[tuple[str, str, int], StudyPassCosts] = {}
    for key in {(r.preset, r.suite, r.max_new_tokens) for r in records}:
        costs[key] = pooled_costs([r for r in records if (r.preset, r.suite, r.max_new_tokens) == key
                                             and not r.partial])
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in sorted(records, key=lambda r: (r.preset, r.suite, r.index)):
            c = costs[(r.preset, r.suite, r.max_new_tokens)]
            base = c.target_only_modeled_time(r.new_tokens)
            writer.writerow([r.preset, r.suite, r.prompt_id, r.max_new_tokens, "target-only", "target-only",
                             r.new_tokens, r.new_tokens, 0, 0, "", f"{r.target_only_wall_s:.4f}", "", "", "1.0000",
                             "1.0000", True, r.partial])
            for m in r.modes:
                modeled = modeled_time(c, r, m)
                writer.writerow([r.preset, r.suite, r.prompt_id, r.max_new_tokens, m.label, m.policy, m.new_tokens,
                                 m.target_passes, m.draft_passes, m.accepted,
                                 f"{m.accepted / m.drafted:.4f}" if m.drafted else "",
                                 f"{m.wall_s:.4f}", f"{m.draft_s:.4f}", f"{m.verify_s:.4f}",
                                 f"{r.target_only_wall_s / m.wall_s:.4f}" if m.wall_s else "",
                                 f"{base / modeled:.4f}" if modeled else "", m.lossless, r.partial])


# ---- the page of record --------------------------------------------------------------------


@dataclass
class Run:
    """One preset's records in one result folder: a run of the study, as the page of record sees it."""

    name: str  # the folder as the repository names it (results/study/<pair>-<draft>-<cpu>-<date>)
    folder: str  # the folder, relative to the page
    report: str | None  # the folder's own report, relative to the page, where it has one
    preset: str
    records: list[PromptResult]  # finished ones
    partial: int  # records cut short by the time budget
    invocations: list[dict[str, Any]]  # those of meta.json that wrote these records

    @property
    def newest(self) -> str:
        return max((r.finished for r in self.records), default="")

    @property
    def suites(self) -> list[str]:
        return list(dict.fromkeys(r.suite for r in self.records))

    @property
    def link(self) -> str:
        return f"[{self.name}]({self.report or self.folder + '/results.jsonl'})"

    def dates(self) -> str:
        first, last = min(r.finished for r in self.records)[:10], self.newest[:10]
        return first if first == last else f"{first} to {last}"

    def machine(self) -> str:
        seen = dict.fromkeys(f"{inv.get('cpu', '?')}, {inv.get('cores', '?')} cores, "
                             f"{inv.get('torch_threads', '?')} torch threads" for inv in self.invocations)
        return "; ".join(seen) or "not recorded"

    def setup(self) -> str:
        seen = dict.fromkeys((inv.get("setups") or {}).get(self.preset) for inv in self.invocations)
        return "; ".join(s or "not recorded" for s in seen) or "not recorded"

    def prompts(self) -> str:
        budgets = ", ".join(sorted({str(r.max_new_tokens) for r in self.records}))
        per_suite = ", ".join(f"{s} {sum(r.suite == s for r in self.records)}" for s in self.suites)
        return f"{len(self.records)} ({per_suite}), at most {budgets} new tokens"

    def policies(self) -> str:
        return ", ".join(dict.fromkeys(m.label for r in self.records for m in r.modes))


def _moment(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def invocations_of(records: Sequence[PromptResult], invocations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The invocations that wrote any of these records, by time: a record finished between an
    invocation's start and its end (an interrupted one's: the next one's start). Matched by time
    because the commands of older runs do not name every preset they ran (the default pairs)."""
    ordered = sorted(invocations, key=lambda inv: _moment(inv["started"]))
    windows = []
    for i, inv in enumerate(ordered):
        end = inv.get("finished") or (ordered[i + 1]["started"] if i + 1 < len(ordered) else None)
        windows.append((inv, _moment(inv["started"]), _moment(end) if end else None))
    return [inv for inv, start, end in windows
            if any(start <= _moment(r.finished) and (end is None or _moment(r.finished) <= end) for r in records)]


def runs_in_folder(name: str, folder: str, report: str | None, records: Sequence[PromptResult],
                   invocations: Sequence[dict[str, Any]]) -> list[Run]:
    """A folder's records as one run per preset (`Run` says what the arguments are)."""
    runs = []
    for preset in dict.fromkeys(r.preset for r in records):
        mine = [r for r in records if r.preset == preset]
        done = [r for r in mine if not r.partial]
        if done:
            runs.append(Run(name, folder, report, preset, done, len(mine) - len(done),
                            invocations_of(mine, invocations)))
    return runs


def why_not_current(run: Run, runs: Sequence[Run]) -> str | None:
    """Why a run cannot be the current one for its preset (None: it can): a complete run has no
    record cut short and every suite its preset was run on in any folder."""
    suites = dict.fromkeys(s for other in runs if other.preset == run.preset for s in other.suites)
    missing = [s for s in suites if s not in run.suites]
    if missing:
        return f"incomplete: no {', '.join(missing)}"
    if run.partial:
        return f"incomplete: {_n(run.partial, 'partial record')}"
    return None


def page_order(run: Run) -> tuple[bool, int, str, str]:
    """Where a run stands on the page of record: pairs with their draft model first, then those with
    a lookup draft, each in the order of the presets (pair/presets.py; a pair not listed there after
    those that are, by name), the runs of one pair by folder. So the page is the same whatever the
    order its folders were given in."""
    listed = list(PRESETS)
    base = model_preset(run.preset)
    return LOOKUP_MARK in run.preset, listed.index(base) if base in listed else len(listed), run.preset, run.name


def current_runs(runs: Sequence[Run]) -> dict[str, Run]:
    """Per preset, the latest complete run: the newest last record among the complete runs, the
    one with more policies where two end at the same moment. A preset without a complete run
    gets its run over the most suites, the newest of those (the page says it is incomplete): a
    small run made for another question must not displace a broader one by its date alone."""
    current = {}
    for preset in dict.fromkeys(r.preset for r in runs):
        mine = [r for r in runs if r.preset == preset]
        complete = [r for r in mine if why_not_current(r, runs) is None]
        breadth = (lambda r: 0) if complete else (lambda r: len(r.suites))
        current[preset] = max(complete or mine, key=lambda r: (breadth(r), r.newest, len(r.policies().split(", "))))
    return current


def speedup_table(run: Run) -> list[str]:
    """Each suite's measured speedup per policy over target-only decoding (summed over the suite),
    modeled in parentheses: the figures a summary quotes."""
    figures = preset_figures(run.preset, run.records, run.suites)
    policies = list(dict.fromkeys(p for f in figures for p in f.totals))
    labels = {p: next(t.label for f in figures if (t := f.totals.get(p)) is not None) for p in policies}
    lines = [(f"**{run.preset}**, {run.link}: {run.machine()}; {run.setup()}. Measured speedup over target-only "
              f"decoding, each suite's wall times summed (modeled in parentheses; section 3 of the pair below)."), "",
             "| suite | " + " | ".join(labels[p] for p in policies) + " |", "|---" * (len(policies) + 1) + "|"]
    for f in figures:
        cells = [f"{_x(f.measured_speedup(p))} ({_x(f.modeled_speedup(p))})" if p in f.totals else "not run"
                 for p in policies]
        lines.append(f"| {f.suite} | " + " | ".join(cells) + " |")
    return lines + [""]


LOOKUP_RULES = f"""\
- **The faster draft**, per suite: each draft's best practical policy (every policy but the oracle,
  which needs the answer in advance), by measured speedup over target-only decoding with the
  suite's wall times summed; lookup is the faster draft where its figure is the higher. Measured
  time on every pair: a lookup draft makes no forward pass, so its wall clock is what a user
  gets. On the bundled pairs the model draft is a copy of the target costing 0.5-1.0 of a target
  pass: its measured figure is what that pair gives, not what a cheap draft would (its modeled
  figures are in the pair's own sections). The lookup side is its pair's current run; the model
  draft's is that pair's latest complete run on the same machine (two machines' timings do not
  compare), whose prompts and token budget its own report names.
- **The policy that suits a lookup draft**: among the practical policies run with it, those that
  stay at or above {STOP_FLOOR}x target-only on every suite (a lookup draft must know to stop
  where the answer does not repeat its context); of those, the fastest on the most suites (ties:
  the higher slowest suite). None, if no policy stays at or above {STOP_FLOOR}x everywhere."""


def best_practical(figures: SuiteFigures) -> tuple[str, float] | None:
    """The practical policy (not the oracle) with the highest measured speedup on a suite."""
    speedups = [(policy, speed) for policy in figures.totals
                if policy != "oracle" and (speed := figures.measured_speedup(policy)) is not None]
    return max(speedups, key=lambda item: item[1], default=None)


def _best_cell(figures: SuiteFigures | None, best: tuple[str, float] | None) -> str:
    return "not run" if figures is None or best is None else f"{figures.totals[best[0]].label} {_x(best[1])}"


def suited_policy(figures: Sequence[SuiteFigures]) -> tuple[str | None, str]:
    """The policy that suits a lookup draft by LOOKUP_RULES, and why, in a sentence."""
    policies = [p for p in dict.fromkeys(p for f in figures for p in f.totals) if p != "oracle"]
    floors = {p: min((f.measured_speedup(p) or 0.0) for f in figures) for p in policies}
    steady = [p for p in policies if floors[p] >= STOP_FLOOR]
    if not steady:
        return None, f"no practical policy stays at or above {STOP_FLOOR}x on every suite"
    fastest = [best[0] for f in figures if (best := best_practical(f)) is not None]
    pick = max(steady, key=lambda p: (fastest.count(p), floors[p]))
    label = next(f.totals[pick].label for f in figures if pick in f.totals)
    return pick, (f"**{label}**: at or above {STOP_FLOOR}x on every suite (its slowest {_x(floors[pick])}) and the "
                  f"fastest practical policy on {fastest.count(pick)} of {len(figures)} suites")


def model_draft_run(lookup: Run, runs: Sequence[Run]) -> Run | None:
    """The model draft's run to set a lookup run beside: its pair's latest complete run on the
    lookup run's machine, or None."""
    preset = model_preset(lookup.preset)
    same_machine = [r for r in runs if r.preset == preset and r.machine() == lookup.machine()]
    return current_runs(same_machine)[preset] if same_machine else None


def lookup_section(current: Mapping[str, Run], runs: Sequence[Run] = ()) -> list[str]:
    """The lookup draft's verdicts: per lookup pair and suite, the faster draft, and the policy
    that suits a lookup draft (LOOKUP_RULES). Empty where no lookup pair was studied. `runs`: every
    run the page knows of (by default the current ones), where the model draft's run is found."""
    lookups = [name for name in current if LOOKUP_MARK in name]
    if not lookups:
        return []
    lines = ["## The lookup draft against the model draft", "", LOOKUP_RULES, ""]
    for name in lookups:
        run = current[name]
        model = model_draft_run(run, runs or list(current.values()))
        figures = preset_figures(name, run.records, run.suites)
        model_figures = ({f.suite: f for f in preset_figures(model.preset, model.records, model.suites)}
                         if model else {})
        lines += [(f"**{name}** ({run.link}) against **{model_preset(name)}**'s model draft "
                   f"({model.link if model else 'not studied on this machine'}), measured:"), "",
                  "| suite | model draft: best practical | lookup: best practical | lookup / model | faster draft |",
                  "|---|---|---|---|---|"]
        for f in figures:
            other = model_figures.get(f.suite)
            ours, theirs = best_practical(f), best_practical(other) if other else None
            ratio = ours[1] / theirs[1] if ours and theirs and theirs[1] > 0 else None
            faster = "n/a" if ratio is None else ("lookup" if ratio > 1 else "model draft")
            lines.append(f"| {f.suite} | {_best_cell(other, theirs)} | {_best_cell(f, ours)} | {_f(ratio)} "
                         f"| {faster} |")
        lines += ["", f"The policy that suits this lookup draft: {suited_policy(figures)[1]}.", ""]
    return lines


def page_of_record(runs: Sequence[Run], current: Mapping[str, Run],
                   saved: Mapping[tuple[str, str, str, int], SavedRun], report_command: str) -> str:
    """docs/STUDY.md: per preset, the verdicts of its current run (`current_runs`) with the machine
    and set-up it ran on, its figures, and the earlier runs linked. Made by `report_command`."""
    presets = list(current)
    lines = ["# The study's claims, checked on SpecViz's pairs: the page of record", "",
             (f"Each claim of the Hugging Face / Intel Labs study of dynamic speculation lookahead (docs/DESIGN.md), "
              f"checked on SpecViz's pairs. This page is made from the kept records by `{report_command}`, without "
              f"any model; it is never edited by hand. For each pair it shows the latest complete run among those "
              f"folders: of the runs with no record cut short and every suite the pair was run on, the one whose "
              f"last record is the newest. The other runs are listed under [Earlier runs](#earlier-runs); each "
              f"folder's own `STUDY.md` is its full report, with the commands that made it. The verdicts follow the "
              f"rules below, from the recorded numbers."), "",
             "## Verdicts", ""]
    verdicts: dict[str, Verdicts] = {}
    bodies: list[str] = []
    for preset in presets:
        run = current[preset]
        intro = [(f"Current run: {run.link}, {run.dates()}; machine: {run.machine()}; set-up: {run.setup()}; "
                  f"policies: {run.policies()}."), ""]
        suites = list(dict.fromkeys(r.suite for r in run.records))
        body, verdicts[preset] = preset_sections(preset, run.records, suites, saved, intro)
        bodies += body
    about = [("run", [f"{current[p].link}, {current[p].dates()}" for p in presets]),
             ("machine", [current[p].machine() for p in presets]),
             ("set-up", [current[p].setup() for p in presets]),
             ("prompts", [current[p].prompts() for p in presets]),
             ("policies", [current[p].policies() for p in presets])]
    incomplete = [f"{p} ({why})" for p in presets if (why := why_not_current(current[p], runs))]
    lines += verdict_table(presets, verdicts, about) + [""]
    if incomplete:
        lines += [f"No complete run yet for {', '.join(incomplete)}: its newest run is shown.", ""]
    lines += ["## Speedups", ""]
    for preset in presets:
        lines += speedup_table(current[preset])
    lines += lookup_section(current, runs)
    lines += ["## Earlier runs", ""]
    for preset in presets:
        for run in sorted((r for r in runs if r.preset == preset and r is not current[preset]),
                          key=lambda r: r.newest, reverse=True):
            why = why_not_current(run, runs)
            lines.append(f"- {preset}: {run.link}, {run.dates()} ({why or 'superseded by a newer run'}); "
                         f"{run.machine()}; set-up: {run.setup()}; {run.prompts()}; policies: {run.policies()}")
    lines += ["", "## The rules", "", RULES, ""]
    return "\n".join(lines + bodies) + "\n"
