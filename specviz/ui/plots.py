"""Plotly figures for a `Comparison`: lookahead per round, and tokens produced per target pass.

Each policy keeps one colour everywhere (`POLICY_COLORS`, from the Okabe-Ito palette, which stays
distinguishable with the common forms of colour blindness). Every plotted series carries
`meta = {"label", "policy", "series"}` so tests and callers can find it without relying on order.
"""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go

from ..colors import policy_color
from ..decoding.trace import Comparison, Round, Trace
from ..explain.analysis import RoundVerdict, trace_verdicts, verdict_counts
from ..explain.sweep import ReplayedPasses, Sweep, modeled_speedup

ORACLE_LINE_COLOR = "#555555"
BASELINE_LINE_COLOR = "#777777"

# Two runs of the same policy (e.g. "static k=3" and "static k=5") share a colour, so they are
# told apart by marker shape instead.
_SYMBOLS = ["circle", "square", "diamond", "triangle-up", "pentagon", "star"]

FONT_SIZE = 15


def _styles(comparison: Comparison) -> list[tuple[str, str]]:
    """(colour, marker symbol) for each trace, in order."""
    seen: dict[str, int] = {}
    styles = []
    for i, t in enumerate(comparison.traces):
        repeat = seen.get(t.policy, 0)
        seen[t.policy] = repeat + 1
        styles.append((policy_color(t.policy, i), _SYMBOLS[repeat % len(_SYMBOLS)]))
    return styles


def _base_layout(fig: go.Figure, title: str, x_title: str, y_title: str) -> None:
    fig.update_layout(
        title=title,
        template="plotly_white",
        font={"size": FONT_SIZE},
        xaxis_title=x_title,
        yaxis_title=y_title,
        # Horizontal legend above the plot; clicking an entry hides that policy's whole group.
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0,
                "groupclick": "togglegroup"},
        hovermode="closest",
        margin={"t": 110},
    )


# ---- lookahead against the oracle, one panel per policy ------------------------------------

# Segment colours shared by every panel. The accepted part is the policy's own colour; the rest
# must stay distinguishable from all policy colours, so it also carries a fill pattern.
BEYOND_IDEAL_COLOR = "#B2182B"  # dark red: drafted past the ideal, thrown away (too long)
SHORT_OF_IDEAL_COLOR = "rgba(120, 120, 120, 0.25)"  # grey: left undrafted below the ideal (too short)
REJECTED_OPACITY = 0.35

_SEGMENTS = [  # (series, legend name)
    ("accepted", "accepted (policy colour)"),
    ("rejected", "rejected (sampled run)"),
    ("beyond_ideal", "drafted beyond the ideal (too long)"),
    ("short_of_ideal", "short of the ideal (too short)"),
]


