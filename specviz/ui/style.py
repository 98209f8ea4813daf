"""The page's look and its load-time script: CSS (tokens, layout, replay, presentation mode), the
theme, and the JavaScript that the page runs once when it opens."""

from __future__ import annotations

import gradio as gr

from .presentation import FOLLOW_JS, PRESENT_CSS
from .render import TOKEN_CSS
from .replay import REPLAY_CSS, REPLAY_REVEAL_JS

APP_CSS = """
#specviz-intro h2 { margin: 0 0 4px 0; font-size: 1.45em; }
#specviz-intro p { margin: 0; font-size: 16px; line-height: 1.45; }
.specviz-status { font-size: 16px; padding: 6px 10px; border-radius: 6px; min-height: 1.6em; }
.specviz-status[data-state="error"] { background: #fde2c4; color: #4a2200; border: 2px solid #b34700; }
.specviz-status[data-state="warning"] { background: #fff2a8; color: #3a3000; }
.specviz-status[data-state="waiting"] { background: rgba(230, 159, 0, 0.18); font-weight: bold; }
.specviz-status[data-state="done"] { background: rgba(0, 114, 178, 0.10); }
.specviz-col-title { font-size: 19px; font-weight: bold; margin-bottom: 2px; }
.specviz-col-detail { font-weight: normal; font-size: 15px; opacity: 0.8; }
.specviz-placeholder { font-size: 17px; padding: 24px 8px; opacity: 0.7; font-style: italic; }
.specviz-column[data-state="running"] .specviz-placeholder { opacity: 1; font-weight: bold; }
#status { min-height: 0; }
#model-status .specviz-status { padding: 0 10px; min-height: 0; }
#model-status, #status, #legend { padding-top: 0; padding-bottom: 0; }
#top, #options-row { gap: 10px; }
/* a narrow slider (the options row at 1280 px) keeps its max label in view: the range input may shrink */
#max-new-tokens .slider_input_container input[type="range"] { min-width: 0; flex: 1 1 auto; }
#max-new-tokens .slider_input_container { gap: 4px; }
.specviz-column { border: 1px solid rgba(128, 128, 128, 0.45); border-radius: 8px; padding: 6px 8px; }
.specviz-column[data-state="running"] { border: 2px solid #0072B2; }
.specviz-column[data-state="replaying"] { border: 2px dashed #0072B2; }
#replay { outline: none; }
#replay:focus-within { box-shadow: 0 0 0 3px rgba(0, 114, 178, 0.45); border-radius: 8px; }
.specviz-replay { font-size: 19px; line-height: 1.6; }
.specviz-replay .replay-head { font-size: 22px; font-weight: bold; margin-bottom: 6px; }
.specviz-replay .replay-line { margin: 6px 0; }
.specviz-replay .replay-context { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre-wrap;
  overflow-wrap: anywhere; background: rgba(128, 128, 128, 0.10); padding: 2px 6px; border-radius: 4px; }
.specviz-replay table.replay-drafts { border-collapse: collapse; font-size: 19px; margin: 4px 0; }
.specviz-replay table.replay-drafts th, .specviz-replay table.replay-drafts td {
  border: 1px solid rgba(128, 128, 128, 0.45); padding: 3px 10px; text-align: left; }
.specviz-replay table.replay-drafts td .tok { font-family: ui-monospace, Menlo, Consolas, monospace;
  white-space: pre; font-size: 20px; }
.specviz-replay .replay-counts { font-size: 20px; }
.specviz-replay-context-title { font-size: 17px; font-weight: bold; margin-top: 10px; }
#replay-help { font-size: 15px; opacity: 0.8; }
.specviz-live { font-size: 15px; margin-top: 6px; padding: 4px 6px; border-radius: 4px;
  background: rgba(0, 114, 178, 0.08); }
#examples { align-items: center; gap: 6px; }
#examples-label { flex: 0 0 auto; min-width: 0; }
"""

# Left/right arrows step the replay while focus is inside the replay panel (click it first); never
# while typing in a text box. The buttons do the work, so keys and clicks behave the same.
REPLAY_KEYS_JS = """
() => {
  const panel = () => document.getElementById('replay');
  const arm = () => { const p = panel(); if (p && !p.hasAttribute('tabindex')) p.setAttribute('tabindex', '0'); };
  arm();
  new MutationObserver(arm).observe(document.body, {childList: true, subtree: true});
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const p = panel();
    const active = document.activeElement;
    if (!p || !active || !p.contains(active)) return;
    const tag = active.tagName;
    if (tag === 'TEXTAREA' || tag === 'SELECT' || active.isContentEditable) return;
    if (tag === 'INPUT') return;  /* the slider's own arrows, the number box, the dropdown */
    const button = document.querySelector(event.key === 'ArrowLeft' ? '#replay-prev' : '#replay-next');
    if (button) { event.preventDefault(); button.click(); }
  });
}
"""

# The page's one load-time script: replay keys and its draft-then-verdict reveal, and columns
# that follow the live edge.
PAGE_JS = (f"() => {{ ({REPLAY_KEYS_JS.strip()})(); ({REPLAY_REVEAL_JS.strip()})(); "
           f"({FOLLOW_JS.strip()})(); }}")

THEME = gr.themes.Default(text_size="lg")

# Gradio 6 takes css and theme in launch(), not in Blocks().
CSS = TOKEN_CSS + APP_CSS + REPLAY_CSS + PRESENT_CSS
