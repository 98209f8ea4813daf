"""Presentation mode for projectors and talks: larger text and only the prompt, Run, the four
policy columns and the lookahead chart. Switched by a checkbox, or by `?present=1` in the URL.

The mode is a class on the page's body, set in the browser (no server round trip to re-render);
which elements it hides and how large the text gets is in assets/present.css.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

PRESENT_CSS = (Path(__file__).resolve().parents[1] / "assets" / "present.css").read_text(encoding="utf-8")

QUERY_PARAMETER = "present"
_ON = {"1", "true", "yes", "on"}

# Run in the browser whenever the checkbox changes (also when the page load sets it).
TOGGLE_JS = "(on) => { document.body.classList.toggle('specviz-present', on === true); return on; }"


def presentation_requested(query: Mapping[str, str]) -> bool:
    """True when the page was opened with ?present=1 (or true/yes/on)."""
    return str(query.get(QUERY_PARAMETER, "")).strip().lower() in _ON
