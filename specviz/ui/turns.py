"""Whose turn it is with the models, and what a waiting visitor is told.

Gradio's queue would hold a second visitor's run without a word the page could put in its
status line (a corner said `queue: 1/1 | 16.7s`, the columns "waiting…"). So the page's runs
start at once and wait here, in order of arrival, for their turn with the models; the API's
compares take their turns here too. While it waits, a run can say where it stands: its place,
and how long until it starts, estimated from the running comparison's own progress.

Stop hands a visitor's tickets back (`cancel`, by the visitor's session): its run sees that at
its next step and ends, saying "Stopped". One whose visitor left holds its ticket until it has not
been seen for `stale_s`, so a stranded run never blocks the queue for long.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..decoding.pipeline import Limits, Request, Update, prompt_ids_for, run_preset
from ..errors import SpecVizError
from ..pair.models import LoadState, ModelPair, load_state, wait_for_pair
from ..pair.presets import PRESETS
from ..pair.setup_job import JOB

POLL_S = 0.5  # how often a waiting run asks for its turn (and a waiting page hears where it stands)
STALE_S = 15.0  # a live run shows a sign of life several times a second
EARLY_FRACTION = 0.05  # below this much progress, a run's own estimate is better than extrapolation


@dataclass
class Ticket:
    number: int
    expected_s: float | None  # this comparison's estimated duration (None: unknown)
    seen: float  # the clock at its last sign of life
    started: float | None = None  # when it got the models
    done: float = 0.0  # the running comparison's progress, 0 to 1
    owner: str | None = None  # the visitor's session, for Stop
    stopped: bool = False  # its visitor pressed Stop: it never takes (or waits for) a turn again


@dataclass(frozen=True)
class Standing:
    """Where a waiting run stands: its place in line (1 = next) and the estimated wait."""

    place: int
    wait_s: float | None  # None when a run ahead has no estimate


def expected_seconds(preset: str, max_new_tokens: int, runs: int) -> float | None:
    """A comparison's duration from the preset's measured cost per token, for `runs` decoding runs
    (the policies and target-only); None for a pair without a measurement."""
    per_token = PRESETS[preset].run_s_per_token if preset in PRESETS else None
    return per_token * max_new_tokens * runs if per_token else None


class Turns:
    """A first-come, first-served turn with the models, shared by every thread of the app."""

    def __init__(self, stale_s: float = STALE_S, clock: Callable[[], float] = time.monotonic):
        self.stale_s = stale_s
        self.clock = clock
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._tickets: list[Ticket] = []  # the holder (if any) first, then the waiting in order

    def join(self, expected_s: float | None, owner: str | None = None) -> Ticket:
        with self._lock:
            ticket = Ticket(next(self._numbers), expected_s, self.clock(), owner=owner)
            self._tickets.append(ticket)
            return ticket

    def try_start(self, ticket: Ticket) -> bool:
        """Take the models if it is this ticket's turn; a sign of life either way."""
        with self._lock:
            self._touch(ticket)
            self._drop_stale()
            if ticket.stopped:
                return False
            if ticket not in self._tickets:
                self._tickets.append(ticket)  # dropped while its visitor was away, and back: the end of the line
            if self._tickets[0] is ticket:
                if ticket.started is None:
                    ticket.started = self.clock()
                return True
            return False

    def alive(self, ticket: Ticket, done: float | None = None) -> bool:
        """A sign of life from the holder, with its progress; False if it lost its turn meanwhile
        (it was stranded for longer than `stale_s`): it must stop then."""
        with self._lock:
            self._touch(ticket)
            if done is not None:
                ticket.done = min(1.0, max(0.0, done))
            return not ticket.stopped and bool(self._tickets) and self._tickets[0] is ticket

    def leave(self, ticket: Ticket) -> None:
        with self._lock:
            if ticket in self._tickets:
                self._tickets.remove(ticket)

    def cancel(self, owner: str) -> bool:
        """Hand back every ticket of this visitor (its Stop): the next run need not wait for the
        stopped one to go stale, and the stopped run neither waits nor runs again. Whether the
        visitor had any."""
        with self._lock:
            mine = [t for t in self._tickets if t.owner == owner]
            for ticket in mine:
                ticket.stopped = True
            self._tickets = [t for t in self._tickets if t.owner != owner]
            return bool(mine)

    def standing(self, ticket: Ticket) -> Standing:
        """Place in line and estimated wait: what is left of the running comparison, plus the
        estimated durations of those waiting ahead."""
        with self._lock:
            self._drop_stale()
            if ticket not in self._tickets:
                return Standing(len(self._tickets) + 1, None)
            ahead = self._tickets[: self._tickets.index(ticket)]
            waits = [self._left_s(t) if t.started is not None else t.expected_s for t in ahead]
            return Standing(len(ahead), None if any(w is None for w in waits) else sum(waits))

    def waiting(self) -> int:
        with self._lock:
            self._drop_stale()
            return sum(t.started is None for t in self._tickets)

    def _left_s(self, holder: Ticket) -> float | None:
        elapsed = self.clock() - (holder.started or self.clock())
        if holder.done >= EARLY_FRACTION:
            return elapsed * (1 - holder.done) / holder.done
        return None if holder.expected_s is None else max(0.0, holder.expected_s - elapsed)

    def _touch(self, ticket: Ticket) -> None:
        ticket.seen = self.clock()

    def _drop_stale(self) -> None:
        now = self.clock()
        self._tickets = [t for t in self._tickets if now - t.seen <= self.stale_s]


