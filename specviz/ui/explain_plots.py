"""Charts that say why a policy wins or loses on a prompt: the draft's calibration, acceptance by
draft position, and where each policy's work went. The numbers come from `analysis`; this module
only draws them. Every series carries `meta = {"series", ...}` so tests can find it.
"""

from __future__ import annotations

import html
import textwrap

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..decoding.trace import Comparison
from ..explain.analysis import (
    RuleRound,
    auc,
    calibration_bins,
    calibration_sentence,
    dynamic_threshold,
    judged_tokens,
    measured_passes,
    position_shares,
    work_split,
)
from .plots import BASELINE_LINE_COLOR, FONT_SIZE, ORACLE_LINE_COLOR, _styles, _uid

COUNT_BAR_COLOR = "rgba(120, 120, 120, 0.30)"
SHARE_COLOR = "#0072B2"
THRESHOLD_COLOR = "#009E73"  # the dynamic policy's colour
ACCEPTED_COLOR = "#009E73"
CATCH_UP_COLOR = "#CC79A7"  # reddish purple (Okabe-Ito): draft calls spent reading committed tokens
THROWN_AWAY_COLOR = "#B2182B"  # the lookahead chart's "beyond the ideal" red
TARGET_PASS_COLOR = "#555555"
DRAFT_TIME_COLOR = "#E69F00"
VERIFY_TIME_COLOR = "#0072B2"
OTHER_TIME_COLOR = "rgba(150, 150, 150, 0.5)"


def _layout(fig: go.Figure, title: str, height: int) -> None:
    fig.update_layout(title=title, template="plotly_white", font={"size": FONT_SIZE}, height=height,
                      hovermode="closest",
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0})


def _wrap(text: str, width: int = 130) -> str:
    return "<br>".join(textwrap.wrap(text, width))


# ---- calibration ---------------------------------------------------------------------------


def calibration_figure(comparison: Comparison, bins: int = 10) -> go.Figure:
    """Draft probability in bins against the share the target accepted (judged tokens of every
    policy but the oracle), with the count per bin, the diagonal of a perfectly calibrated draft,
    the dynamic threshold, the AUC in the title and a sentence saying what it means."""
    samples = judged_tokens(comparison)
    table = calibration_bins(samples, bins)
    threshold = dynamic_threshold(comparison)
    score = auc(samples)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(
        x=[b.middle for b in table], y=[b.count for b in table], width=[b.high - b.low for b in table],
        name="judged tokens per bin", marker={"color": COUNT_BAR_COLOR, "line": {"color": "white", "width": 1}},
        hovertext=[f"draft p {b.low:.1f}-{b.high:.1f}: {b.count} judged, {b.accepted} accepted" for b in table],
        hoverinfo="text", meta={"series": "count"}, uid="calibration-count",
    ), secondary_y=True)
    fig.add_trace(go.Scatter(
        x=[0, 1], y=[0, 1], mode="lines", name="perfectly calibrated",
        line={"color": ORACLE_LINE_COLOR, "dash": "dot", "width": 1.5}, hoverinfo="skip",
        meta={"series": "diagonal"}, uid="calibration-diagonal",
    ), secondary_y=False)
    filled = [b for b in table if b.count]
    fig.add_trace(go.Scatter(
        x=[b.middle for b in filled], y=[b.share for b in filled], mode="lines+markers",
        name="share the target accepted", line={"color": SHARE_COLOR, "width": 3},
        marker={"size": [8 + min(10, b.count ** 0.5) for b in filled], "color": SHARE_COLOR},
        hovertext=[f"draft p {b.low:.1f}-{b.high:.1f}<br>accepted {b.accepted} of {b.count} ({b.share:.0%})"
                   for b in filled], hoverinfo="text", meta={"series": "share"}, uid="calibration-share",
    ), secondary_y=False)
    if threshold is not None:
        fig.add_vline(x=threshold, line={"color": THRESHOLD_COLOR, "width": 2, "dash": "dash"},
                      annotation_text=f"dynamic threshold {threshold:g}", annotation_position="top right")
    auc_text = "AUC n/a" if score is None else f"AUC {score:.2f}"
    _layout(fig, f"Does the draft's confidence predict acceptance? {auc_text} over {len(samples)} judged tokens",
            520)
    fig.update_layout(margin={"t": 130, "b": 130}, bargap=0, meta={"auc": score, "sentence": calibration_sentence(samples,
                                                                                                        threshold)})
    fig.add_annotation(text=_wrap(calibration_sentence(samples, threshold)), xref="paper", yref="paper", x=0,
                       y=-0.2, xanchor="left", yanchor="top", showarrow=False, align="left",
                       font={"size": FONT_SIZE - 1})
    fig.update_xaxes(title_text="draft probability of its own token", range=[0, 1], dtick=0.1)
    fig.update_yaxes(title_text="share accepted", range=[0, 1.05], tickformat=".0%", secondary_y=False)
    fig.update_yaxes(title_text="judged tokens", rangemode="tozero", showgrid=False, tickformat="d",
                     secondary_y=True)
    return fig


