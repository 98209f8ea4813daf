"""HTML for the token view, the metrics block and the summary table.

Pure functions from `trace.py` records to strings: no gradio here, so everything is testable
with plain pytest. Every piece of text that came from a model or a user (tokens, answers, labels)
goes through `_esc` before it touches HTML, in text and in attributes alike, so a token such as
`<script>` is shown as text and never becomes markup.

Token kinds, one CSS class each (see `TOKEN_CSS`):

    accepted    draft token the target kept
    rejected    draft token the target threw away (shown where it was proposed, struck through)
    correction  the target's own token replacing the first rejected draft token
    bonus       the target's extra token when every draft token was accepted
    pending     draft token the target has not checked yet (live runs and replays only)
"""

from __future__ import annotations

import html

from ..decoding.trace import Comparison, Pending, Round, Trace

# ---- CSS and legend ------------------------------------------------------------------------

# Colours are chosen so no two kinds differ by red vs green alone (deuteranopia): blue, orange,
# purple and yellow, and every kind also has its own line style, so the view still reads in
# greyscale. Tokens set both background and text colour, so they look the same in light and
# dark mode; only the round separators and the metrics block inherit the page colours.
# Drafted, not yet verified: grey with a dashed outline and italics, no underline or strike, so
# it reads apart from the four verdicts in colour, in greyscale and for colour-blind eyes. The
# replay's draft-then-verdict reveal (replay.py) starts every draft token in this look too.
PENDING_LOOK = "background: #e4e4e4; color: #2b2b2b; font-style: italic; outline: 2px dashed #5a5a5a; outline-offset: -2px;"

TOKEN_CSS = """
.specviz-tokens {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 17px;
  line-height: 2.1;
  padding: 8px;
}
.specviz-tokens .round {
  border-left: 2px solid rgba(128, 128, 128, 0.55);
  margin-left: 2px;
  padding-left: 2px;
}
.specviz-tokens .round-even { background: rgba(128, 128, 128, 0.07); }
.specviz-tokens .round-odd { background: rgba(128, 128, 128, 0.16); }
.specviz-tokens .round-current {
  outline: 3px solid #0072B2;
  outline-offset: 1px;
}
.tok {
  border-radius: 3px;
  padding: 1px 1px;
  -webkit-box-decoration-break: clone;
  box-decoration-break: clone;
}
.tok-accepted {
  background: #cde9f5;
  color: #0b2a3a;
  text-decoration: underline solid #0072B2 2px;
  text-underline-offset: 3px;
}
.tok-rejected {
  background: #ffd0a6;
  color: #4a2200;
  text-decoration: line-through #b34700 2px;
  border: 1px dashed #b34700;
}
.tok-correction {
  background: #5c1a72;
  color: #ffffff;
  font-weight: bold;
  text-decoration: underline double #f3c4ff;
  text-underline-offset: 3px;
}
.tok-bonus {
  background: #fff2a8;
  color: #3a3000;
  outline: 2px dotted #8a6d00;
  outline-offset: -1px;
}
.tok-pending { """ + PENDING_LOOK + """ }
/* A hybrid draft's round: the tokens copied from the text in italics, the draft model's upright. */
.tok[data-source="copied"] { font-style: italic; }
/* A token that is only whitespace would be an invisible or zero-width cell. The marker comes
   from CSS generated content, which browsers do not copy, so copy/paste keeps the real text. */
.tok-ws::before {
  content: attr(data-ws);
  opacity: 0.75;
}
.specviz-legend {
  display: flex;
  flex-wrap: wrap;
  gap: 2px 16px;
  font-size: 15px;
  line-height: 1.8;
}
.specviz-legend .tok { font-family: ui-monospace, Menlo, Consolas, monospace; }
.specviz-metrics {
  font-size: 15px;
  line-height: 1.6;
  margin-top: 6px;
}
.specviz-metrics .metric-label { opacity: 0.75; }
.specviz-metrics [data-metric] { font-weight: bold; font-variant-numeric: tabular-nums; }
"""

_LEGEND_ITEMS = [
    ("accepted", "accepted", "draft token kept"),
    ("rejected", "rejected", "draft token thrown away"),
    ("correction", "correction", "target's token instead"),
    ("bonus", "bonus", "target's extra token, all kept"),
    ("pending", "pending", "drafted, not yet checked"),
]

LEGEND_HTML = (
    '<div class="specviz-legend">'
    + "".join(
        f'<span><span class="tok tok-{kind}">{name}</span> {explanation}</span>'
        for kind, name, explanation in _LEGEND_ITEMS
    )
    + "</div>"
)


def legend_html() -> str:
    """The legend explaining the token kinds (same classes as the token view)."""
    return LEGEND_HTML


# ---- token view ----------------------------------------------------------------------------