def _token_label(text: str, limit: int = 16) -> str:
    """A draft token for hover text: whitespace made visible, cut short, HTML-escaped (plotly
    renders hover text as a small HTML subset, and the text is the model's)."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥")
    if shown == "":
        shown = "∅"
    elif shown.strip() == "":
        shown = "␣" * len(shown)
    if len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return html.escape(shown)


def _draft_tokens_hover(r: Round, most: int = 12) -> str:
    parts = []
    for i in range(min(r.lookahead, most)):
        text = r.draft_texts[i] if i < len(r.draft_texts) else f"[{r.draft_ids[i]}]"
        fate = "✓" if i < r.accepted else ("✗" if i == r.accepted else "·")
        prob = f" {r.draft_probs[i]:.2f}" if i < len(r.draft_probs) else ""
        parts.append(f"{fate} '{_token_label(text)}'{prob}")
    lines = ["   ".join(parts[i:i + 4]) for i in range(0, len(parts), 4)]
    if r.lookahead > most:
        lines.append(f"… {r.lookahead - most} more")
    return "<br>".join(lines) or "no draft tokens"


def _round_hover(t: Trace, r: Round, verdict: RoundVerdict) -> str:
    ideal = "n/a" if verdict.ideal is None else verdict.ideal
    detail = {"too long": f": {verdict.beyond_ideal} drafted from the first rejected token on, thrown away",
              "too short": f": about {verdict.short_of_ideal} more would have been accepted"}.get(verdict.kind, "")
    return "<br>".join([
        f"<b>{html.escape(t.label)}</b>, round {r.index}, position {r.position}",
        f"drafted {r.lookahead}, accepted {r.accepted}, oracle ideal {ideal}",
        f"verdict: <b>{verdict.kind}</b>{detail}",
        "draft tokens (✓ kept, ✗ rejected, · not judged; draft p):",
        _draft_tokens_hover(r),
    ])


def _uid(text: str) -> str:
    """A trace uid safe as a CSS class: plotly builds selectors from it, and kaleido's PNG export
    fails on a uid with spaces, '=' or '.' (as in "static k=5")."""
    return re.sub(r"[^A-Za-z0-9_-]", lambda m: f"_{ord(m.group()):x}_", text)


def _oracle_line(ideal: list[int], first: bool) -> go.Scatter:
    # The ideal at position p holds over [p, p+1); a round's bar sits over the same interval.
    return go.Scatter(
        x=list(range(len(ideal) + 1)),
        y=list(ideal) + list(ideal[-1:]),
        name="oracle ideal",
        legendgroup="oracle ideal",
        showlegend=first,
        mode="lines",
        line={"shape": "hv", "color": ORACLE_LINE_COLOR, "width": 2},
        hovertemplate="position %{x}<br>oracle ideal %{y}<extra></extra>",
        meta={"label": "oracle ideal", "policy": None, "series": "oracle_ideal"},
    )


def _segment_bars(t: Trace, comparison: Comparison, color: str, first: bool) -> list[go.Bar]:
    verdicts = trace_verdicts(t, comparison)
    hover = [_round_hover(t, r, v) for r, v in zip(t.rounds, verdicts)]
    values = {
        "accepted": [v.accepted for v in verdicts],
        "rejected": [v.rejected for v in verdicts],
        "beyond_ideal": [v.beyond_ideal for v in verdicts],
        "short_of_ideal": [v.short_of_ideal for v in verdicts],
    }
    looks = {
        "accepted": {"color": color},
        "rejected": {"color": color, "opacity": REJECTED_OPACITY},
        "beyond_ideal": {"color": BEYOND_IDEAL_COLOR, "pattern": {"shape": "/", "fgcolor": "white", "size": 6}},
        "short_of_ideal": {"color": SHORT_OF_IDEAL_COLOR,
                           "line": {"color": ORACLE_LINE_COLOR, "width": 1},
                           "pattern": {"shape": ".", "fgcolor": ORACLE_LINE_COLOR, "size": 5}},
    }
    bars = []
    for series, name in _SEGMENTS:
        if series == "short_of_ideal" or not any(values[series]):
            continue
        bars.append(_bar(t, series, name, values[series], looks[series], hover, first))
    # The undrafted part sits on top of what was drafted, up to the ideal.
    if any(values["short_of_ideal"]):
        bars.append(_bar(t, "short_of_ideal", dict(_SEGMENTS)["short_of_ideal"], values["short_of_ideal"],
                         looks["short_of_ideal"], hover, first))
    return bars


def _bar(t: Trace, series: str, name: str, values: list[int], marker: dict, hover: list[str],
         legend: bool) -> go.Bar:
    return go.Bar(
        x=[r.position + 0.5 for r in t.rounds],
        y=values,
        width=0.9,
        name=name,
        legendgroup=series,
        showlegend=legend,
        marker=marker,
        hovertext=hover,
        hoverinfo="text",
        uid=_uid(f"{t.label}:{series}"),
        meta={"label": t.label, "policy": t.policy, "series": series},
    )


def _largest_lookahead(comparison: Comparison) -> int:
    drafted = [r.lookahead for t in comparison.traces for r in t.rounds]
    return max(drafted + list(comparison.oracle_ideal or []) + [1])


def _panel_title(t: Trace, comparison: Comparison) -> str:
    counts = verdict_counts(t, comparison)
    if comparison.oracle_ideal is None:
        return f"<b>{html.escape(t.label)}</b>: {t.target_passes} rounds"
    return (f"<b>{html.escape(t.label)}</b>: {t.target_passes} rounds, {counts.get('too long', 0)} too long, "
            f"{counts.get('too short', 0)} too short, {counts.get('on the ideal', 0)} on the ideal")


PANEL_HEIGHT = 170


def lookahead_figure(comparison: Comparison) -> go.Figure:
    """One panel per policy, sharing the answer-position axis: each round's bar at its start
    position (accepted part filled, the part drafted beyond the oracle's ideal in dark red, the
    part left undrafted below it in dotted grey) under the oracle's ideal as a step line."""
    from plotly.subplots import make_subplots

    traces = comparison.traces or []
    rows = max(1, len(traces))
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=min(0.12, 0.35 / rows),
                        subplot_titles=[_panel_title(t, comparison) for t in traces] or [""])
    for row, (t, (color, _symbol)) in enumerate(zip(traces, _styles(comparison)), start=1):
        for bar in _segment_bars(t, comparison, color, row == 1):
            fig.add_trace(bar, row=row, col=1)
        if comparison.oracle_ideal:
            fig.add_trace(_oracle_line(comparison.oracle_ideal, row == 1), row=row, col=1)
    top = _largest_lookahead(comparison)
    fig.update_layout(
        title="Lookahead per round against the oracle's ideal",
        template="plotly_white",
        font={"size": FONT_SIZE},
        barmode="stack",
        bargap=0,
        hovermode="closest",
        height=200 + PANEL_HEIGHT * rows,
        # The legend between the title and the first panel's title, in pixels whatever the height.
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0 + 36 / (PANEL_HEIGHT * rows),
                "xanchor": "left", "x": 0},
        margin={"t": 140, "b": 60},
    )
    for annotation in fig.layout.annotations:  # subplot titles: left-aligned, smaller than the title
        annotation.update(x=0, xanchor="left", font={"size": FONT_SIZE - 1})
    fig.update_yaxes(range=[0, top + 0.5], dtick=1 if top <= 6 else None, title_text="tokens")
    fig.update_xaxes(title_text="token position in the answer", row=rows, col=1)
    fig.update_xaxes(rangemode="tozero")
    return fig


