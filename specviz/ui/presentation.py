"""Presentation mode for projectors and talks: larger text and only the prompt, Run, the four
policy columns and the lookahead chart. Switched by a checkbox, or by `?present=1` in the URL.

The mode is a class on the page's body, set in the browser (no server round trip to re-render);
which elements it hides and how large the text gets is in assets/present.css. There each column
is a window that follows its newest tokens while a run streams (FOLLOW_JS).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

PRESENT_CSS = (Path(__file__).resolve().parents[2] / "assets" / "present.css").read_text(encoding="utf-8")

QUERY_PARAMETER = "present"
_ON = {"1", "true", "yes", "on"}

# Run in the browser whenever the checkbox changes (also when the page load sets it).
TOGGLE_JS = "(on) => { document.body.classList.toggle('specviz-present', on === true); return on; }"

# Run once at page load. In presentation mode each column (a scrolling window there) keeps its
# newest tokens in view as updates replace its content, unless the viewer scrolled it away from
# the bottom; scrolling back to the bottom, or a new run's short content, follows again.
FOLLOW_JS = """
() => {
  const atBottom = (el) => el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  const follow = (el) => {
    if (el.dataset.follow !== undefined) return;
    el.dataset.follow = '1';
    // Only the viewer's own scrolling decides (a content swap fires 'scroll' events too).
    const viewerScrolled = () => requestAnimationFrame(() => { el.dataset.follow = atBottom(el) ? '1' : '0'; });
    for (const kind of ['wheel', 'touchmove', 'keyup', 'pointerup']) {
      el.addEventListener(kind, viewerScrolled, {passive: true});
    }
    new MutationObserver(() => {
      if (!document.body.classList.contains('specviz-present')) return;
      if (el.scrollHeight <= el.clientHeight + 24) el.dataset.follow = '1';
      if (el.dataset.follow === '1') el.scrollTop = el.scrollHeight;
    }).observe(el, {childList: true, subtree: true, characterData: true});
  };
  const arm = () => document.querySelectorAll('#columns .specviz-col').forEach(follow);
  arm();
  new MutationObserver(arm).observe(document.body, {childList: true, subtree: true});
}
"""


def presentation_requested(query: Mapping[str, str]) -> bool:
    """True when the page was opened with ?present=1 (or true/yes/on)."""
    return str(query.get(QUERY_PARAMETER, "")).strip().lower() in _ON
