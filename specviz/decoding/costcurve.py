"""What a forward pass costs on this machine: the target's pass over a window of new tokens after
a KV cache of realistic length, the draft's one-token call and its prompt prefill.

Speculative decoding's arithmetic rests on these numbers (a window of k checked for about one
pass, a draft call at a small fraction of one), and they differ by machine and set-up (pair/setups/).
`python -m specviz pass-costs` prints them; a lookahead rule that prices its rounds can measure
them at load in a few seconds, and keep them up to date from its pair's runs (`LivePassCosts`).
"""

from __future__ import annotations

import functools
import itertools
import statistics
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..pair.cpu import timed_in_turns
from .drafters import CachedModel
from .feeding import CATCH_UP_ROWS, Feeding
from .policies import PassCosts
from .trace import Baseline, Trace

if TYPE_CHECKING:
    from ..pair.models import ModelPair

WINDOWS = (1, 2, 4, 8, 12, 16, 20)
DRAFT_WINDOWS = (1, 2, 4, 8, 16, 32)  # a row-exact draft's catch-up calls: up to CATCH_UP_ROWS


@dataclass(frozen=True)
class PassCostCurve:
    """Median milliseconds per call, measured in one sitting."""

    cpu: str
    setup: str  # what ran (ModelPair.setup)
    context: int  # tokens in the KV cache before each timed call
    windows: tuple[int, ...]
    target_ms: tuple[float, ...]  # the target's pass over each window of new tokens (logits for every row)
    draft_call_ms: float  # the draft's one-token call
    draft_prefill_ms: float  # the draft reading `context` tokens in one call
    draft_windows: tuple[int, ...] = ()
    draft_ms: tuple[float, ...] = ()  # the draft's call over each of draft_windows (logits for the last row)

    def target_pass_ms(self, window: int) -> float:
        """The target's pass over `window` new tokens, interpolated between measured windows."""
        return _interpolate(self.windows, self.target_ms, window)

    def draft_pass_ms(self, window: int) -> float:
        """The draft's call over `window` tokens, interpolated between measured windows."""
        return _interpolate(self.draft_windows or (1,), self.draft_ms or (self.draft_call_ms,), window)

    def ratio(self, window: int) -> float:
        """The pass over `window` tokens in one-token passes."""
        return self.target_pass_ms(window) / self.target_ms[0]

    @property
    def draft_ratio(self) -> float:
        return self.draft_call_ms / self.target_ms[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _interpolate(windows: tuple[int, ...], ms: tuple[float, ...], window: int) -> float:
    points = list(zip(windows, ms))
    if window <= points[0][0] or len(points) == 1:
        return points[0][1]
    for (w0, t0), (w1, t1) in itertools.pairwise(points):
        if window <= w1:
            return t0 + (t1 - t0) * (window - w0) / (w1 - w0)
    (w0, t0), (w1, t1) = points[-2], points[-1]
    return t1 + (t1 - t0) / (w1 - w0) * (window - w1)


def measure(pair: ModelPair, context: int = 200, windows: tuple[int, ...] = WINDOWS, repeats: int = 5,
            cpu_name: str = "", draft_windows: tuple[int, ...] = DRAFT_WINDOWS) -> PassCostCurve:
    """Time each call `repeats` times (median, in turns: `cpu.timed_in_turns`) on random token ids (a
    pass's cost does not depend on which tokens it reads). Every call leaves both caches holding
    the `context` tokens."""
    generator = torch.Generator().manual_seed(0)
    longest = max(*windows, *draft_windows)
    ids = torch.randint(0, pair.vocab_size, (context + longest,), generator=generator).tolist()
    prompt, after = ids[:context], ids[context:]

    with torch.inference_mode():
        target = CachedModel(pair.target, pair.vocab_size, pair.device)
        target.forward(prompt)
        draft = CachedModel(pair.draft, pair.vocab_size, pair.device)
        draft.forward(prompt)

        def target_pass(window: int) -> None:
            target.forward(after[:window], keep=window)
            target.crop(context)

        def draft_prefill() -> None:
            draft.crop(0)
            draft.forward(prompt)

        def draft_pass(window: int) -> None:  # window 1: the draft's one-token call
            draft.forward(after[:window])
            draft.crop(context)

        calls: dict[str, Callable[[], object]] = {f"target {w}": functools.partial(target_pass, w) for w in windows}
        calls["draft prefill"] = draft_prefill
        for window in sorted({1, *draft_windows}):
            calls[f"draft {window}"] = functools.partial(draft_pass, window)
        ms = timed_in_turns(calls, repeats)
    return PassCostCurve(cpu=cpu_name, setup=pair.setup, context=context, windows=tuple(windows),
                         target_ms=tuple(ms[f"target {w}"] for w in windows), draft_call_ms=ms["draft 1"],
                         draft_prefill_ms=ms["draft prefill"], draft_windows=tuple(draft_windows),
                         draft_ms=tuple(ms[f"draft {w}"] for w in draft_windows))


def table(curve: PassCostCurve) -> list[str]:
    """The curve as printed lines: each call in ms and in one-token target passes."""
    lines = [f"CPU: {curve.cpu}", f"set-up: {curve.setup}", f"KV cache before each call: {curve.context} tokens",
             "", f"{'call':<34}{'ms':>9}{'passes':>9}"]
    for window, ms in zip(curve.windows, curve.target_ms):
        lines.append(f"{'target, ' + str(window) + ' new token' + ('s' if window > 1 else ''):<34}"
                     f"{ms:>9.1f}{ms / curve.target_ms[0]:>9.2f}")
    lines.append(f"{'draft, one-token call':<34}{curve.draft_call_ms:>9.1f}{curve.draft_ratio:>9.2f}")
    for window, ms in zip(curve.draft_windows, curve.draft_ms):
        if window > 1:
            lines.append(f"{'draft, ' + str(window) + ' tokens in one call':<34}{ms:>9.1f}{ms / curve.target_ms[0]:>9.2f}")
    lines.append(f"{'draft, prefill of the context':<34}{curve.draft_prefill_ms:>9.1f}"
                 f"{curve.draft_prefill_ms / curve.target_ms[0]:>9.2f}")
    return lines


RECENT = 400  # timed calls each scale is the median of: the pair's last few runs
TIMED_ENOUGH = 8  # timed passes over one window before that window is priced by its own


def _recent() -> deque[float]:
    return deque(maxlen=RECENT)


@dataclass
class LivePassCosts:
    """A pair's prices for the cost-aware rule: the cost curve measured at load, each part scaled
    by what the pair's own runs have timed since (the median of timed / measured over its recent
    calls): the draft's call, the target's one-token pass, and its pass over a window. A curve
    measured in a few seconds at load can be off by a noisy moment, and a shared machine gets
    busier or quieter; the runs see every pass. A window the runs have checked often enough
    (`TIMED_ENOUGH` passes) is priced at its own timed median: one noisy window in the load-time
    curve (seen: a pass over 2 tokens timed at 1.8 one-token passes, where the runs then paid 1.1)
    would otherwise price every round's second token for the pair's whole session. Windows the
    runs have not checked keep the load-time curve's shape, scaled by the median over all windows;
    and no window is priced above a wider one (`_never_falling`).

    A run takes the prices as they stand when it starts and keeps them for its whole run
    (recorded in its trace), so that its decisions, and the replay of them, depend on its own
    probabilities and verdicts and those fixed prices only."""

    measured: PassCosts
    draft_call: deque[float] = field(default_factory=_recent)  # timed / measured, per call
    one_token: deque[float] = field(default_factory=_recent)  # per one-token target pass
    window: deque[float] = field(default_factory=_recent)  # per target pass over 2 or more tokens
    by_window: dict[int, deque[float]] = field(default_factory=dict)  # the same, kept per window

    def record(self, run: Trace | Baseline) -> None:
        """Learn from a finished run's timings. A run's first round is left out: its passes
        include the prompt's prefill."""
        if isinstance(run, Baseline):
            passes = len(run.token_ids) - 1
            if passes > 0 and run.wall_s > run.prefill_s:
                self.one_token.append((run.wall_s - run.prefill_s) * 1000 / passes / self.measured.verify_ms(1))
            return
        feeding = Feeding()  # how far the draft has read, as in CostAware.end_round
        for i, r in enumerate(run.rounds):
            if i > 0:
                checked = r.lookahead + 1
                ratio = r.verify_s * 1000 / self.measured.verify_ms(checked)
                if checked == 1:
                    self.one_token.append(ratio)
                else:
                    self.window.append(ratio)
                    self.by_window.setdefault(checked, _recent()).append(ratio)
            if r.lookahead and r.draft_passes:  # a lookup draft's rounds (and a hybrid's copies) make no draft call
                # What the round's draft calls cost at the measured prices: its catch-up (one call
                # or one per token, drafters.ModelDrafter) over the backlog and a hybrid's copies,
                # and a call per further draft token.
                copies = r.draft_copied or 0
                expected = (self.measured.catch_up(feeding.backlog(r.position) + copies)
                            + self.measured.draft_call_ms * (r.lookahead - copies - 1))
                if i > 0 and r.draft_s > r.draft_prefill_s:
                    self.draft_call.append((r.draft_s - r.draft_prefill_s) * 1000 / expected)
                feeding.after_round(r.position, r.lookahead, r.accepted)

    def current(self) -> PassCosts:
        def scale(timed: deque[float]) -> float:
            return statistics.median(timed) if timed else 1.0

        def window_scale(window: int) -> float:
            timed = self.by_window.get(window, ())
            return statistics.median(timed) if len(timed) >= TIMED_ENOUGH else scale(self.window)

        one = self.measured.target_ms[0] * scale(self.one_token)
        windows = [max(one, ms * window_scale(w)) for w, ms in enumerate(self.measured.target_ms[1:], start=2)]
        draft = scale(self.draft_call)
        return PassCosts(self.measured.draft_call_ms * draft, _never_falling([one, *windows]),
                          tuple(ms * draft for ms in self.measured.catch_up_ms))


# Each loaded pair's live pass costs, kept beside the pair and gone with it: loading a pair is the
# pair stage's job, measuring what its passes cost is decoding's.
_LIVE: weakref.WeakKeyDictionary[ModelPair, LivePassCosts] = weakref.WeakKeyDictionary()


def live_pass_costs(pair: ModelPair) -> LivePassCosts | None:
    """The pair's live pass costs; None until a cost-aware run first needs them."""
    return _LIVE.get(pair)


def forget_pass_costs(pair: ModelPair) -> None:
    """Measure the pair's pass costs afresh when next needed."""
    _LIVE.pop(pair, None)


def _never_falling(ms: list[float]) -> tuple[float, ...]:
    """Each price lowered to the least of those after it. A pass over more tokens does all that one over
    fewer does, and more: where a measured curve falls, the price before the fall is a busy moment's."""
    for i in range(len(ms) - 2, -1, -1):
        ms[i] = min(ms[i], ms[i + 1])
    return tuple(ms)


def pass_costs(pair: ModelPair, repeats: int = 3) -> PassCosts:
    """The pair's prices for the cost-aware rule as they stand: its cost curve, measured once per
    loaded pair (a few seconds) and read at every window from 1 to the largest measured, scaled by
    what its runs have timed since (`LivePassCosts`; the pipeline records every run on the pair)."""
    live = _LIVE.get(pair)
    if live is None:
        draft_windows = DRAFT_WINDOWS if pair.draft_row_exact else ()
        curve = measure(pair, context=128, repeats=repeats, draft_windows=draft_windows)
        catch_up = _never_falling([curve.draft_pass_ms(w) for w in range(1, CATCH_UP_ROWS + 1)]) if draft_windows else ()
        target = _never_falling([curve.target_pass_ms(w) for w in range(1, max(curve.windows) + 1)])
        live = _LIVE[pair] = LivePassCosts(PassCosts(curve.draft_call_ms, target, catch_up))
    return live.current()
