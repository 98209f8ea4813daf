"""The verdict rules: what the study runs (`STUDY_MODES`), the study's published figures
(`STUDY_HEADLINE`), each claim's rule stated in words (`RULES`, `DRAFT_RULES`, printed in every
report) and the small functions that apply them to the figures (`headline_holds`,
`figures.JumpStats.jumps_around`, `dynamic_wins`, `majority`, `suited_policy`). The verdicts are
never written in: each follows from the numbers by these rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from .figures import MEAN_CHANGE_MIN, MODAL_SHARE_MAX, PolicyTotals, SuiteFigures
from .text import _x

STUDY_MODES = "static:5,heuristic:5,dynamic:0.4,oracle"
THRESHOLD = 0.4  # dynamic's confidence threshold, where the calibration is split
HEADLINE_SUITE = "coding"  # the study's headline is an MBPP prompt: our MBPP-style suite
HINDSIGHT_MARGIN = 0.05  # the cost-aware rule "keeps up" with the best threshold in hindsight within this
COST_AWARE_RIVALS = ("dynamic", "heuristic")  # what it has to beat, suite by suite
# The study's published figures (docs/DESIGN.md), quoted beside ours; never used in a verdict.
STUDY_HEADLINE = {"static": (38, 192), "oracle": (27, 129)}  # (target passes, draft passes)
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
DRAFT_MARGIN = 0.03  # a draft is faster than another only by more than this: runs of a day differ by about that
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


def verdict_cell(key: str, holds: bool | None) -> str:
    if holds is None:
        return "not checked"
    if key == "costaware":
        return f"**{'holds' if holds else 'does not hold'}**"
    return verdict(holds)


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


def draft_name(name: str) -> str:
    """The draft a studied pair's name stands for: "lookup", "hybrid-v32k", or "model draft"."""
    return name.partition(PAIR_DRAFT_MARK)[2] or "model draft"


DRAFT_RULES = f"""\
- **The faster draft**, per suite: each draft's best practical policy (every policy but the oracle,
  which needs the answer in advance), by measured speedup over target-only decoding with the
  suite's wall times summed; a draft (lookup, hybrid, or the model draft with a smaller output
  layer, `-v32k`) is the faster one where its figure is more than {DRAFT_MARGIN:.0%} higher, the
  model draft where it is more than {DRAFT_MARGIN:.0%} lower, and *even* in between (two runs of one
  machine on one day differ by about that). Measured time on every pair:
  a lookup draft makes no forward pass and a hybrid makes fewer, so the wall clock is what a
  user gets. On the bundled pairs the model draft is a copy of the target costing 0.5-1.0 of a
  target pass: its measured figure is what that pair gives, not what a cheap draft would (its
  modeled figures are in the pair's own sections). Each draft's side is its pair's current run;
  the model draft's is that pair's latest complete run on the same machine (two machines'
  timings do not compare), whose prompts and token budget its own report names.
- **Which draft**, per pair, machine and suite: of the model draft and every other draft studied
  on that machine, the one whose best practical policy has the highest measured speedup, where it
  is more than {DRAFT_MARGIN:.0%} above every other; else *even* between those within {DRAFT_MARGIN:.0%} of
  it (a draft not run on a suite has no figure there).
- **The policy that suits a lookup draft**: among the practical policies run with it, those that
  stay at or above {STOP_FLOOR}x target-only on every suite (a lookup draft must know to stop
  where the answer does not repeat its context); of those, the fastest on the most suites (ties:
  the higher slowest suite). None, if no policy stays at or above {STOP_FLOOR}x everywhere."""


def best_practical(figures: SuiteFigures) -> tuple[str, float] | None:
    """The practical policy (not the oracle) with the highest measured speedup on a suite."""
    speedups = [(policy, speed) for policy in figures.totals
                if policy != "oracle" and (speed := figures.measured_speedup(policy)) is not None]
    return max(speedups, key=lambda item: item[1], default=None)


def suited_policy(figures: Sequence[SuiteFigures]) -> tuple[str | None, str]:
    """The policy that suits a lookup draft by DRAFT_RULES, and why, in a sentence."""
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
