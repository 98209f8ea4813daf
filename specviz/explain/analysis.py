"""Numbers that explain a comparison: the draft's calibration, acceptance by draft position, where
the work went, and how each round's lookahead compares with the oracle's ideal.

Pure functions of the `Comparison` record (no plotly, no models), so the charts, their tests and
the study command share one definition of each number.

A draft token is *judged* when the target verified it. The target keeps a round's leading
`accepted` tokens and rejects the next one; tokens after the first rejection are thrown away
unseen. So in a round, token i is accepted if i < accepted, rejected if i == accepted, and not
judged if i > accepted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..decoding.policies import CostAware, Decision, DraftStep, PassCosts, RoundPlan
from ..decoding.trace import Comparison, Round, Trace
from .costs import StudyPassCosts

# The oracle drafts only tokens it knows the target keeps; its tokens would say nothing about
# whether the draft's confidence predicts acceptance, so calibration leaves it out by default.
CALIBRATION_SKIPS = ("oracle",)


@dataclass(frozen=True)
class Judged:
    """One draft token the target verified: the draft's probability for it and the verdict."""

    prob: float
    accepted: bool


def judged_in_round(r: Round) -> list[Judged]:
    """The round's judged tokens: the accepted ones and the first rejected one."""
    return judged_among(r.draft_probs, r.accepted, r.lookahead)


def judged_among(probs: Sequence[float], accepted: int, lookahead: int) -> list[Judged]:
    """The judged tokens of a round given as its draft probabilities, accepted count and lookahead."""
    judged = min(lookahead, accepted + 1)
    return [Judged(float(probs[i]), i < accepted) for i in range(min(judged, len(probs)))]


def judged_tokens(comparison: Comparison, skip: Iterable[str] = CALIBRATION_SKIPS) -> list[Judged]:
    """Every judged draft token of every trace whose policy is not in `skip`.

    A position judged by several policies counts once per policy: each is a real verification."""
    skipped = set(skip)
    return [j for t in comparison.traces if t.policy not in skipped for r in t.rounds for j in judged_in_round(r)]


# ---- calibration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationBin:
    low: float
    high: float
    count: int
    accepted: int

    @property
    def share(self) -> float | None:
        """Share of the bin's tokens the target accepted; None for an empty bin."""
        return self.accepted / self.count if self.count else None

    @property
    def middle(self) -> float:
        return (self.low + self.high) / 2


def calibration_bins(samples: Sequence[Judged], bins: int = 10) -> list[CalibrationBin]:
    """Equal-width probability bins over [0, 1]; a probability of exactly 1 falls in the last bin."""
    if bins < 1:
        raise ValueError("bins must be at least 1")
    counts = [0] * bins
    accepted = [0] * bins
    for s in samples:
        index = min(bins - 1, max(0, int(s.prob * bins)))
        counts[index] += 1
        accepted[index] += s.accepted
    return [CalibrationBin(i / bins, (i + 1) / bins, counts[i], accepted[i]) for i in range(bins)]


def auc(samples: Sequence[Judged]) -> float | None:
    """Area under the ROC curve of the draft probability as a predictor of acceptance.

    The Mann-Whitney rank statistic: the chance that a random accepted token had a higher draft
    probability than a random rejected one (ties count half). 0.5 means the probability says
    nothing; None when either class is empty."""
    positives = sum(s.accepted for s in samples)
    negatives = len(samples) - positives
    if positives == 0 or negatives == 0:
        return None
    ordered = sorted(samples, key=lambda s: s.prob)
    rank_sum = 0.0
    i = 0
    while i < len(ordered):
        j = i
        while j < len(ordered) and ordered[j].prob == ordered[i].prob:
            j += 1
        average_rank = (i + 1 + j) / 2  # ranks i+1..j share their mean
        rank_sum += average_rank * sum(s.accepted for s in ordered[i:j])
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


