"""Variants of the cost-aware rule, tried by the what-if replay on the study's kept comparisons.

No models run: every variant is replayed (explain.sweep) over the comparisons the studies saved
(results/study/<run>/comparisons of the runs results/index.json lists under "costaware-variants":
the bundled pairs' and the real pair's cost-aware runs of 2026-12-02, 03 and 06), with the prices each
run's cost-aware rule was given and each suite's pooled per-pass costs (explain.costs), so a
variant's figures compare with the reports' section 5.
Prints, per study, pair and suite: the variant's modeled speedup over target-only, dynamic 0.4's
(replayed), the slowest prompt (the 5% guard of issue 29) and on how many prompts the variant's
passes equal the recorded rule's. A few seconds per variant; docs/BENCHMARKS-log.md quotes it.

    python -m specviz costaware-variants                      # every variant
    python -m specviz costaware-variants shipped hindsight    # some of them

The variants besides `shipped` were rejected (docs/HISTORY.md says why); they are kept here so
the figures can be re-made and the next idea tried against the same bar.
"""

from __future__ import annotations

import argparse
import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..decoding.policies import CostAware, Decision, DraftStep, Dynamic, PassCosts, Policy
from ..decoding.trace import Comparison
from ..errors import SpecVizError
from ..explain.costs import StudyPassCosts
from ..explain.sweep import Observations, observations, replay_passes
from .folders import STUDY_RESULTS, indexed
from .records import PromptResult, pooled_costs
from .runner import ResultStore, saved_runs

INDEX_KEY = "costaware-variants"  # the runs replayed, by name in results/index.json
GUARD = 0.95  # issue 29: never more than 5% slower than target-only on a prompt


# ---- the variants ----------------------------------------------------------------------------


class FirstToken(CostAware):
    """The rule before issue 60: a round starts when its first token alone clears the run's rate,
    that token charged the draft's catch-up over the whole backlog plus V(2) - V(1). After long
    accepted rounds the rate overshoots and every plain round makes the next catch-up dearer, so a
    run could stay plain to its end."""

    def start_round(self, position: int) -> int:
        self.position, self.alive = position, 1.0
        self.decisions.append([])
        backlog = self.prices.catch_up(self.feeding.backlog(position)) if self.prices.catch_up_ms else self.prices.draft_call_ms
        cost = backlog + self.prices.verify_ms(2) - self.prices.verify_ms(1)
        first = Decision(1, self.first_acceptance(), cost, self.rate())
        self.decisions[-1].append(first)
        return self.max_tokens if first.drafts else 0


class WindowPlanner(CostAware):
    """Weighs the best stop ahead instead of one token ahead: on a CPU the verification pass's
    second row costs far more than the rows after it, so one more token may not pay where eight
    would. Tokens not drafted yet are priced at `streak`, the run's acceptance of judged draft
    tokens (each judged only when every token before it in its round was accepted), with a prior
    `streak_prior` worth `streak_weight` tokens; drafted ones by the shipped per-bin calibration,
    shrunk toward p (`toward="p"`) or toward the streak acceptance (`toward="streak"`)."""

    def __init__(self, prices: PassCosts, streak_prior: float = 0.5, streak_weight: float = 2.0,
                 toward: str = "p", bin_weight: float = 4.0, explore: float = 1.0):
        super().__init__(prices, 20)
        self.streak_prior, self.streak_weight = streak_prior, streak_weight
        self.toward, self.bin_weight, self.explore = toward, bin_weight, explore
        self.streak_accepted, self.streak_judged = 0, 0

    def streak(self) -> float:
        return ((self.streak_accepted + self.streak_weight * self.streak_prior)
                / (self.streak_judged + self.streak_weight))

    def acceptance(self, prob: float) -> float:
        b = min(self.BINS - 1, max(0, int(prob * self.BINS)))
        mean = prob if self.toward == "p" else self.streak()
        return (self.accepted_in_bin[b] + self.bin_weight * mean) / (self.judged_in_bin[b] + self.bin_weight)

    def best_ahead(self, drafted: int, alive: float, first: float | None = None) -> float:
        """The most that drafting on from `drafted` tokens can add: expected tokens minus the
        run's rate times their price, over every stop up to the cap."""
        rate, call, verify = self.rate(), self.prices.draft_call_ms, self.prices.verify_ms
        best, gain = -math.inf, 0.0
        for stop in range(drafted + 1, self.max_tokens + 1):
            alive *= first if first is not None and stop == drafted + 1 else self.streak()
            gain += alive
            best = max(best, gain - rate * ((stop - drafted) * call + verify(stop + 1) - verify(drafted + 1)))
        return best

    def first_chance(self) -> float:
        bonus = self.explore * math.sqrt(math.log1p(self.plain_rounds) / (self.streak_judged + self.streak_weight))
        return min(1.0, self.streak() + bonus)

    def start_round(self, position: int) -> int:
        self.position, self.alive = position, 1.0
        self.decisions.append([])
        return self.max_tokens if self.best_ahead(0, 1.0, self.first_chance()) > 0 else 0

    def keep_drafting(self, step: DraftStep) -> bool:
        self.alive *= self.acceptance(step.prob)
        return step.index + 1 < self.max_tokens and self.best_ahead(step.index + 1, self.alive) > 0

    def end_round(self, drafted: int, accepted: int, probs: Sequence[float]) -> None:
        judged = min(drafted, accepted + 1)
        self.streak_judged += judged
        self.streak_accepted += min(accepted, judged)
        super().end_round(drafted, accepted, probs)


