"""Comparisons and example prompts read from files: the app's import path (no model needed)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..decoding.trace import Comparison
from ..errors import SpecVizError
from ..pair.presets import BUILTIN_DEFAULT_PRESET
from .render import metrics_html, render_trace

EXAMPLES_PATH = Path(__file__).resolve().parents[2] / "assets" / "examples.json"


# ---- example prompts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    name: str
    prompt: str
    comparison_path: Path | None = None  # a comparison computed ahead (scripts/make_examples.py)
    preset: str = BUILTIN_DEFAULT_PRESET  # the pair it was computed on, which Run then recomputes it on
    draft: str = "model"  # the draft it was computed with (decoding/drafts.py), at its defaults: "lookup"


def load_examples(path: Path | str = EXAMPLES_PATH) -> list[Example]:
    """The ready example prompts (assets/examples.json); an empty list if the file is missing."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    folder = Path(path).parent
    return [Example(str(item["name"]), str(item["prompt"]),
                    folder / item["comparison"] if item.get("comparison") else None,
                    str(item.get("preset") or BUILTIN_DEFAULT_PRESET), str(item.get("draft") or "model"))
            for item in data]


def example_comparison(example: Example) -> Comparison | None:
    """The example's precomputed comparison, if it ships one that loads."""
    if example.comparison_path is None or not example.comparison_path.is_file():
        return None
    return load_comparison_file(example.comparison_path)


# ---- import --------------------------------------------------------------------------------

MAX_IMPORT_BYTES = 20 * 1024 * 1024


def load_comparison_file(path: str | os.PathLike | None, max_bytes: int = MAX_IMPORT_BYTES) -> Comparison:
    """A comparison from an uploaded JSON file (the CLI's --json / the app's export).

    Raises SpecVizError with a readable message for anything that is not such a file."""
    if not path:
        raise SpecVizError("No file was uploaded.")
    try:
        size = os.path.getsize(path)
    except OSError:
        raise SpecVizError("The uploaded file could not be read.") from None
    if size > max_bytes:
        raise SpecVizError(f"The file is too large ({size / 1e6:.1f} MB); the limit is {max_bytes / 1e6:.0f} MB.")
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecVizError("The file is not UTF-8 text; export a comparison as JSON and upload that.") from None
    return comparison_from_text(text)


def comparison_from_text(text: str) -> Comparison:
    try:
        data = json.loads(text)
    except ValueError as error:
        line = getattr(error, "lineno", "?")
        raise SpecVizError(f"The file is not valid JSON ({type(error).__name__}: line {line}).") from None
    if not isinstance(data, dict) or "baseline" not in data or "modes" not in data:
        raise SpecVizError("This JSON is not a SpecViz comparison (it needs \"baseline\" and \"modes\"; "
                           "use a file from the Download button or the CLI's --json).")
    try:
        comparison = Comparison.from_dict(data)
        for t in comparison.traces:
            for r in t.rounds:
                if not 0 <= r.accepted <= r.lookahead or len(r.draft_probs) > r.lookahead:
                    raise ValueError("inconsistent round")
                if not isinstance(r.index, int) or not isinstance(r.position, int):
                    raise TypeError("bad round index")
        # Render once so that a malformed value fails here and not in the middle of the view.
        for t in comparison.traces:
            metrics_html(t, comparison)
            render_trace(t)
    except Exception as error:  # noqa: BLE001 - any malformed field: one clear message
        raise SpecVizError(f"This SpecViz comparison file is damaged or from an incompatible version "
                           f"({type(error).__name__}).") from None
    return comparison