@dataclass(frozen=True)
class SplitAt:
    """Judged tokens below a threshold and at or above it."""

    threshold: float
    below: int
    below_accepted: int
    above: int
    above_accepted: int

    @property
    def below_share(self) -> float | None:
        return self.below_accepted / self.below if self.below else None

    @property
    def above_share(self) -> float | None:
        return self.above_accepted / self.above if self.above else None


def split_at(samples: Sequence[Judged], threshold: float) -> SplitAt:
    below = [s for s in samples if s.prob < threshold]
    above = [s for s in samples if s.prob >= threshold]
    return SplitAt(threshold, len(below), sum(s.accepted for s in below), len(above), sum(s.accepted for s in above))


def dynamic_threshold(comparison: Comparison) -> float | None:
    """The fixed confidence threshold of the comparison's first dynamic run, if any."""
    for t in comparison.traces:
        if t.policy == "dynamic" and "assistant_confidence_threshold" in t.params:
            return float(t.params["assistant_confidence_threshold"])
    return None


def calibration_sentence(samples: Sequence[Judged], threshold: float | None) -> str:
    """What the calibration means for this pair, in one or two sentences computed from the data."""
    if not samples:
        return "No draft token was judged by the target in this run, so there is nothing to calibrate."
    score = auc(samples)
    if score is None:
        verdict = "accepted" if samples[0].accepted else "rejected"
        head = f"The target {verdict} all {len(samples)} judged draft tokens, so confidence cannot separate them."
    elif score >= 0.75:
        head = f"AUC {score:.2f}: the draft's confidence predicts the target's verdict well."
    elif score >= 0.6:
        head = f"AUC {score:.2f}: the draft's confidence predicts the target's verdict only roughly."
    else:
        head = f"AUC {score:.2f}: the draft's confidence hardly predicts the target's verdict."
    if threshold is None:
        return head
    split = split_at(samples, threshold)
    if split.below_share is None:
        return f"{head} No judged token had a draft probability below the threshold {threshold:g}."
    below = f"{split.below_share:.0%} of {split.below}"
    if split.below_share >= 0.5:
        meaning = "so stopping there often gives up tokens the target would have kept"
    else:
        meaning = "so stopping there mostly saves draft work that would be thrown away"
    above = (f"; at or above it, {split.above_share:.0%} of {split.above}" if split.above_share is not None else "")
    return (f"{head} Below the threshold {threshold:g} the target still accepted {below} judged tokens"
            f"{above}, {meaning}.")


# ---- acceptance by draft position ----------------------------------------------------------