# ---- tokens per target pass ----------------------------------------------------------------


def cumulative_tokens(trace: Trace) -> list[int]:
    """Committed answer tokens after 0, 1, 2, ... target passes.

    Capped at `trace.new_tokens`: the last round can commit past a stop (EOS, token limit) and
    those tokens are not part of the answer.
    """
    totals = [0]
    for r in trace.rounds:
        totals.append(min(totals[-1] + len(r.committed_ids), trace.new_tokens))
    return totals


def progress_figure(comparison: Comparison) -> go.Figure:
    """Tokens produced against target passes, with target-only decoding as the line y = x."""
    fig = go.Figure()
    # Until target-only decoding has run (it runs last), its line is drawn as long as the longest answer.
    passes = max([len(comparison.reference_ids())] + [t.new_tokens for t in comparison.traces])
    fig.add_trace(go.Scatter(
        x=[0, passes],
        y=[0, passes],
        name="target-only (1 token per pass)",
        mode="lines",
        line={"color": BASELINE_LINE_COLOR, "dash": "dash", "width": 2},
        hovertemplate="target-only<br>%{x} passes, %{y} tokens<extra></extra>",
        uid="target-only",
        meta={"label": "target-only", "policy": None, "series": "baseline"},
    ))
    for t, (color, symbol) in zip(comparison.traces, _styles(comparison)):
        totals = cumulative_tokens(t)
        fig.add_trace(go.Scatter(
            x=list(range(len(totals))),
            y=totals,
            name=t.label,
            legendgroup=t.label,
            mode="lines+markers",
            line={"color": color, "width": 2},
            marker={"color": color, "symbol": symbol, "size": 6},
            hovertemplate=html.escape(t.label) + "<br>%{x} passes, %{y} tokens<extra></extra>",
            uid=_uid(f"{t.label}:progress"),
            meta={"label": t.label, "policy": t.policy, "series": "progress"},
        ))
    _base_layout(fig, "Tokens produced per target pass", "target forward passes", "tokens produced")
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    return fig


# ---- what-if sweep -------------------------------------------------------------------------


