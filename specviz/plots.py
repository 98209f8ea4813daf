"""Plotly figures for a `Comparison`: lookahead per round, and tokens produced per target pass.

Each policy keeps one colour everywhere (`POLICY_COLORS`, from the Okabe-Ito palette, which stays
distinguishable with the common forms of colour blindness). Every plotted series carries
`meta = {"label", "policy", "series"}` so tests and callers can find it without relying on order.
"""

from __future__ import annotations

import html
import re

import plotly.graph_objects as go

from .sweep import Sweep
from .trace import Comparison, Round, Trace

# Okabe-Ito colours. Yellow (#F0E442) is left out: it is unreadable on a white background.
POLICY_COLORS: dict[str, str] = {
    "static": "#0072B2",  # blue
    "heuristic": "#E69F00",  # orange
    "dynamic": "#009E73",  # bluish green
    "oracle": "#CC79A7",  # reddish purple
    "adaptive": "#D55E00",  # vermillion
    "entropy": "#56B4E9",  # sky blue
}
_FALLBACK_COLORS = ["#000000", "#8C564B", "#7F7F7F", "#17BECF"]  # for policies not listed above
ORACLE_LINE_COLOR = "#555555"
BASELINE_LINE_COLOR = "#777777"

# Two runs of the same policy (e.g. "static k=3" and "static k=5") share a colour, so they are
# told apart by marker shape instead.
_SYMBOLS = ["circle", "square", "diamond", "triangle-up", "pentagon", "star"]

FONT_SIZE = 15


def policy_color(policy: str, index: int = 0) -> str:
    """The colour for a policy name; unknown names get a fallback picked by their index."""
    return POLICY_COLORS.get(policy, _FALLBACK_COLORS[index % len(_FALLBACK_COLORS)])


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


# ---- lookahead per round -------------------------------------------------------------------


def _oracle_at(r: Round, comparison: Comparison) -> int | None:
    if r.oracle_ideal is not None:
        return r.oracle_ideal
    ideal = comparison.oracle_ideal
    if ideal is not None and 0 <= r.position < len(ideal):
        return ideal[r.position]
    return None


def _round_hover(t: Trace, r: Round, comparison: Comparison) -> str:
    probs = ", ".join(f"{p:.2f}" for p in r.draft_probs) or "none"
    oracle = _oracle_at(r, comparison)
    # Plotly renders hover text as a small HTML subset, so the label is escaped.
    return "<br>".join([
        f"<b>{html.escape(t.label)}</b>",
        f"round {r.index}, position {r.position}",
        f"drafted {r.lookahead}, accepted {r.accepted}",
        f"draft p: {probs}",
        f"oracle ideal: {'n/a' if oracle is None else oracle}",
    ])


def _uid(text: str) -> str:
    """A trace uid safe as a CSS class: plotly builds selectors from it, and kaleido's PNG export
    fails on a uid with spaces, '=' or '.' (as in "static k=5")."""
    return re.sub(r"[^A-Za-z0-9_-]", lambda m: f"_{ord(m.group()):x}_", text)


def _oracle_line(ideal: list[int]) -> go.Scatter:
    return go.Scatter(
        x=list(range(len(ideal))),
        y=list(ideal),
        name="oracle ideal",
        mode="lines",
        line={"shape": "hv", "color": ORACLE_LINE_COLOR, "width": 2, "dash": "dot"},
        hovertemplate="position %{x}<br>oracle ideal %{y}<extra></extra>",
        uid="oracle-ideal",
        meta={"label": "oracle ideal", "policy": None, "series": "oracle_ideal"},
    )


def _round_markers(t: Trace, comparison: Comparison, color: str, symbol: str, series: str) -> go.Scatter:
    """One policy's drafted (hollow) or accepted (filled) markers."""
    drafted = series == "drafted"
    return go.Scatter(
        x=[r.position for r in t.rounds],
        y=[r.lookahead if drafted else r.accepted for r in t.rounds],
        name=t.label,
        legendgroup=t.label,
        showlegend=drafted,  # one legend entry per policy; the group toggles both series
        mode="markers",
        marker={
            "color": color,
            "symbol": f"{symbol}-open" if drafted else symbol,
            "size": 11 if drafted else 8,
            "line": {"width": 2, "color": color},
        },
        text=[_round_hover(t, r, comparison) for r in t.rounds],
        hovertemplate="%{text}<extra>" + series + "</extra>",
        uid=_uid(f"{t.label}:{series}"),
        meta={"label": t.label, "policy": t.policy, "series": series},
    )


def _largest_lookahead(comparison: Comparison) -> int:
    drafted = [r.lookahead for t in comparison.traces for r in t.rounds]
    return max(drafted + list(comparison.oracle_ideal or []) + [1])


def _integer_y_axis(fig: go.Figure, top: int) -> None:
    # Start a little below 0 so markers at 0 are not cut in half by the plot edge; whole-number
    # ticks while there are few of them.
    fig.update_yaxes(range=[-0.5, top + 0.5], dtick=1 if top <= 10 else None)


def lookahead_figure(comparison: Comparison) -> go.Figure:
    """Per round: how many tokens were drafted (hollow) and accepted (filled), by answer position."""
    fig = go.Figure()
    if comparison.oracle_ideal is not None:  # None for sampling runs: no single ideal exists
        fig.add_trace(_oracle_line(comparison.oracle_ideal))
    for t, (color, symbol) in zip(comparison.traces, _styles(comparison)):
        fig.add_trace(_round_markers(t, comparison, color, symbol, "drafted"))
        fig.add_trace(_round_markers(t, comparison, color, symbol, "accepted"))
    _base_layout(
        fig,
        "Lookahead per round: drafted (hollow) vs accepted (filled)",
        "token position in the answer",
        "tokens",
    )
    _integer_y_axis(fig, _largest_lookahead(comparison))
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
    """Target passes and estimated speedup against the dynamic threshold and against static k,
    replayed from one run; the policies actually run are marked, the oracle is a reference line."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=2, shared_xaxes="columns", vertical_spacing=0.08, horizontal_spacing=0.08,
                        subplot_titles=("dynamic: threshold (max 20)", "static: lookahead k", "", ""))
    curves = [(1, [float(r.label.split("=")[1]) for r in result.thresholds], result.thresholds, "dynamic"),
              (2, [int(r.label.split("=")[1]) for r in result.static], result.static, "static")]
    for col, xs, replays, policy in curves:
        color = policy_color(policy)
        hover = [f"{html.escape(r.label)}<br>target passes {r.target_passes}<br>draft passes {r.draft_passes}"
                 f"<br>estimated {r.estimated_s:.2f} s, {r.estimated_speedup:.2f}x" for r in replays]
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
            # The run's own point on each panel: target passes on top, measured speedup below.
            for row, y, hover in ((1, t.target_passes, f"{t.target_passes} target passes"),
                                  (2, comparison.speedup(t), f"{comparison.speedup(t):.2f}x measured")):
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
    _base_layout(fig, "What if? Passes and speedup for other lookahead settings (replayed, no rerun)",
                 "", "")
    fig.update_yaxes(title_text="target passes", row=1, col=1)
    fig.update_yaxes(title_text="estimated speedup", row=2, col=1)
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
