"""Lookahead policies: how many tokens the draft model guesses before the target verifies.

Every policy answers three questions the engine asks in each round:

    start_round(position)  -> the most tokens to draft this round
    keep_drafting(step)    -> after drafting a token, draft another one?
    end_round(drafted, accepted, probs) -> learn from the target's verdict

Policies know nothing about models: they see positions, token ids and probabilities only,
which is why they can be unit-tested on scripted inputs and replayed counterfactually.
Parameter names follow transformers' assisted generation where a counterpart exists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SpecVizError
from .feeding import Feeding, full_calls

MAX_LOOKAHEAD = 64  # more draft tokens per round than this is never useful and only burns memory


@dataclass(frozen=True)
class DraftStep:
    """What the draft just produced: the `index`-th token (0-based) of this round."""

    index: int
    token_id: int
    prob: float  # the draft's probability for the token it produced
    entropy: float = 0.0  # entropy (nats) of the draft's next-token distribution at this step
    copied: int = 0  # the round's leading tokens copied from the context (a lookup's), this one's among them if index < copied

    @property
    def next_copied(self) -> bool:
        """Whether the round's next token would be a copy too."""
        return self.index + 1 < self.copied


class Policy:
    """Base class: draft a fixed budget, never stop early, learn nothing."""

    name = "policy"

    def start_round(self, position: int) -> int:
        raise NotImplementedError

    def keep_drafting(self, step: DraftStep) -> bool:
        return True

    def end_round(self, drafted: int, accepted: int, probs: Sequence[float]) -> None:
        pass

    @property
    def threshold(self) -> float | None:
        """The confidence threshold in force, for policies that have one (recorded per round)."""
        return None

    @property
    def params(self) -> dict[str, Any]:
        return {}

    @property
    def label(self) -> str:
        return self.name