class GuardBudget(WindowPlanner):
    """The window planner, exploring only while the run's loss against plain decoding (the draft's
    prompt prefill, catch-up calls and every round's time beyond what its tokens would have cost
    plainly) stays within `share` of plain decoding's time for the answer budget: a guard of 5%
    leaves room to find out, and no more."""

    def __init__(self, prices: PassCosts, prefill_ms: float, max_new_tokens: int, share: float = 0.03, **kw):
        super().__init__(prices, **kw)
        self.prefill_ms = prefill_ms
        self.allowance_ms = share * max_new_tokens * prices.verify_ms(1)
        self.loss_ms = 0.0
        self.prefill_paid = False

    def start_round(self, position: int) -> int:
        self.position, self.alive = position, 1.0
        self.decisions.append([])
        pays = self.best_ahead(0, 1.0, self.streak()) > 0
        if pays and self.prefill_paid:
            return self.max_tokens
        catch_up = max(0, self.feeding.backlog(position) - 1) * self.prices.draft_call_ms
        probe = ((0.0 if self.prefill_paid else self.prefill_ms) + catch_up + 2 * self.prices.draft_call_ms
                 + self.prices.verify_ms(3) - self.prices.verify_ms(1))
        still_learning = self.streak_judged < 8
        return self.max_tokens if self.loss_ms + probe <= self.allowance_ms and (pays or still_learning) else 0

    def end_round(self, drafted: int, accepted: int, probs: Sequence[float]) -> None:
        before = self.time_ms
        super().end_round(drafted, accepted, probs)
        spent = self.time_ms - before
        if drafted and not self.prefill_paid:
            spent, self.prefill_paid = spent + self.prefill_ms, True
        self.loss_ms += spent - (accepted + 1) * self.prices.verify_ms(1)


class PrefillAware(WindowPlanner):
    """The window planner that also weighs the draft's prompt prefill before its first drafting
    round: drafting starts only if what a round is worth, over the rounds the answer budget still
    holds, pays for the prefill."""

    def __init__(self, prices: PassCosts, prefill_ms: float, max_new_tokens: int, **kw):
        super().__init__(prices, **kw)
        self.prefill_ms, self.max_new_tokens, self.prefill_paid = prefill_ms, max_new_tokens, False

    def start_round(self, position: int) -> int:
        self.position, self.alive = position, 1.0
        self.decisions.append([])
        worth = self.best_ahead(0, 1.0, self.first_chance())
        if worth > 0 and not self.prefill_paid:
            per_round = 1.0 + sum(self.streak() ** i for i in range(1, self.max_tokens + 1))
            rounds_left = (self.max_new_tokens - position) / per_round
            worth = worth * rounds_left - self.rate() * self.prefill_ms
        self.prefill_paid = self.prefill_paid or worth > 0
        return self.max_tokens if worth > 0 else 0


def static_acceptance(comparison: Comparison) -> float:
    """The prompt's acceptance of judged draft tokens under static k=5: known only in hindsight."""
    rounds = next(t for t in comparison.traces if t.policy == "static").rounds
    judged = sum(min(r.lookahead, r.accepted + 1) for r in rounds)
    return sum(r.accepted for r in rounds) / max(1, judged)


def draft_prefill_ms(comparison: Comparison) -> float:
    """What the draft's prompt prefill cost in this comparison (static k=5's run)."""
    return sum(r.draft_prefill_s for r in next(t for t in comparison.traces if t.policy == "static").rounds) * 1000


Make = Callable[[PassCosts, Comparison], Policy]
VARIANTS: dict[str, tuple[str, Make]] = {
    "shipped": ("the rule as shipped: a round starts when its best window beats plain decoding",
                lambda prices, c: CostAware(prices, 20)),
    "first-token": ("the rule before issue 60: a round starts when its first token clears the run's rate",
                    lambda prices, c: FirstToken(prices, 20)),
    "window": ("weighs the best stop ahead, undrafted tokens at the run's acceptance",
               lambda prices, c: WindowPlanner(prices)),
    "hindsight": ("the same, told each prompt's acceptance in advance (not a rule: a bound)",
                  lambda prices, c: WindowPlanner(prices, static_acceptance(c), 1e6, "streak", 4.0, 0.0)),
    "hindsight+prefill": ("told each prompt's acceptance, and weighing the draft's prompt prefill (a bound)",
                          lambda prices, c: PrefillAware(prices, draft_prefill_ms(c), c.max_new_tokens,
                                                         streak_prior=static_acceptance(c), streak_weight=1e6,
                                                         toward="streak", explore=0.0)),
    "guard-budget": ("the window planner exploring within 3% of plain decoding's time",
                     lambda prices, c: GuardBudget(prices, draft_prefill_ms(c), c.max_new_tokens)),
}