# ---- acceptance by draft position ----------------------------------------------------------


def position_figure(comparison: Comparison) -> go.Figure:
    """Per policy: share of rounds whose draft token at position 1, 2, ... was accepted, among
    the rounds that drafted at least that many tokens."""
    fig = go.Figure()
    for t, (color, symbol) in zip(comparison.traces, _styles(comparison)):
        shares = position_shares(t)
        if not shares:
            continue
        fig.add_trace(go.Scatter(
            x=[s.position for s in shares], y=[s.share for s in shares], mode="lines+markers", name=t.label,
            line={"color": color, "width": 2}, marker={"color": color, "symbol": symbol, "size": 8},
            hovertext=[f"{html.escape(t.label)}, draft position {s.position}<br>accepted in {s.accepted} of "
                       f"{s.rounds} rounds ({s.share:.0%})" for s in shares], hoverinfo="text",
            uid=_uid(f"{t.label}:position"), meta={"label": t.label, "policy": t.policy, "series": "position"},
        ))
    _layout(fig, "Acceptance by draft position (among rounds that drafted that far)", 460)
    fig.update_layout(margin={"t": 110})
    fig.update_xaxes(title_text="position of the token in its round's draft", rangemode="tozero", dtick=1)
    fig.update_yaxes(title_text="share accepted", range=[0, 1.05], tickformat=".0%")
    return fig


# ---- where the work went -------------------------------------------------------------------


def work_figure(comparison: Comparison) -> go.Figure:
    """Per policy: target passes next to its draft passes: the tokens it kept, those it threw away
    and the catch-up calls (left), and the measured wall time split into drafting, verifying and
    the rest (right)."""
    splits = [work_split(t) for t in comparison.traces]
    labels = [html.escape(s.label) for s in splits]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14,
                        subplot_titles=("forward passes and draft tokens", "measured time (s)"))
    fig.add_trace(go.Bar(y=labels, x=[s.target_passes for s in splits], orientation="h", name="target passes",
                         offsetgroup="target", marker={"color": TARGET_PASS_COLOR},
                         hovertext=[f"{label}: {s.target_passes} target passes" for label, s in zip(labels, splits)],
                         hoverinfo="text", meta={"series": "target_passes"}), row=1, col=1)
    fig.add_trace(go.Bar(y=labels, x=[s.draft_accepted for s in splits], orientation="h",
                         name="draft tokens accepted", offsetgroup="draft", marker={"color": ACCEPTED_COLOR},
                         hovertext=[f"{label}: {s.draft_accepted} of {s.draft_tokens} draft tokens accepted"
                                    for label, s in zip(labels, splits)],
                         hoverinfo="text", meta={"series": "draft_accepted"}), row=1, col=1)
    fig.add_trace(go.Bar(y=labels, x=[s.draft_thrown_away for s in splits], orientation="h",
                         base=[s.draft_accepted for s in splits], name="draft tokens thrown away",
                         offsetgroup="draft", marker={"color": THROWN_AWAY_COLOR},
                         hovertext=[f"{label}: {s.draft_thrown_away} draft tokens thrown away ({s.draft_rejected} "
                                    f"rejected, {s.draft_thrown_away - s.draft_rejected} after a rejection, never "
                                    f"judged)" for label, s in zip(labels, splits)],
                         hoverinfo="text", meta={"series": "draft_thrown_away"}), row=1, col=1)
    fig.add_trace(go.Bar(y=labels, x=[s.draft_catch_up for s in splits], orientation="h",
                         base=[s.draft_tokens for s in splits], name="draft catch-up calls",
                         offsetgroup="draft", marker={"color": CATCH_UP_COLOR},
                         hovertext=[f"{label}: {s.draft_catch_up} draft calls that only read committed tokens (after "
                                    f"fully accepted rounds, and the prompt)" for label, s in zip(labels, splits)],
                         hoverinfo="text", meta={"series": "draft_catch_up"}), row=1, col=1)
    for series, name, color, values in (
            ("draft_s", "drafting", DRAFT_TIME_COLOR, [s.draft_s for s in splits]),
            ("verify_s", "verifying", VERIFY_TIME_COLOR, [s.verify_s for s in splits]),
            ("other_s", "other", OTHER_TIME_COLOR, [s.other_s for s in splits])):
        fig.add_trace(go.Bar(y=labels, x=values, orientation="h", name=name, marker={"color": color},
                             hovertext=[f"{label}: {name} {v:.2f} s of {s.wall_s:.2f} s"
                                        for label, s, v in zip(labels, splits, values)],
                             hoverinfo="text", meta={"series": series}), row=1, col=2)
    if comparison.baseline is not None:  # a run stopped before target-only decoding has none
        fig.add_vline(x=comparison.baseline.wall_s, line={"color": BASELINE_LINE_COLOR, "dash": "dash"},
                      annotation_text="target alone", annotation_position="top", row=1, col=2)
    _layout(fig, "Where the work went", 230 + 60 * max(3, len(splits)))
    fig.update_layout(barmode="relative", margin={"t": 80, "b": 140},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.35, "xanchor": "left", "x": 0})
    # 'relative' stacks the time bars; the pass bars are kept apart by their offset groups.
    fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(showticklabels=False, row=1, col=2)
    fig.update_xaxes(title_text="passes / tokens", row=1, col=1)
    fig.update_xaxes(title_text="seconds", row=1, col=2)
    return fig