def _check_lookahead(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecVizError(f"{what} must be a whole number, got {value!r}.")
    if not 1 <= value <= MAX_LOOKAHEAD:
        raise SpecVizError(f"{what} must be between 1 and {MAX_LOOKAHEAD}, got {value}.")
    return value


def _check_threshold(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise SpecVizError(f"The confidence threshold must be a number between 0 and 1, got {value!r}.")
    return float(value)


class Static(Policy):
    """Draft `num_assistant_tokens` tokens every round (fewer only where the answer budget ends)."""

    name = "static"

    def __init__(self, num_assistant_tokens: int = 5):
        self.num_assistant_tokens = _check_lookahead(num_assistant_tokens, "Static lookahead k")

    def start_round(self, position: int) -> int:
        return self.num_assistant_tokens

    @property
    def params(self) -> dict[str, Any]:
        return {"num_assistant_tokens": self.num_assistant_tokens}

    @property
    def label(self) -> str:
        return f"static k={self.num_assistant_tokens}"


class Heuristic(Policy):
    """transformers' schedule: +2 after a fully accepted round, -1 otherwise, never below 1."""

    name = "heuristic"

    def __init__(self, num_assistant_tokens: int = 5):
        self.start = _check_lookahead(num_assistant_tokens, "Heuristic starting lookahead")
        self.num_assistant_tokens = self.start

    def start_round(self, position: int) -> int:
        return self.num_assistant_tokens

    def end_round(self, drafted: int, accepted: int, probs: Sequence[float]) -> None:
        if accepted == drafted:
            self.num_assistant_tokens += 2
        else:
            self.num_assistant_tokens = max(1, self.num_assistant_tokens - 1)

    @property
    def params(self) -> dict[str, Any]:
        return {"num_assistant_tokens": self.start}

    @property
    def label(self) -> str:
        return f"heuristic k0={self.start}"


class Dynamic(Policy):
    """Stop drafting after the first token whose draft probability is below the threshold.

    That token is still sent for verification, as in transformers' `assistant_confidence_threshold`.
    """

    name = "dynamic"

    def __init__(self, assistant_confidence_threshold: float = 0.4, max_tokens: int = 20):
        self._threshold = _check_threshold(assistant_confidence_threshold)
        self.max_tokens = _check_lookahead(max_tokens, "Dynamic maximum lookahead")

    def start_round(self, position: int) -> int:
        return self.max_tokens

    def keep_drafting(self, step: DraftStep) -> bool:
        return step.prob >= self._threshold

    @property
    def threshold(self) -> float:
        return self._threshold

    @property
    def params(self) -> dict[str, Any]:
        return {"assistant_confidence_threshold": self._threshold, "max_tokens": self.max_tokens}

    @property
    def label(self) -> str:
        return f"dynamic t={self._threshold:g}"


class Adaptive(Dynamic):
    """The dynamic rule with its threshold re-fitted after every round, as transformers intends.

    Every verified draft token is a sample (its draft probability, and whether the target kept
    it). After each round the threshold moves to the point of the ROC curve over all samples so
    far that minimises fpr + 3 * fnr: a wrongly continued draft (false positive) costs one wasted
    draft pass, a wrongly stopped one (false negative) about three, as transformers weighs them.
    The new threshold is in force from the next round on.
    """

    name = "adaptive"

    def __init__(self, assistant_confidence_threshold: float = 0.4, max_tokens: int = 20):
        super().__init__(assistant_confidence_threshold, max_tokens)
        self.start = self._threshold
        self.samples: list[tuple[float, bool]] = []
        self.history: list[float] = [self._threshold]

    def end_round(self, drafted: int, accepted: int, probs: Sequence[float]) -> None:
        # Tokens after the first rejection were never judged by the target: they are no evidence.
        verified = min(drafted, accepted + 1)
        self.samples += [(p, i < accepted) for i, p in enumerate(probs[:verified])]
        fitted = roc_threshold(self.samples)
        if fitted is not None:
            self._threshold = fitted
        self.history.append(self._threshold)

    @property
    def params(self) -> dict[str, Any]:
        return {"assistant_confidence_threshold": self.start, "max_tokens": self.max_tokens}

    @property
    def label(self) -> str:
        return f"adaptive t0={self.start:g}"


def roc_threshold(samples: Sequence[tuple[float, bool]], false_negative_cost: float = 3.0) -> float | None:
    """The probability threshold minimising fpr + cost * fnr over (probability, accepted) samples.

    "Positive" means the rule keeps drafting (probability >= threshold). None until there are more
    than five samples with both outcomes, as in transformers.
    """
    positives = sum(1 for _, ok in samples if ok)
    negatives = len(samples) - positives
    if len(samples) <= 5 or positives == 0 or negatives == 0:
        return None
    best, best_cost = None, float("inf")
    # Candidate thresholds from the highest probability down, as an ROC curve is traced.
    for threshold in sorted({p for p, _ in samples}, reverse=True):
        true_pos = sum(1 for p, ok in samples if ok and p >= threshold)
        false_pos = sum(1 for p, ok in samples if not ok and p >= threshold)
        cost = false_pos / negatives + false_negative_cost * (1 - true_pos / positives)
        if cost < best_cost:
            best, best_cost = threshold, cost
    return best


class Entropy(Policy):
    """Stop drafting once the draft is unsure: when the entropy of its next-token distribution
    (in nats) exceeds a bound. Like SVIP/AdaEDL, it looks at the whole distribution, not only at
    the probability of the chosen token. The token is still sent."""

    name = "entropy"

    def __init__(self, max_entropy: float = 1.0, max_tokens: int = 20):
        if isinstance(max_entropy, bool) or not isinstance(max_entropy, (int, float)) or not max_entropy >= 0:
            raise SpecVizError(f"The entropy bound must be a number of 0 or more (nats), got {max_entropy!r}.")
        self.max_entropy = float(max_entropy)
        self.max_tokens = _check_lookahead(max_tokens, "Entropy maximum lookahead")

    def start_round(self, position: int) -> int:
        return self.max_tokens

    def keep_drafting(self, step: DraftStep) -> bool:
        return step.entropy <= self.max_entropy

    @property
    def params(self) -> dict[str, Any]:
        return {"max_entropy": self.max_entropy, "max_tokens": self.max_tokens}

    @property
    def label(self) -> str:
        return f"entropy h={self.max_entropy:g}"




@dataclass(frozen=True)
class PassCosts:
    """What a round costs on the machine at hand, in milliseconds: a draft call, the target's
    pass over a window of 1, 2, ... new tokens (`target_ms[w - 1]`; past the last, its slope), and,
    for a draft that reads a round's backlog of committed tokens in one call (drafters.ModelDrafter), that
    call over 1, 2, ... tokens (`catch_up_ms`; empty: the draft reads them one call each). A draft
    that copies some tokens from the context and calls a model for the rest (the hybrid) prices a
    copied token at `copy_ms` (None: every token is a draft call, a lookup draft's own step among them)."""

    draft_call_ms: float
    target_ms: tuple[float, ...]
    catch_up_ms: tuple[float, ...] = ()
    copy_ms: float | None = None

    def __post_init__(self) -> None:
        prices = (self.draft_call_ms, *self.target_ms, *self.catch_up_ms, *(() if self.copy_ms is None else (self.copy_ms,)))
        if not self.target_ms or not all(ms > 0 for ms in prices):
            raise SpecVizError("Pass prices must be positive milliseconds, with at least a one-token pass.")

    def step_ms(self, copied: bool) -> float:
        """One more draft token: a copy's price, or a draft call."""
        return self.copy_ms if copied and self.copy_ms is not None else self.draft_call_ms

    def verify_ms(self, window: int) -> float:
        return _along(self.target_ms, window)

    def catch_up(self, tokens: int) -> float:
        """The draft reading `tokens` committed tokens at a round's start (the last of them gives
        the first draft token's logits), in calls of at most len(catch_up_ms) tokens (feeding.py)."""
        if not self.catch_up_ms:
            return tokens * self.draft_call_ms
        whole, rest = full_calls(tokens, len(self.catch_up_ms))
        return whole * self.catch_up_ms[-1] + (self.catch_up_ms[rest - 1] if rest else 0.0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"draft_call_ms": self.draft_call_ms, "target_ms": list(self.target_ms)}
        if self.catch_up_ms:
            out["catch_up_ms"] = list(self.catch_up_ms)
        if self.copy_ms is not None:
            out["copy_ms"] = self.copy_ms
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PassCosts:
        return cls(float(data["draft_call_ms"]), tuple(data["target_ms"]), tuple(data.get("catch_up_ms", ())),
                   data.get("copy_ms"))


def _along(curve: tuple[float, ...], count: int) -> float:
    """curve[count - 1], or past its end its last step's slope (never falling)."""
    if count <= len(curve):
        return curve[max(1, count) - 1]
    slope = curve[-1] - curve[-2] if len(curve) > 1 else 0.0
    return curve[-1] + max(0.0, slope) * (count - len(curve))


@dataclass(frozen=True)
class Decision:
    """One choice of the cost-aware rule within a round: is the `window`-th draft token worth it?"""

    window: int  # the token weighed: 2 is the round's second (the first is the round's plan)
    gain: float  # the extra tokens it is expected to bring
    cost_ms: float  # what it costs: a draft call and one more row in the verification pass
    rate: float  # the run's tokens per ms so far: what gain / cost has to beat

    @property
    def drafts(self) -> bool:
        return self.gain / self.cost_ms > self.rate


@dataclass(frozen=True)
class RoundPlan:
    """The cost-aware rule's test at a round's start: the round at its best window, against plain
    decoding. `window` 0: no window beat plain decoding, so the round drafts nothing."""

    window: int  # the best window, as planned (the round may stop sooner or later, token by token)
    tokens: float  # the tokens the round is expected to commit at that window (the target's own included)
    cost_ms: float  # what it is expected to cost: the draft's calls and the verification pass
    chance: float  # the acceptance each undrafted token was priced at
    first_call_ms: float  # the draft's first call, as priced
    plain_rate: float  # plain decoding's tokens per ms, 1 / V(1): what the round has to beat
    bar: float  # the run's rate at the round's start: what each later token must clear (`CostAware.rate`)

    @property
    def drafts(self) -> bool:
        return self.window > 0

    @property
    def rate(self) -> float:
        return self.tokens / self.cost_ms


STEADY_BACKLOG = 2  # what a drafting round leaves the draft to read: the target's token, and the last accepted one


def cost_aware_label(max_tokens: int = 20) -> str:
    _check_lookahead(max_tokens, "Cost-aware maximum lookahead")
    return "cost-aware" if max_tokens == 20 else f"cost-aware m={max_tokens}"


class CostAware(Policy):
    """Draft a round when the round is worth what it costs on this machine, and within it keep
    drafting while one more token is.

    Why this rule. A round is a renewal cycle: it takes some time and commits some tokens, so the
    long-run rate is E[tokens per round] / E[time per round].

    *Within a round*, adding a step that brings g expected tokens at a cost of c milliseconds raises
    that rate exactly when g / c exceeds the rate itself (for the best rate R*, this stopping rule
    is the optimal one: Dinkelbach's argument for ratios). One more draft token after n drafted
    brings g = P(the n drafted are all accepted) x a, where a is the chance that the next one is
    accepted too, and costs c = one draft call plus what one more row adds to the verification
    pass, V(n + 2) - V(n + 1). So: draft token n + 1 while g / c > R, at most `max_tokens` a round.
    R is the run's throughput so far (its tokens over the time its rounds took, priced with the same
    costs, with plain decoding's 1 / V(1) as a prior worth `prior_weight` tokens), but never below
    1 / V(1): plain decoding is always to be had, so the best rate is at least its.

    *At a round's start* the choice is between two kinds of cycle: a plain round (one token in
    V(1)) and a drafting round. A drafting round stopped at window w brings E[T_w] = 1 + f + f a +
    ... + f a^(w - 1) tokens (f: the chance its first token is accepted, a: each later one's) in
    E[t_w] = its first call + (w - 1) draft calls + V(w + 1). It can stop early, and it will stop
    where the token-by-token test above would, so it is worth its best rate over the windows up to
    that one, max_w E[T_w] / E[t_w]. The round drafts when that beats plain decoding's 1 / V(1)
    (`RoundPlan`). Two things the first token alone (the rule before issue 60) got wrong:
    - It weighed the first token against R. On a CPU the first token is the dearest (it carries
      the verification pass's second row and the draft's catch-up), and after a few long accepted
      rounds R overshoots what the run can keep: at an overshooting bar the shortest cycle, a plain
      round, always wins, and a plain round teaches nothing, so the rule stayed plain for the rest
      of the run (the real pair on an AMX Xeon: after two rounds of 20, 60 plain rounds). The start
      test compares whole rounds' rates with plain decoding's, which needs no estimate of R; R
      only decides how far the round goes.
    - It charged the first token the catch-up over the whole backlog of plain rounds. The backlog
      is a debt: the draft reads every committed token once (drafters.ModelDrafter), so the next round
      that drafts pays it, and every plain round before that only adds a row. Drafting now or a
      round later pays the same debt; only drafting never again saves it, and over a long run a
      one-off cost does not move a rate. So the plan prices the first call as a drafting round
      leaves it, over at most `STEADY_BACKLOG` tokens: the backlog cannot keep the rule plain (the
      run's own time still counts the whole catch-up, when the clock pays it).
    Hence the bound on a plain streak: between plain rounds the test changes only through f, which
    after s plain rounds in a row is the run's acceptance raised by sqrt(ln(1 + s) / n) (n: the
    verdicts behind it, prior included; see below). If f* is the first-token chance at which the
    best round just beats plain decoding (from the prices and the run's acceptance alone), a streak
    ends after s = exp(n (f* - a)^2) - 1 rounds at most; after a round whose tokens were all
    accepted, a is high, so where drafting paid before it pays at once. A draft for which no window
    pays even when its first token is sure (a call costing about a target pass: a copy of the
    target) never drafts. Only the first token is widened: widening every token of a planned window
    would make long windows look sure, and a round whose later tokens the token-by-token test then
    cuts short (it reads the draft's calibrated probabilities, not the widened estimate) pays the
    dear first token for little.

    Prices (`PassCosts`, measured on the pair, fixed for the run): a draft call, the target's pass
    V(w) over w new tokens, and a row-exact draft's catch-up call over 1, 2, ... tokens (a draft
    that reads one call per token pays one call for its first token). A hybrid draft's copied
    token costs lookup's step instead of a call (`copy_ms`): within a copy, one more token costs
    little more than its row of the verification pass, so the rule copies on where a model token
    at the same chance would stop; the model's first call after a copy reads the copied tokens
    with the backlog. The start test does not know whether the round will copy (the drafter
    looks only once the round has a budget), so it prices the round as the model's.

    Acceptance: the draft's probability calibrated on the run's own verdicts, in ten bins of
    probability, accepted / judged with a prior worth `prior_weight` tokens that the draft is
    calibrated (a = p); tokens after a round's first rejection are unjudged. The next token's
    chance is estimated by the last one's (a draft's confidence runs in streaks); a round's plan
    prices its tokens at the run's acceptance so far (prior 1/2). A round that drafts nothing
    learns nothing, so after s plain rounds in a row the plan's first token is priced at that
    estimate raised by sqrt(ln(1 + s) / n) (an upper confidence bound, as in bandit rules), capped
    at 1: an estimate left low by a few early rejections cannot keep the rule plain for good.

    Rules that plan every token of the window from the round's start at the run's rate were tried
    on the kept comparisons and rejected (docs/HISTORY.md, "The cost-aware rule: variants tried and
    rejected"); `python -m specviz costaware-variants` (study/variants.py) replays every variant,
    the rule before issue 60 among them (`first-token`).

    Every decision depends only on probabilities, verdicts and the prices, so the what-if replay
    reproduces the rule exactly, given the same prices. Each round's plan is kept in `plans`, and
    every choice within it in `decisions`, per round.
    """

    name = "costaware"
    BINS = 10

    def __init__(self, prices: PassCosts, max_tokens: int = 20, prior_weight: float = 4.0):
        self.prices = prices
        self.max_tokens = _check_lookahead(max_tokens, "Cost-aware maximum lookahead")
        self.prior_weight = prior_weight
        self.accepted_in_bin = [0] * self.BINS
        self.judged_in_bin = [0] * self.BINS
        self.tokens, self.time_ms = 0.0, 0.0  # the run so far, priced
        self.feeding = Feeding()  # how far the draft has read along the answer (feeding.py)
        self.position = 0
        self.plain_rounds = 0  # rounds in a row that drafted nothing
        self.alive = 1.0  # P(every token drafted so far this round is accepted)
        self.copied = 0  # this round's tokens copied from the context so far (a hybrid draft's)
        self.plans: list[RoundPlan] = []  # per round, its start test (ui's round chart)
        self.decisions: list[list[Decision]] = []  # per round, every choice after its first token

    @property
    def fed(self) -> int:
        """The last answer position the draft has read (drafters.ModelDrafter), -1: none."""
        return self.feeding.fed

    @fed.setter
    def fed(self, position: int) -> None:
        self.feeding.fed = position

    # ---- the numbers the rule weighs ----

    def acceptance(self, prob: float) -> float:
        """The calibrated chance that a token the draft gave `prob` is accepted."""
        b = min(self.BINS - 1, max(0, int(prob * self.BINS)))
        return (self.accepted_in_bin[b] + self.prior_weight * prob) / (self.judged_in_bin[b] + self.prior_weight)

    def run_acceptance(self) -> float:
        """The run's acceptance of judged draft tokens so far (prior 1/2)."""
        return (sum(self.accepted_in_bin) + 0.5 * self.prior_weight) / (sum(self.judged_in_bin) + self.prior_weight)

    def first_acceptance(self) -> float:
        """The chance that a round's first draft token is accepted, before it is drafted: the
        run's acceptance so far, widened after plain rounds (see the class's docstring)."""
        judged = sum(self.judged_in_bin) + self.prior_weight
        return min(1.0, self.run_acceptance() + math.sqrt(math.log1p(self.plain_rounds) / judged))

    def rate(self) -> float:
        """The bar a token within a round must clear, in tokens per millisecond: the run's rate so
        far (with plain decoding's as a prior worth a few tokens), but never below plain decoding's
        own, which is always to be had: a run dragged down by bad rounds must not lower its bar for
        more of them."""
        plain = 1.0 / self.prices.verify_ms(1)
        run = (self.tokens + self.prior_weight) / (self.time_ms + self.prior_weight * self.prices.verify_ms(1))
        return max(run, plain)

    def first_call_ms(self, position: int) -> float:
        """The draft's first call of a round as the plan prices it: over the backlog a drafting
        round leaves, the debt beyond it set aside (see the class's docstring)."""
        if not self.prices.catch_up_ms:
            return self.prices.draft_call_ms
        return self.prices.catch_up(min(self.feeding.backlog(position), STEADY_BACKLOG))

    def plan(self, position: int) -> RoundPlan:
        """The round as the rule would draft it, stopped at its best window, or window 0 where no
        window beats plain decoding. Its first token is priced at `first_acceptance`, the ones
        after it at the run's acceptance, and it reaches as far as the token-by-token test would
        go on those chances (see the class's docstring)."""
        first, later, bar = self.first_acceptance(), self.run_acceptance(), self.rate()
        first_ms, call, verify = self.first_call_ms(position), self.prices.draft_call_ms, self.prices.verify_ms
        best = RoundPlan(0, 1.0, verify(1), first, first_ms, 1.0 / verify(1), bar)  # plain decoding
        tokens, alive = 1.0 + first, first
        for window in range(1, self.max_tokens + 1):
            if window > 1:
                if not Decision(window, alive * later, call + verify(window + 1) - verify(window), bar).drafts:
                    break  # keep_drafting's test would stop before this token
                alive *= later
                tokens += alive
            cost = first_ms + (window - 1) * call + verify(window + 1)
            if tokens / cost > best.rate:
                best = RoundPlan(window, tokens, cost, first, first_ms, best.plain_rate, bar)
        return best

    # ---- the policy interface ----

    def start_round(self, position: int) -> int:
        self.position, self.alive, self.copied = position, 1.0, 0
        self.decisions.append([])
        self.plans.append(self.plan(position))
        return self.max_tokens if self.plans[-1].drafts else 0

    def keep_drafting(self, step: DraftStep) -> bool:
        chance = self.acceptance(step.prob)
        self.alive *= chance
        self.copied += step.index < step.copied
        drafted = step.index + 1
        cost = (self.prices.step_ms(step.next_copied)
                + self.prices.verify_ms(drafted + 2) - self.prices.verify_ms(drafted + 1))
        decision = Decision(drafted + 1, self.alive * chance, cost, self.rate())
        self.decisions[-1].append(decision)
        return decision.drafts

    def end_round(self, drafted: int, accepted: int, probs: Sequence[float]) -> None:
        for i, prob in enumerate(probs[: min(drafted, accepted + 1)]):  # tokens after a rejection: unjudged
            b = min(self.BINS - 1, max(0, int(prob * self.BINS)))
            self.judged_in_bin[b] += 1
            self.accepted_in_bin[b] += i < accepted
        # Copies are priced apart only where the prices say what one costs (a hybrid draft): its
        # model reads the backlog and the copies in its first call, and a round that only copied
        # leaves the model's cache as it was.
        copies = self.copied if self.prices.copy_ms is not None else 0
        modeled = drafted - copies
        self.time_ms += copies * self.prices.step_ms(True)
        if modeled:  # the backlog since the draft last read (its first call gives the first token), then a call per token
            self.time_ms += (self.prices.catch_up(self.feeding.backlog(self.position) + copies)
                             + self.prices.draft_call_ms * (modeled - 1))
            self.feeding.after_round(self.position, drafted, accepted)
        self.time_ms += self.prices.verify_ms(drafted + 1)
        self.tokens += accepted + 1
        self.plain_rounds = 0 if drafted else self.plain_rounds + 1

    @property
    def params(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "prices": self.prices.to_dict()}

    @property
    def label(self) -> str:
        return cost_aware_label(self.max_tokens)


class Oracle(Policy):
    """Drafts exactly as many tokens as the target will accept, known in advance.

    `ideal` is the ideal lookahead at every answer position, computed by `oracle.py` along the
    target's greedy answer. Positions past it (only reachable if a run left that answer) get 1.
    """

    name = "oracle"

    def __init__(self, ideal: Sequence[int] = ()):
        self.ideal = list(ideal)

    def start_round(self, position: int) -> int:
        return self.ideal[position] if position < len(self.ideal) else 1
