"""Plotly figures: one legend group per policy, the oracle line, and progress curves."""

from __future__ import annotations

import plotly.graph_objects as go

from specviz.colors import POLICY_COLORS
from specviz.decoding.trace import Baseline, Comparison, Round, Trace
from specviz.ui.plots import (
    cumulative_tokens,
    lookahead_figure,
    progress_figure,
)


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


# ---- lookahead figure: one panel per policy ------------------------------------------------


def panel_series(fig: go.Figure, label: str, name: str) -> go.Bar | None:
    found = [d for d in fig.data if d.meta and d.meta.get("label") == label and d.meta["series"] == name]
    assert len(found) <= 1
    return found[0] if found else None


def test_one_panel_per_policy_each_with_the_oracle_line():
    comparison = make_comparison()
    fig = lookahead_figure(comparison)
    oracle_lines = series(fig, "oracle_ideal")
    assert len(oracle_lines) == len(comparison.traces)
    axes = {d.yaxis for d in fig.data if d.meta["series"] != "oracle_ideal"}
    assert len(axes) == len(comparison.traces)  # each policy on its own axis
    for line in oracle_lines:
        assert line.line.shape == "hv"
        assert list(line.y)[:-1] == comparison.oracle_ideal
        assert list(line.x) == list(range(len(comparison.oracle_ideal) + 1))
    assert sum(bool(line.showlegend) for line in oracle_lines) == 1
    assert fig.layout.barmode == "stack"
    assert [a.text.split(":")[0] for a in fig.layout.annotations][:2] == ["<b>static k=3</b>", "<b>dynamic</b>"]


def test_bars_split_each_round_against_the_ideal():
    comparison = make_comparison()
    fig = lookahead_figure(comparison)
    # static k=3 rounds: (pos 0, 3 drafted, 3 kept, ideal 3), (4, 3, 1, ideal 4), (6, 3, 0, ideal 2), (7, 3, 2, 1)
    accepted = panel_series(fig, "static k=3", "accepted")
    beyond = panel_series(fig, "static k=3", "beyond_ideal")
    assert list(accepted.x) == [0.5, 4.5, 6.5, 7.5]  # over [p, p+1), where the ideal line holds p's value
    assert list(accepted.y) == [3, 1, 0, 2]
    assert list(beyond.y) == [0, 2, 3, 1]  # a rejection: everything from it on was drafted past the ideal
    assert panel_series(fig, "static k=3", "short_of_ideal") is None
    # dynamic: (0, 2, 2, ideal 3) too short by 1; (3, 4, 4, ideal 0) accepted beyond the estimate; (8, 4, 1, 0)
    dynamic_short = panel_series(fig, "dynamic", "short_of_ideal")
    assert list(dynamic_short.y) == [1, 0, 0]
    assert list(panel_series(fig, "dynamic", "beyond_ideal").y) == [0, 0, 3]
    assert accepted.marker.color == POLICY_COLORS["static"]
    assert beyond.marker.color != accepted.marker.color


def test_hover_shows_escaped_draft_tokens_and_verdict():
    comparison = make_comparison()
    r = comparison.trace("static k=3").rounds[1]
    r.draft_texts = ["<b>x</b>", "\n", " "]
    fig = lookahead_figure(comparison)
    hover = panel_series(fig, "static k=3", "accepted").hovertext[1]
    assert "round 1, position 4" in hover and "drafted 3, accepted 1, oracle ideal 4" in hover
    assert "too long" in hover
    assert "&lt;b&gt;x&lt;/b&gt;" in hover and "<b>x</b>" not in hover
    assert "✓ '&lt;b&gt;x&lt;/b&gt;' 0.91" in hover and "✗ '⏎' 0.91" in hover and "· '␣' 0.91" in hover


def test_panel_titles_count_verdicts():
    fig = lookahead_figure(make_comparison())
    titles = [a.text for a in fig.layout.annotations]
    assert "4 rounds, 3 too long, 0 too short, 1 on the ideal" in titles[0]
    assert "3 rounds, 1 too long, 1 too short, 1 on the ideal" in titles[1]


def test_no_oracle_line_when_sampling():
    fig = lookahead_figure(make_comparison(oracle=False))
    assert series(fig, "oracle_ideal") == []
    assert series(fig, "beyond_ideal") == [] and series(fig, "short_of_ideal") == []
    rejected = panel_series(fig, "static k=3", "rejected")
    assert list(rejected.y) == [0, 2, 3, 1]
    assert "oracle ideal n/a" in rejected.hovertext[0]


def test_layout_is_readable():
    fig = lookahead_figure(make_comparison())
    assert fig.layout.font.size >= 14
    assert fig.layout.legend.orientation == "h"
    assert fig.layout.title.text
    assert fig.layout.height >= 150 * len(make_comparison().traces)


def test_same_policy_twice_gets_two_panels_in_one_colour():
    comparison = make_comparison()
    comparison.traces.append(make_trace("static", "static k=5", [(5, 5)]))
    fig = lookahead_figure(comparison)
    k3, k5 = panel_series(fig, "static k=3", "accepted"), panel_series(fig, "static k=5", "accepted")
    assert k3.marker.color == k5.marker.color
    assert k3.yaxis != k5.yaxis


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
