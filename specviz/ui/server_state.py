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

import threading

from .. import settings
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