# ---- what a pass costs here ----------------------------------------------------------------


def pass_cost_figure(comparison: Comparison) -> go.Figure:
    """Every verification pass of the run: its time against the tokens it checked, with the median
    per window, target-only decoding's one-token pass and the draft's call as lines. Speculative
    decoding assumes a pass over k tokens costs about one one-token pass; this shows whether it
    did on the machine that ran it."""
    passes = measured_passes(comparison)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=passes.windows, y=passes.verify_ms, mode="markers", name="a verification pass",
                             marker={"color": VERIFY_TIME_COLOR, "opacity": 0.35, "size": 7},
                             hovertemplate="%{x} tokens checked: %{y:.0f} ms<extra></extra>",
                             meta={"series": "verify_passes"}))
    windows = sorted(set(passes.windows))
    medians = [passes.median_ms(w) for w in windows]
    fig.add_trace(go.Scatter(x=windows, y=medians, mode="lines+markers", name="median per window",
                             line={"color": VERIFY_TIME_COLOR, "width": 3},
                             hovertemplate="%{x} tokens: median %{y:.0f} ms<extra></extra>",
                             meta={"series": "verify_median"}))
    lines = ((passes.one_token_ms, "one-token pass (target alone)", BASELINE_LINE_COLOR, "one_token"),
             (passes.draft_call_ms, "a draft call", DRAFT_TIME_COLOR, "draft_call"))
    for ms, name, color, series in lines:
        if ms is not None and windows:
            fig.add_trace(go.Scatter(x=[min(windows), max(windows)], y=[ms, ms], mode="lines", name=name,
                                     line={"color": color, "dash": "dash"},
                                     hovertemplate=f"{name}: {ms:.0f} ms<extra></extra>", meta={"series": series}))
    _layout(fig, _wrap(_pass_cost_title(passes, windows, medians), 110), 460)
    fig.update_xaxes(title_text="tokens checked in one target pass", dtick=1 if len(windows) < 12 else None)
    fig.update_yaxes(title_text="milliseconds", rangemode="tozero")
    fig.update_layout(margin={"t": 100, "b": 120},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.22, "xanchor": "left", "x": 0})
    return fig


def _pass_cost_title(passes, windows: list[int], medians: list[float | None]) -> str:
    if not windows or passes.one_token_ms is None:
        return "What a pass cost in this run"
    counts = {w: passes.windows.count(w) for w in windows}
    widest = max((w for w in windows if counts[w] >= 3), default=max(windows))  # a median of a few passes
    ratio = passes.median_ms(widest) / passes.one_token_ms
    verdict = ("about one pass, as speculative decoding assumes" if ratio < 1.3 else
               "more than one pass: long drafts cost more here than on a GPU")
    return (f"What a pass cost in this run: checking {widest} tokens took {ratio:.1f} one-token passes "
            f"(median), {verdict}")


# ---- how the cost-aware rule chose a round ---------------------------------------------------


def _add_plan_and_bars(fig: go.Figure, rr: RuleRound, right: float) -> None:
    """The round's plan (a diamond) and the two bars it is held to: plain decoding's rate for the
    round, the run's rate for each further token."""
    plan, plain_per_s = rr.plan, rr.plan.plain_rate * 1000
    fig.add_trace(go.Scatter(x=[plan.window], y=[plan.rate * 1000], mode="markers",
                             name="the round as planned (drafted only if above plain decoding)",
                             marker={"color": ACCEPTED_COLOR if plan.drafts else OTHER_TIME_COLOR, "symbol": "diamond",
                                     "size": 13},
                             hovertemplate=(f"planned: {plan.window} tokens, {plan.tokens:.2f} expected in "
                                            f"{plan.cost_ms:.0f} ms = %{{y:.1f}} tokens/s against plain decoding's "
                                            f"{plain_per_s:.1f}<extra></extra>"),
                             meta={"series": "plan"}))
    fig.add_trace(go.Scatter(x=[-0.5, right], y=[rr.rate_per_s] * 2, mode="lines",
                             name="the run's rate so far (the bar for each further token)",
                             line={"color": BASELINE_LINE_COLOR, "dash": "dash"},
                             hovertemplate=f"the run so far: {rr.rate_per_s:.1f} tokens/s<extra></extra>",
                             meta={"series": "rate"}))
    fig.add_trace(go.Scatter(x=[-0.5, right], y=[plain_per_s] * 2, mode="lines",
                             name="plain decoding (the bar for the round)",
                             line={"color": BASELINE_LINE_COLOR, "dash": "dot"},
                             hovertemplate=f"plain decoding: {plain_per_s:.1f} tokens/s<extra></extra>",
                             meta={"series": "plain"}))