# ---- the replay --------------------------------------------------------------------------------


class PlainCounter(Policy):
    """Passes a policy through, counting its rounds after the first that drafted nothing: the cost
    model prices those verification passes as one-token passes (explain.costs)."""

    def __init__(self, inner: Policy):
        self.inner, self.rounds, self.plain = inner, 0, 0

    def start_round(self, position: int) -> int:
        return self.inner.start_round(position)

    def keep_drafting(self, step: DraftStep) -> bool:
        return self.inner.keep_drafting(step)

    def end_round(self, drafted: int, accepted: int, probs: Sequence[float]) -> None:
        self.plain += self.rounds > 0 and drafted == 0
        self.rounds += 1
        self.inner.end_round(drafted, accepted, probs)


@dataclass
class Prompt:
    record: PromptResult
    comparison: Comparison
    eos_ids: tuple[int, ...]
    prices: PassCosts
    recorded_passes: tuple[int, int]  # the cost-aware rule's own run: target, draft
    seen: Observations


@dataclass
class Suite:
    study: str
    preset: str
    suite: str
    costs: StudyPassCosts
    prompts: list[Prompt]


def load(runs: Path = STUDY_RESULTS) -> list[Suite]:
    """The indexed runs' cost-aware prompts, per run, pair and suite; `runs`: the folder holding them."""
    suites = []
    for study in indexed(INDEX_KEY):
        out = runs / study
        records = [r for r in ResultStore(out / "results.jsonl").records.values() if not r.partial]
        saved = saved_runs(out, records)
        groups: dict[tuple[str, str], list[PromptResult]] = collections.defaultdict(list)
        for r in records:
            groups[(r.preset, r.suite)].append(r)
        for (preset, suite), group in sorted(groups.items()):
            prompts = []
            for r in sorted(group, key=lambda r: r.index):
                run = saved.get(r.key)
                rule = next((t for t in run.comparison.traces if t.policy == "costaware"), None) if run else None
                if rule is None:
                    continue
                p = rule.params["prices"]
                prompts.append(Prompt(r, run.comparison, run.eos_ids, PassCosts.from_dict(p),
                                      (rule.target_passes, rule.draft_passes), observations(run.comparison)))
            if prompts:
                suites.append(Suite(study, preset, suite, pooled_costs(group), prompts))
    return suites


def modeled_s(policy: Policy, prompt: Prompt, costs: StudyPassCosts) -> tuple[float, tuple[int, int]]:
    counted = PlainCounter(policy)
    c = prompt.comparison
    passes = replay_passes(counted, c.reference_ids(), c.draft_along_reference, c.max_new_tokens, prompt.eos_ids,
                           prompt.seen, c.prompt_tokens, c.draft_row_exact)
    return costs.modeled_time(*passes, c.prompt_tokens, counted.plain), passes


def report(suites: Sequence[Suite], name: str) -> None:
    description, make = VARIANTS[name]
    print(f"\n== {name}: {description}")
    width = max((len(s.study) for s in suites), default=5) + 2
    print(f"{'study':<{width}}{'pair':<20}{'suite':<15}{'variant':>8}{'dyn 0.4':>9}  {'slowest prompt':<22}same passes")
    for s in suites:
        target_only = variant = dynamic = 0.0
        slowest, same = (math.inf, ""), 0
        for p in s.prompts:
            baseline = s.costs.target_only_modeled_time(p.record.new_tokens)
            seconds, passes = modeled_s(make(p.prices, p.comparison), p, s.costs)
            target_only, variant = target_only + baseline, variant + seconds
            dynamic += modeled_s(Dynamic(0.4, 20), p, s.costs)[0]
            slowest = min(slowest, (baseline / seconds, p.record.prompt_id))
            same += passes == p.recorded_passes
        marks = ("" if variant < dynamic else " (loses)") + ("" if slowest[0] >= GUARD else " GUARD")
        print(f"{s.study:<{width}}{s.preset:<20}{s.suite:<15}{target_only / variant:>7.3f}x"
              f"{target_only / dynamic:>8.3f}x  {slowest[0]:.3f}x {slowest[1]:<15}{same}/{len(s.prompts)}{marks}")


def cmd_variants(args: argparse.Namespace) -> int:
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown:
        raise SpecVizError(f"unknown variant {unknown[0]!r}: choose from {', '.join(VARIANTS)}")
    suites = load(Path(args.docs) if args.docs else STUDY_RESULTS)
    for name in args.variants or VARIANTS:
        report(suites, name)
    return 0


def register_commands(commands: argparse._SubParsersAction) -> None:
    v = commands.add_parser("costaware-variants", help="replay the cost-aware rule's variants on the studies' "
                                                       "kept comparisons (no models run)")
    v.add_argument("variants", nargs="*", help=f"which of {', '.join(VARIANTS)} to replay (default: all)")
    v.add_argument("--docs", default=None,
                   help="the folder holding the study's run folders (default results/study; the runs replayed are "
                        "those results/index.json lists)")
    v.set_defaults(run=cmd_variants)