def _esc(text: object) -> str:
    """Escape for HTML text and attribute values (quotes too)."""
    return html.escape(str(text), quote=True)


def _whitespace_marker(text: str) -> str | None:
    """A visible stand-in for a token that would otherwise show nothing, or None."""
    if text == "":
        return "∅"  # decodes to nothing on its own, e.g. part of a multi-byte character
    if text.strip() != "":
        return None
    if "\n" in text:
        return "⏎"
    if "\t" in text:
        return "⇥"
    return "␣"


def _token_span(text: str, kind: str, round_index: int, title: str, source: str | None = None) -> str:
    """One token; `source`: what drafted it, in a round that mixes sources ("copied" or "model", a
    hybrid draft's round), else None."""
    classes = f"tok tok-{kind}"
    marker = _whitespace_marker(text)
    ws_attr = ""
    if marker is not None:
        classes += " tok-ws"
        ws_attr = f' data-ws="{_esc(marker)}"'
    if source is not None:
        ws_attr += f' data-source="{source}"'
    return (
        f'<span class="{classes}" data-round="{round_index}" title="{_esc(title)}"{ws_attr}>'
        f"{_esc(text)}</span>"
    )


def _draft_text(r: Round, i: int) -> str:
    # Traces built without a tokenizer have no display text: show the id rather than nothing.
    return r.draft_texts[i] if i < len(r.draft_texts) else f"[{r.draft_ids[i]}]"


def _draft_title(r: Round, i: int, kind: str) -> str:
    parts = [f"round {r.index}"]
    if r.copied(i):  # a lookup's copy: p is the share of earlier occurrences that continue so
        parts.append(f"copied from token {r.draft_source + i} of the prompt and answer")
        if i < len(r.draft_probs):
            parts.append(f"share p={r.draft_probs[i]:.2f}")
    else:
        if r.draft_copied is not None:  # a hybrid draft's round: the model drafted after the copy
            parts.append("drafted by the draft model")
        if i < len(r.draft_probs):
            parts.append(f"draft p={r.draft_probs[i]:.2f}")
    parts.append(kind)
    return " · ".join(parts)


def _round_html(r: Round, current_round: int | None) -> str:
    spans = []
    for i in range(r.lookahead):
        kind = "accepted" if i < r.accepted else "rejected"
        source = None if r.draft_copied is None else "copied" if r.copied(i) else "model"
        spans.append(_token_span(_draft_text(r, i), kind, r.index, _draft_title(r, i, kind), source))
    if r.target_id is not None:
        kind = r.target_kind or "correction"
        text = r.target_text if r.target_text is not None else f"[{r.target_id}]"
        what = "target's correction" if kind == "correction" else "target's bonus token"
        spans.append(_token_span(text, kind, r.index, f"round {r.index} · {what}"))

    parity = "round-even" if r.index % 2 == 0 else "round-odd"
    classes = f"round {parity}"
    if current_round is not None and r.index == current_round:
        classes += " round-current"
    title = f"round {r.index} · drafted {r.lookahead} · accepted {r.accepted}"
    return (
        f'<span class="{classes}" data-round="{r.index}" title="{_esc(title)}">'
        + "".join(spans)
        + "</span>"
    )


def _pending_html(pending: Pending, index: int) -> str:
    """The round under way: its draft tokens, before the target's verdict."""
    spans = []
    for i, token in enumerate(pending.draft_ids):
        text = pending.draft_texts[i] if i < len(pending.draft_texts) else f"[{token}]"
        prob = f" · draft p={pending.draft_probs[i]:.2f}" if i < len(pending.draft_probs) else ""
        spans.append(_token_span(text, "pending", index, f"round {index}{prob} · pending: the target checks it next"))
    parity = "round-even" if index % 2 == 0 else "round-odd"
    return (f'<span class="round {parity} round-pending" data-round="{index}" '
            f'title="{_esc(f"round {index} · drafted {len(pending.draft_ids)} · awaiting the target")}">'
            + "".join(spans) + "</span>")


def render_trace(trace: Trace, *, current_round: int | None = None) -> str:
    """The answer as coloured token spans, one wrapper per round, then the pending draft if a
    round is under way.

    `current_round` (a `Round.index`) gets the `round-current` class, for step-through replay.
    """
    rounds = "".join(_round_html(r, current_round) for r in trace.rounds)
    if trace.pending is not None:
        rounds += _pending_html(trace.pending, len(trace.rounds))
    return (
        f'<div class="specviz-tokens" data-policy="{_esc(trace.policy)}" '
        f'data-label="{_esc(trace.label)}">{rounds}</div>'
    )


def render_text(text: str) -> str:
    """Plain text (the target-only answer) in the same container as the token view."""
    return f'<div class="specviz-tokens specviz-plain">{_esc(text)}</div>'


