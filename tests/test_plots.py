"""Plotly figures: one legend group per policy, the oracle line, and progress curves."""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.plots import (
    POLICY_COLORS,
    cumulative_tokens,
    lookahead_figure,
    progress_figure,
)
from specviz.trace import Baseline, Comparison, Round, Trace


def make_round(index: int, position: int, lookahead: int, accepted: int, target: bool = True) -> Round:
    return Round(
        index=index, position=position, budget=lookahead,
        draft_ids=list(range(lookahead)), draft_probs=[0.912345] * lookahead, accepted=accepted,
        target_id=1 if target else None,
    )


def make_trace(policy: str, label: str, shape: list[tuple[int, int]], new_tokens: int | None = None) -> Trace:
    """A trace from (lookahead, accepted) pairs; positions follow from the committed tokens."""
    rounds, position = [], 0
    for i, (lookahead, accepted) in enumerate(shape):
        rounds.append(make_round(i, position, lookahead, accepted))
        position += accepted + 1
    committed = sum(len(r.committed_ids) for r in rounds)
    return Trace(policy=policy, label=label, params={}, token_ids=[0] * (new_tokens or committed),
                 rounds=rounds, wall_s=1.0, stop_reason="eos")


def make_comparison(oracle: bool = True) -> Comparison:
    static = make_trace("static", "static k=3", [(3, 3), (3, 1), (3, 0), (3, 2)])  # 10 tokens
    dynamic = make_trace("dynamic", "dynamic", [(2, 2), (4, 4), (4, 1)])  # 10 tokens
    baseline = Baseline(token_ids=[0] * 10, wall_s=2.0, stop_reason="eos")
    return Comparison(
        preset="tiny", prompt="p", max_new_tokens=10, baseline=baseline, traces=[static, dynamic],
        oracle_ideal=[3, 2, 1, 0, 4, 3, 2, 1, 0, 1] if oracle else None,
    )


def series(fig: go.Figure, name: str) -> list:
    return [d for d in fig.data if d.meta and d.meta["series"] == name]


# ---- lookahead figure ----------------------------------------------------------------------


def test_one_legend_group_per_policy_plus_oracle_line():
    comparison = make_comparison()
    fig = lookahead_figure(comparison)
    groups = {d.legendgroup for d in fig.data if d.legendgroup}
    assert groups == {t.label for t in comparison.traces}
    for label in groups:
        members = [d for d in fig.data if d.legendgroup == label]
        assert sorted(d.meta["series"] for d in members) == ["accepted", "drafted"]
        assert sum(bool(d.showlegend) for d in members) == 1  # one legend entry per policy
        assert len({d.marker.color for d in members}) == 1  # one colour per policy
        assert all(d.name == label for d in members)
    (oracle,) = series(fig, "oracle_ideal")
    assert oracle.name == "oracle ideal"
    assert oracle.line.shape == "hv"
    assert list(oracle.y) == comparison.oracle_ideal
    assert list(oracle.x) == list(range(len(comparison.oracle_ideal)))


def test_markers_follow_the_rounds():
    comparison = make_comparison()
    fig = lookahead_figure(comparison)
    static = comparison.trace("static k=3")
    (drafted,) = [d for d in series(fig, "drafted") if d.name == "static k=3"]
    (accepted,) = [d for d in series(fig, "accepted") if d.name == "static k=3"]
    assert list(drafted.x) == [r.position for r in static.rounds] == [0, 4, 6, 7]
    assert list(drafted.y) == [3, 3, 3, 3]
    assert list(accepted.y) == [3, 1, 0, 2]
    assert drafted.marker.symbol.endswith("-open") and not accepted.marker.symbol.endswith("-open")
    assert drafted.marker.color == POLICY_COLORS["static"]
    hover = drafted.text[1]
    assert "round 1" in hover and "position 4" in hover
    assert "drafted 3" in hover and "accepted 1" in hover
    assert "0.91, 0.91, 0.91" in hover
    assert "oracle ideal: 4" in hover


def test_no_oracle_line_when_sampling():
    fig = lookahead_figure(make_comparison(oracle=False))
    assert series(fig, "oracle_ideal") == []
    assert "oracle ideal: n/a" in series(fig, "drafted")[0].text[0]


def test_layout_is_readable():
    fig = lookahead_figure(make_comparison())
    assert fig.layout.font.size >= 14
    assert fig.layout.legend.orientation == "h"
    assert fig.layout.title.text
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_same_policy_twice_keeps_colour_but_changes_symbol():
    comparison = make_comparison()
    comparison.traces.append(make_trace("static", "static k=5", [(5, 5)]))
    fig = lookahead_figure(comparison)
    k3, k5 = [d for d in series(fig, "accepted") if d.meta["policy"] == "static"]
    assert k3.marker.color == k5.marker.color
    assert k3.marker.symbol != k5.marker.symbol


# ---- progress figure -----------------------------------------------------------------------


def test_progress_ends_at_new_tokens_and_baseline_is_diagonal():
    comparison = make_comparison()
    fig = progress_figure(comparison)
    (baseline,) = series(fig, "baseline")
    assert list(baseline.x) == list(baseline.y) == [0, comparison.baseline.target_passes]
    curves = series(fig, "progress")
    assert [c.name for c in curves] == [t.label for t in comparison.traces]
    for curve, trace in zip(curves, comparison.traces):
        assert curve.y[-1] == trace.new_tokens
        assert curve.x[-1] == trace.target_passes
        assert list(curve.y) == sorted(curve.y)  # never goes backwards
        assert curve.line.color == POLICY_COLORS[trace.policy]


def test_progress_caps_tokens_past_a_stop():
    trace = make_trace("static", "static k=3", [(3, 3), (3, 3)], new_tokens=6)  # 8 committed, 6 kept
    assert cumulative_tokens(trace) == [0, 4, 6]


def test_policy_colors_cover_every_policy_and_differ():
    names = {"static", "heuristic", "dynamic", "oracle", "adaptive", "entropy"}
    assert names <= set(POLICY_COLORS)
    assert len(set(POLICY_COLORS.values())) == len(POLICY_COLORS)


def test_trace_uids_are_css_safe():
    """Plotly turns uids into CSS selectors; kaleido's PNG export fails on "static k=5"-style uids."""
    import re

    for fig in (lookahead_figure(make_comparison()), progress_figure(make_comparison())):
        uids = [d.uid for d in fig.data if d.uid]
        assert uids and all(re.fullmatch(r"[A-Za-z0-9_-]+", u) for u in uids), uids
        assert len(set(uids)) == len(uids)