def sweep_figure(result: Sweep, comparison: Comparison) -> go.Figure:
    """Target passes and modeled speedup against the dynamic threshold and against static k,
    replayed from one run; the policies actually run are marked, the oracle is a reference line."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=2, shared_xaxes="columns", vertical_spacing=0.08, horizontal_spacing=0.08,
                        subplot_titles=("dynamic: threshold (max 20)", "static: lookahead k", "", ""))
    curves = [(1, [float(r.label.split("=")[1]) for r in result.thresholds], result.thresholds, "dynamic"),
              (2, [int(r.label.split("=")[1]) for r in result.static], result.static, "static")]
    for col, xs, replays, policy in curves:
        color = policy_color(policy)
        hover = [f"{html.escape(r.label)}<br>target passes {r.target_passes}<br>draft passes {r.draft_passes}"
                 f"<br>modeled {r.estimated_s:.2f} s, {r.estimated_speedup:.2f}x" for r in replays]
        fig.add_trace(go.Scatter(x=xs, y=[r.target_passes for r in replays], mode="lines+markers", name=policy,
                                 legendgroup=policy, line={"color": color}, hovertext=hover, hoverinfo="text",
                                 meta={"policy": policy, "series": "target_passes"}), row=1, col=col)
        fig.add_trace(go.Scatter(x=xs, y=[r.estimated_speedup for r in replays], mode="lines+markers",
                                 name=policy, legendgroup=policy, showlegend=False, line={"color": color, "dash": "dot"},
                                 hovertext=hover, hoverinfo="text",
                                 meta={"policy": policy, "series": "speedup"}), row=2, col=col)
        for t in comparison.traces:
            x = _swept_parameter(t)
            if t.policy != policy or x is None:
                continue
            # The run's own point on each panel: target passes on top, its speedup below: measured,
            # or with a draft cost set by hand, its own passes priced at that cost (modeled).
            if result.cost_modeled and result.costs is not None:
                speed = modeled_speedup(comparison, ReplayedPasses(t.target_passes, t.draft_passes, 0), result.costs)
                speed_note = f"{speed:.2f}x modeled ({comparison.speedup(t):.2f}x measured)"
            else:
                speed = comparison.speedup(t)
                speed_note = f"{speed:.2f}x measured"
            for row, y, hover in ((1, t.target_passes, f"{t.target_passes} target passes"), (2, speed, speed_note)):
                fig.add_trace(go.Scatter(
                    x=[x], y=[y], mode="markers", showlegend=False,
                    marker={"size": 14, "symbol": "star", "color": color, "line": {"width": 1, "color": "black"}},
                    hovertext=[f"{html.escape(t.label)} (run): {hover}"], hoverinfo="text",
                    meta={"policy": policy, "series": "run" if row == 1 else "run_speedup", "label": t.label}),
                    row=row, col=col)
    if result.oracle_target_passes is not None:
        for col in (1, 2):
            fig.add_hline(y=result.oracle_target_passes, line={"color": ORACLE_LINE_COLOR, "dash": "dash"},
                          annotation_text="oracle", row=1, col=col)
    fig.add_hline(y=1.0, line={"color": BASELINE_LINE_COLOR, "dash": "dot"}, annotation_text="target alone",
                  row=2, col="all")
    cost = ""
    if result.costs is not None and result.costs.draft_ratio is not None:
        source = "set by hand" if result.cost_modeled else "as measured"
        cost = f"<br><sup>times modeled with a draft pass = {result.costs.draft_ratio:.2f} of a target pass ({source})</sup>"
    _base_layout(fig, "What if? Passes and speedup for other lookahead settings (replayed, no rerun)" + cost,
                 "", "")
    fig.update_yaxes(title_text="target passes", row=1, col=1)
    fig.update_yaxes(title_text="modeled speedup", row=2, col=1)
    fig.update_xaxes(title_text="confidence threshold", row=2, col=1)
    fig.update_xaxes(title_text="k", row=2, col=2)
    fig.update_layout(height=620, showlegend=False)  # the subplot titles name each curve; a legend would cover them
    return fig


def _swept_parameter(t: Trace) -> float | None:
    if t.policy == "dynamic" and t.params.get("max_tokens", 20) == 20:
        return float(t.params["assistant_confidence_threshold"])
    if t.policy == "static":
        return float(t.params["num_assistant_tokens"])
    return None


def threshold_figure(comparison: Comparison) -> go.Figure:
    """The confidence threshold in force at each round, for threshold policies (adaptive moves)."""
    fig = go.Figure()
    for i, t in enumerate(comparison.traces):
        if not any(r.threshold is not None for r in t.rounds):
            continue
        fig.add_trace(go.Scatter(x=[r.index for r in t.rounds], y=[r.threshold for r in t.rounds],
                                 mode="lines+markers", line_shape="hv", name=html.escape(t.label),
                                 line={"color": policy_color(t.policy, i)}, meta={"label": t.label}))
    _base_layout(fig, "Confidence threshold per round", "round", "threshold")
    fig.update_yaxes(range=[0, 1])
    return fig
