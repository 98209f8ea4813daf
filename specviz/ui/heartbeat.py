"""Step a slow iterator in a worker thread, so its consumer still hears from it on a clock.

The app streams a comparison round by round, but a single engine step (an oracle round that drafts
28 tokens, a long stretch of the oracle's search) can take longer than a page should stay still.
`with_heartbeat` advances the steps in a worker thread and yields None whenever `every_s` passes
without a new one, so the page can say that the run is still going.

The worker takes one step only when the consumer asks for the next item, never ahead: the items
(the pipeline's Updates) share mutable objects that the consumer reads while rendering, so the
two must take turns exactly as they would in one thread.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from queue import Empty, Queue
from typing import TypeVar

T = TypeVar("T")

_END = object()
# A consumer that has not asked for the next step for this long has gone (its generator was
# dropped without being closed); the worker then ends too, freeing the model's caches.
ABANDONED_S = 600.0


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def with_heartbeat(steps: Iterator[T], every_s: float,
                   lock: AbstractContextManager | None = None) -> Iterator[T | None]:
    """Yield the items of `steps`, each computed in a worker thread (under `lock`, if given), and
    None whenever `every_s` seconds pass while a step is still running. An exception in a step is
    raised here. Closing this generator (a stopped run) stops the worker after its current step."""
    want, stop = threading.Event(), threading.Event()
    results: Queue = Queue()

    def work() -> None:
        try:
            while want.wait(ABANDONED_S) and not stop.is_set():
                want.clear()
                with lock or nullcontext():
                    item = next(steps, _END)
                results.put(item)
                if item is _END:
                    return
        except Exception as error:  # noqa: BLE001 - re-raised in the consumer's thread
            results.put(_Failed(error))
        finally:
            close = getattr(steps, "close", None)
            if close is not None:
                close()

    # The worker runs in a copy of the caller's context variables, as a direct call would: Gradio's
    # request is there, and on ZeroGPU `spaces.GPU` finds the visitor (and their quota) by it.
    worker = threading.Thread(target=contextvars.copy_context().run, args=(work,), name="specviz-steps", daemon=True)
    worker.start()
    try:
        while True:
            want.set()
            while True:
                try:
                    item = results.get(timeout=every_s)
                    break
                except Empty:
                    yield None
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        want.set()  # wake the worker so it sees `stop` (it finishes a step under way first)