def rule_round_figure(rule_round: RuleRound, label: str = "cost-aware") -> go.Figure:
    """One round of the cost-aware rule: its plan (the round at its best window, drafted only if
    that beats plain decoding), bars for what each further draft token was expected to add per
    second (drafted while above the run's rate, the dashed line), the round's expected tokens per
    second had it stopped after n tokens, where it stopped, the oracle's ideal, and what the round
    really did."""
    rr = rule_round
    windows = [d.window for d in rr.decisions]
    marginal = [d.gain / d.cost_ms * 1000 for d in rr.decisions]
    colors = [ACCEPTED_COLOR if d.drafts else OTHER_TIME_COLOR for d in rr.decisions]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=windows, y=marginal, name="one more token: expected tokens per second it adds",
                         marker={"color": colors},
                         hovertext=[f"token {d.window}: expected {d.gain:.2f} more tokens for {d.cost_ms:.0f} ms "
                                    f"= {v:.1f} tokens/s, {'above' if d.drafts else 'below'} the run's "
                                    f"{d.rate * 1000:.1f}: {'drafted' if d.drafts else 'stop'}"
                                    for d, v in zip(rr.decisions, marginal)],
                         hoverinfo="text", meta={"series": "marginal"}))
    expected = rr.expected_per_s()
    fig.add_trace(go.Scatter(x=list(range(len(expected))), y=expected, mode="lines+markers",
                             name="the round's expected tokens per second, stopping after n",
                             line={"color": VERIFY_TIME_COLOR, "width": 2},
                             hovertemplate="stop after %{x} tokens: %{y:.1f} tokens/s expected<extra></extra>",
                             meta={"series": "expected"}))
    top = max([*marginal, *expected, rr.rate_per_s, rr.plan.rate * 1000, 1.0])
    _add_plan_and_bars(fig, rr, max([*windows, rr.lookahead, rr.plan.window, 1]) + 0.5)
    marks = [(rr.lookahead, f"drafted {rr.lookahead}", THRESHOLD_COLOR, "solid", "stop")]
    if rr.oracle_ideal is not None:
        marks.append((rr.oracle_ideal, f"oracle's ideal {rr.oracle_ideal}", ORACLE_LINE_COLOR, "dot", "ideal"))
    for x, name, color, dash, series in marks:
        fig.add_trace(go.Scatter(x=[x, x], y=[0, top * 1.08], mode="lines", name=name,
                                 line={"color": color, "dash": dash, "width": 2}, hoverinfo="name",
                                 meta={"series": series}))
    actual = rr.committed / rr.measured_ms * 1000 if rr.measured_ms > 0 else None
    if actual is not None:
        fig.add_trace(go.Scatter(x=[rr.lookahead], y=[actual], mode="markers", name="what the round really did",
                                 marker={"color": THROWN_AWAY_COLOR, "symbol": "star", "size": 14},
                                 hovertemplate=(f"{rr.accepted} of {rr.lookahead} accepted, {rr.committed} tokens in "
                                                f"{rr.measured_ms:.0f} ms = %{{y:.1f}} tokens/s<extra></extra>"),
                                 meta={"series": "actual"}))
    title = (f"How {html.escape(label)} chose round {rr.index + 1}: it drafted {rr.lookahead}, the target accepted "
             f"{rr.accepted}" + (f", the oracle's ideal was {rr.oracle_ideal}" if rr.oracle_ideal is not None else ""))
    _layout(fig, _wrap(title, 110), 460)
    fig.update_xaxes(title_text="draft tokens this round", dtick=1 if len(windows) < 25 else None)
    fig.update_yaxes(title_text="tokens per second", rangemode="tozero")
    fig.update_layout(margin={"t": 80, "b": 140},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0})
    return fig


def explain_figures(comparison: Comparison) -> dict[str, go.Figure]:
    """The explaining charts, by file stem."""
    return {"calibration": calibration_figure(comparison), "positions": position_figure(comparison),
            "work": work_figure(comparison), "pass_costs": pass_cost_figure(comparison)}
