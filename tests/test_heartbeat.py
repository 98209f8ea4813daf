"""with_heartbeat: a slow step still lets the consumer act on a clock, and nothing runs ahead."""

from __future__ import annotations

import threading
import time

import pytest

from specviz.ui.heartbeat import with_heartbeat


def slow_steps(delays: list[float], log: list[str]):
    try:
        for i, delay in enumerate(delays):
            log.append(f"start {i}")
            time.sleep(delay)
            yield i
    finally:
        log.append("closed")


def test_items_arrive_in_order_with_heartbeats_during_a_slow_step():
    log: list[str] = []
    got = list(with_heartbeat(slow_steps([0.0, 0.5, 0.0], log), every_s=0.05))
    items = [x for x in got if x is not None]
    assert items == [0, 1, 2]
    beats_before_1 = got[got.index(0) + 1:got.index(1)]
    assert len(beats_before_1) >= 3 and all(b is None for b in beats_before_1)
    assert log[-1] == "closed"


def test_the_worker_never_steps_ahead_of_the_consumer():
    log: list[str] = []
    items = with_heartbeat(slow_steps([0.0, 0.0, 0.0], log), every_s=0.05)
    assert next(items) == 0
    time.sleep(0.3)  # the consumer is busy rendering item 0: no step may run meanwhile
    assert log == ["start 0"]
    assert next(i for i in items if i is not None) == 1
    assert log == ["start 0", "start 1"]
    items.close()


def test_a_failing_step_raises_in_the_consumer():
    def steps():
        yield 1
        raise ValueError("the model broke")

    items = with_heartbeat(steps(), every_s=0.05)
    assert next(items) == 1
    with pytest.raises(ValueError, match="the model broke"):
        list(items)


def test_closing_stops_the_worker_and_closes_the_steps():
    log: list[str] = []
    before = threading.active_count()
    items = with_heartbeat(slow_steps([0.0, 0.3, 0.0, 0.0], log), every_s=0.05)
    assert next(items) == 0
    assert next(items) is None  # step 1 is under way
    items.close()  # a cancelled run
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert threading.active_count() == before, "the worker thread did not end"
    assert log == ["start 0", "start 1", "closed"], "the worker took another step after the close"


def test_every_step_runs_under_the_lock():
    lock = threading.Lock()

    def steps():
        for i in range(3):
            yield lock.locked()

    assert [x for x in with_heartbeat(steps(), every_s=0.05, lock=lock) if x is not None] == [True] * 3
    assert not lock.locked()


def test_the_steps_see_the_callers_context_variables():
    """As a direct call would: on ZeroGPU, spaces.GPU finds the visitor's request in them."""
    import contextvars

    visitor = contextvars.ContextVar("visitor", default=None)

    def steps():
        yield visitor.get()

    visitor.set("session-1")
    assert [item for item in with_heartbeat(steps(), 0.05) if item is not None] == ["session-1"]