@dataclass(frozen=True)
class PositionShare:
    position: int  # 1-based place of the token in its round's draft
    rounds: int  # rounds that drafted at least `position` tokens
    accepted: int  # of those, rounds whose token at `position` was accepted

    @property
    def share(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0


def position_shares(trace: Trace) -> list[PositionShare]:
    """vLLM's per-position acceptance: for draft position 1..k, among rounds that drafted at least
    that many tokens, the share whose token there was accepted."""
    longest = max((r.lookahead for r in trace.rounds), default=0)
    return [PositionShare(i + 1, sum(r.lookahead > i for r in trace.rounds),
                          sum(r.lookahead > i and r.accepted > i for r in trace.rounds)) for i in range(longest)]


# ---- where the work went -------------------------------------------------------------------


@dataclass(frozen=True)
class WorkSplit:
    label: str
    policy: str
    target_passes: int
    draft_accepted: int  # draft tokens the target kept
    draft_thrown_away: int  # drafted and discarded: rejected, or after a rejection and never judged
    draft_rejected: int  # of the thrown away: judged and rejected
    draft_s: float
    verify_s: float
    wall_s: float
    draft_catch_up: int = 0  # draft calls that read committed tokens (drafters.ModelDrafter), no token drafted

    @property
    def draft_tokens(self) -> int:
        return self.draft_accepted + self.draft_thrown_away

    @property
    def draft_passes(self) -> int:
        return self.draft_tokens + self.draft_catch_up

    @property
    def other_s(self) -> float:
        """Wall time spent neither drafting nor verifying (bookkeeping, detokenizing)."""
        return max(0.0, self.wall_s - self.draft_s - self.verify_s)

    @property
    def draft_time_share(self) -> float:
        busy = self.draft_s + self.verify_s
        return self.draft_s / busy if busy > 0 else 0.0


def work_split(trace: Trace) -> WorkSplit:
    accepted = sum(r.accepted for r in trace.rounds)
    rejected = sum(r.accepted < r.lookahead for r in trace.rounds)
    return WorkSplit(trace.label, trace.policy, trace.target_passes, accepted, trace.drafted - accepted, rejected,
                     trace.draft_s, trace.verify_s, trace.wall_s, trace.draft_passes - trace.drafted)


def measured_draft_cost_ratio(comparison: Comparison) -> float | None:
    """Seconds per draft call over seconds per verification pass, measured over the whole run, the
    prompt's prefill apart where it was timed (None when the run drafted or verified nothing)."""
    return StudyPassCosts.from_comparison(comparison).draft_ratio


@dataclass(frozen=True)
class MeasuredPasses:
    """What the run's own passes cost: each verification pass (tokens it checked, ms), target-only
    decoding's mean one-token pass and the draft's mean one-token call. The first round of each run
    is left out: it also reads the prompt."""

    windows: list[int]
    verify_ms: list[float]
    one_token_ms: float | None
    draft_call_ms: float | None

    def median_ms(self, window: int) -> float | None:
        times = sorted(ms for w, ms in zip(self.windows, self.verify_ms) if w == window)
        return times[len(times) // 2] if times else None


def measured_passes(comparison: Comparison) -> MeasuredPasses:
    windows, verify_ms, draft_s, draft_calls = [], [], 0.0, 0
    for trace in comparison.traces:
        for r in trace.rounds[1:]:
            windows.append(r.lookahead + 1)  # the drafts, and the token before them the cache lacks
            verify_ms.append(r.verify_s * 1000)
        for r in trace.rounds:
            draft_s += r.draft_s - r.draft_prefill_s
            draft_calls += r.draft_passes - (r.draft_prefill_s > 0)
    baseline = comparison.baseline
    one_token = None
    if baseline is not None and baseline.prefill_s > 0 and len(baseline.token_ids) > 1:
        one_token = (baseline.wall_s - baseline.prefill_s) * 1000 / (len(baseline.token_ids) - 1)
    return MeasuredPasses(windows, verify_ms, one_token, draft_s * 1000 / draft_calls if draft_calls else None)


# ---- lookahead against the oracle ----------------------------------------------------------


@dataclass(frozen=True)
class RoundVerdict:
    """One round against the oracle's ideal lookahead at its start position.

    The ideal is the number of draft tokens the target would accept from there. A round with a
    rejection drafted too much, by exactly `lookahead - accepted` tokens. A fully accepted round
    may have drafted too little, by `ideal - lookahead`: exact too, since the draft's guess at a
    position depends on the text alone (drafters.ModelDrafter), so every round accepts exactly
    min(lookahead, ideal).

    A round's bar stacks `accepted`, then `beyond_ideal` (too long) or, in a sampled run with no
    ideal, `rejected`; `short_of_ideal` is what it left undrafted below the ideal (too short)."""

    ideal: int | None
    accepted: int
    rejected: int  # not kept, in a run with no ideal (sampled)
    beyond_ideal: int
    short_of_ideal: int

    @property
    def kind(self) -> str:
        if self.ideal is None:
            return "no ideal (sampled)"
        if self.beyond_ideal:
            return "too long"
        if self.short_of_ideal:
            return "too short"
        return "on the ideal"


def oracle_ideal_at(r: Round, comparison: Comparison) -> int | None:
    """The ideal lookahead at the round's start, capped by the tokens the run still had room for."""
    ideal = r.oracle_ideal
    if ideal is None and comparison.oracle_ideal is not None and 0 <= r.position < len(comparison.oracle_ideal):
        ideal = comparison.oracle_ideal[r.position]
    if ideal is None:
        return None
    if comparison.max_new_tokens > 0:  # the target's own token needs room after the drafts
        ideal = min(ideal, max(0, comparison.max_new_tokens - r.position - 1))
    return ideal


def round_verdict(r: Round, ideal: int | None, is_oracle: bool = False) -> RoundVerdict:
    """`is_oracle`: the oracle's rounds are the ideal by construction (also in files computed
    before the draft's feeding was exact, whose ideal line can differ a little)."""
    not_kept = r.lookahead - r.accepted
    if ideal is None:
        return RoundVerdict(None, r.accepted, not_kept, 0, 0)
    if not_kept:
        return RoundVerdict(ideal, r.accepted, 0, not_kept, 0)
    return RoundVerdict(ideal, r.accepted, 0, 0, 0 if is_oracle else max(0, ideal - r.lookahead))


def trace_verdicts(trace: Trace, comparison: Comparison) -> list[RoundVerdict]:
    return [round_verdict(r, oracle_ideal_at(r, comparison), trace.policy == "oracle") for r in trace.rounds]


def verdict_counts(trace: Trace, comparison: Comparison) -> dict[str, int]:
    """How many of a trace's rounds were too long, too short or on the ideal."""
    counts: dict[str, int] = {}
    for verdict in trace_verdicts(trace, comparison):
        counts[verdict.kind] = counts.get(verdict.kind, 0) + 1
    return counts


# ---- how the cost-aware rule saw a round ---------------------------------------------------


@dataclass(frozen=True)
class RuleRound:
    """One round of a cost-aware run as the rule weighed it: its plan at the start (the round at
    its best window against plain decoding), then each further token it considered, what it
    expected that token to bring and cost, and the run's rate it had to beat; then what happened."""

    index: int
    plan: RoundPlan
    decisions: list[Decision]  # window 2, 3, ...: the last one is the token it did not draft (or the budget's)
    lookahead: int
    accepted: int
    oracle_ideal: int | None
    draft_call_ms: float
    verify_ms: list[float]  # the priced verification pass over 1, 2, ... tokens, as far as it weighed
    measured_ms: float  # what the round really took: its draft calls and its verification pass
    committed: int  # tokens the round added to the answer

    @property
    def rate_per_s(self) -> float:
        """The run's tokens per second when the round started: the bar every later token had to clear."""
        return self.plan.bar * 1000

    def expected_per_s(self) -> list[float]:
        """Expected tokens per second of this round had it drafted 0, 1, 2, ... tokens, as the rule
        saw it: (1 + the expected accepted tokens) over the draft's calls plus the verification pass."""
        out, tokens = [1000 / self.verify_ms[0]], 1.0 + self.plan.chance
        for drafted in range(1, len(self.decisions) + 2):
            if drafted > 1:
                tokens += self.decisions[drafted - 2].gain
            ms = self.plan.first_call_ms + (drafted - 1) * self.draft_call_ms + self.verify_ms[drafted]
            out.append(tokens / ms * 1000)
        return out


def rule_rounds(trace: Trace | None) -> list[RuleRound]:
    """Replays a cost-aware run's own rounds through a fresh rule with the prices it ran with. Its
    choices depend only on the draft's probabilities, the verdicts and those prices, so this
    recovers exactly what it weighed in every round, with no model (tested against the run)."""
    if trace is None or trace.policy != "costaware" or "prices" not in trace.params:
        return []
    prices = PassCosts.from_dict(trace.params["prices"])
    rule = CostAware(prices, trace.params.get("max_tokens", 20))
    out = []
    for r in trace.rounds:
        rule.start_round(r.position)
        for i, prob in enumerate(r.draft_probs):
            rule.keep_drafting(DraftStep(i, r.draft_ids[i], prob))
        rule.end_round(r.lookahead, r.accepted, r.draft_probs)
        decisions = rule.decisions[-1]
        out.append(RuleRound(r.index, rule.plans[-1], decisions, r.lookahead, r.accepted, r.oracle_ideal,
                             prices.draft_call_ms, [prices.verify_ms(w + 1) for w in range(len(decisions) + 2)],
                             (r.draft_s - r.draft_prefill_s + r.verify_s) * 1000, len(r.committed_ids)))
    return out