# ---- metrics -------------------------------------------------------------------------------


def _metric(label: str, key: str, value: str, unit: str = "") -> str:
    """One labelled number; the `data-metric` element holds only the number, for browser tests."""
    return (
        f'<div class="metric"><span class="metric-label">{_esc(label)}:</span> '
        f'<span data-metric="{key}">{_esc(value)}</span>{_esc(unit)}</div>'
    )


def _lossless_html(trace: Trace) -> str:
    if trace.temperature > 0:
        seed = "no seed" if trace.seed is None else f"seed {trace.seed}"
        text = f"sampled (T={trace.temperature:g}, {seed}): compared by distribution, not token identity"
        return f'<span data-metric="lossless" data-value="sampled">{_esc(text)}</span>'
    if trace.lossless is True:
        return '<span data-metric="lossless" data-value="true">identical to target-only greedy</span>'
    if trace.lossless is False:
        if trace.first_difference is None:
            return '<span data-metric="lossless" data-value="false">differs from target-only greedy</span>'
        return (
            '<span data-metric="lossless" data-value="false">differs from position '
            f'<span data-metric="first_difference">{trace.first_difference}</span></span>'
        )
    # No verdict yet: target-only decoding runs last, or the run was stopped before it.
    return '<span data-metric="lossless" data-value="unknown">checked after the target-only run</span>'


def _speedup_html(speedup: float | None) -> str:
    if speedup is None:  # target-only decoding runs last; until then there is nothing to divide by
        return ('<div class="metric"><span class="metric-label">speedup over target-only:</span> '
                '<span data-metric="speedup" data-value="pending">after the target-only run</span></div>')
    return _metric("speedup over target-only", "speedup", f"{speedup:.2f}", "x")


def metrics_html(trace: Trace, comparison: Comparison) -> str:
    """The numbers under one policy's column.

    Rounded values are the element text; `data-value` on the rate keeps the exact fraction.
    """
    rate = trace.acceptance_rate
    rate_value = (
        f'<div class="metric"><span class="metric-label">acceptance rate:</span> '
        f'<span data-metric="acceptance_rate" data-value="{rate!r}">{rate * 100:.1f}</span>%</div>'
    )
    parts = [
        _metric("new tokens", "new_tokens", str(trace.new_tokens)),
        _metric("target passes", "target_passes", str(trace.target_passes)),
        _metric("draft passes", "draft_passes", str(trace.draft_passes)),
        rate_value,
        _metric("mean accepted length", "mean_accepted_length", f"{trace.mean_accepted_length:.2f}"),
        _metric("wall time", "wall_s", f"{trace.wall_s:.2f}", " s"),
        _metric("tokens per second", "tokens_per_s", f"{trace.tokens_per_s:.1f}"),
        _speedup_html(comparison.speedup(trace)),
        f'<div class="metric"><span class="metric-label">lossless:</span> {_lossless_html(trace)}</div>',
    ]
    return f'<div class="specviz-metrics" data-label="{_esc(trace.label)}">' + "".join(parts) + "</div>"


# ---- summary table -------------------------------------------------------------------------

SUMMARY_HEADERS = [
    "policy",
    "new tokens",
    "target passes",
    "draft passes",
    "acceptance rate",
    "mean accepted length",
    "wall s",
    "speedup",
    "lossless",
]


def _lossless_cell(trace: Trace) -> str:
    if trace.temperature > 0:
        return "sampled"
    if trace.lossless is True:
        return "yes"
    if trace.lossless is False:
        where = "" if trace.first_difference is None else f" (from position {trace.first_difference})"
        return "no" + where
    return "—"


def summary_rows(comparison: Comparison) -> list[list]:
    """One row per run, target-only first, in `SUMMARY_HEADERS` order.

    Counts are ints, lengths and seconds are floats rounded to 2 places, rates and speedups are
    display strings ("82.5%", "1.23x"). These are plain values: a table widget escapes them.
    """
    base = comparison.baseline
    rows: list[list] = [] if base is None else [[
        "target-only",
        len(base.token_ids),
        base.target_passes,
        0,
        "—",  # nothing drafted, so no acceptance rate
        1.0,  # one token per target pass
        round(base.wall_s, 2),
        "1.00x",
        "reference",
    ]]
    for t in comparison.traces:
        speedup = comparison.speedup(t)
        rows.append([
            t.label,
            t.new_tokens,
            t.target_passes,
            t.draft_passes,
            f"{t.acceptance_rate * 100:.1f}%",
            round(t.mean_accepted_length, 2),
            round(t.wall_s, 2),
            "—" if speedup is None else f"{speedup:.2f}x",
            _lossless_cell(t),
        ])
    return rows