def take_turn(turns: Turns, ticket: Ticket, preset: str,
              poll_s: float = POLL_S) -> Iterator[Standing | LoadState | ModelPair]:
    """Wait for the ticket's turn with the models, then get the preset's pair in that turn, so
    that a large pair never evicts the one a running comparison uses. Yields the ticket's Standing
    every `poll_s` while it waits, the LoadState while the pair loads, and the pair last (nothing
    more if the ticket's visitor pressed Stop while it waited). Raises the load's ModelLoadError."""
    while not turns.try_start(ticket):
        if ticket.stopped:  # Stop while it waited: no pair, no turn
            return
        yield turns.standing(ticket)
        time.sleep(poll_s)
    for state in wait_for_pair(preset):
        turns.alive(ticket)
        if ticket.stopped:  # Stop while the pair loads: the load goes on for later runs, this one ends
            return
        yield state


class RunSession:
    """One comparison's way through a shared server, the same for the page's Run and the API's
    compare: a time budget stretched to what it is expected to take, a turn with the models, the
    pair, the pipeline's steps, and leaving (the caller's `finally`)."""

    def __init__(self, turns: Turns, preset: str, request: Request, limits: Limits, owner: str | None = None):
        setting_up = JOB.state(preset) if preset in PRESETS and PRESETS[preset].setup else None
        if setting_up is not None and setting_up.running and load_state(preset).phase != "ready":
            # Loading the hub's copies meanwhile would take the memory the set-up needs, for a slower pair.
            raise SpecVizError(f"The pair {preset} is being set up on this server ({setting_up.line()}). It runs once "
                               "that is done; pick another pair meanwhile.")
        self.turns, self.preset, self.request = turns, preset, request
        expected_s = expected_seconds(preset, request.max_new_tokens, request.runs)
        self.limits = limits.allowing(expected_s)
        self.ticket = turns.join(expected_s, owner=owner)

    def wait(self) -> Iterator[Standing | LoadState | ModelPair]:
        """`take_turn` for this run: its standing while it waits, the pair's loading, the pair."""
        return take_turn(self.turns, self.ticket, self.preset)

    def steps(self, pair: ModelPair) -> Iterator[Update]:
        """The comparison's steps; a prompt too long for the pair is refused here, before any model work."""
        prompt_ids_for(pair, self.request, self.limits)
        return run_preset(self.preset, self.request, self.limits)

    def alive(self, update: Update | None = None) -> bool:
        """Whether the run still has its turn (not stopped, not stranded), telling the queue how far it is."""
        return self.turns.alive(self.ticket, None if update is None else update.fraction_done(self.request))

    def leave(self) -> None:
        self.turns.leave(self.ticket)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def waiting_message(standing: Standing) -> str:
    """The status line of a run waiting for its turn."""
    others = standing.place - 1
    ahead = "another comparison is running" + (
        "" if others <= 0 else f" and {others} more {'is' if others == 1 else 'are'} waiting ahead of yours")
    if standing.wait_s is None:
        when = "it starts as soon as the models are free"
    elif standing.wait_s < 90:
        when = f"it starts in about {max(1, round(standing.wait_s))} s"
    else:
        when = f"it starts in about {round(standing.wait_s / 60)} min"
    return (f"Waiting for the models: {ahead}. Your run is {ordinal(max(1, standing.place))} in the queue; "
            f"{when}.")
