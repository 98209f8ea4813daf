"""Token view, metrics and summary HTML: escaping, classes, whitespace and numbers."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from specviz.decoding.trace import Baseline, Comparison, Pending, Round, Trace, drafting_view
from specviz.ui.render import (
    LEGEND_HTML,
    SUMMARY_HEADERS,
    TOKEN_CSS,
    legend_html,
    metrics_html,
    render_text,
    render_trace,
    summary_rows,
)

# ---- helpers -------------------------------------------------------------------------------


def make_round(index: int, position: int, texts: list[str], accepted: int, target: str | None,
               probs: list[float] | None = None) -> Round:
    ids = [100 + index * 10 + i for i in range(len(texts))]
    return Round(
        index=index, position=position, budget=max(len(texts), 1), draft_ids=ids,
        draft_probs=probs if probs is not None else [0.9 - 0.1 * i for i in range(len(texts))],
        accepted=accepted, target_id=None if target is None else 999, draft_texts=texts,
        target_text=target,
    )


def make_trace(rounds: list[Round], **kwargs) -> Trace:
    committed = [i for r in rounds for i in r.committed_ids]
    text = "".join(
        "".join(r.draft_texts[: r.accepted]) + (r.target_text or "") for r in rounds
    )
    defaults = {"policy": "static", "label": "static k=3", "params": {"k": 3}, "token_ids": committed,
                "rounds": rounds, "wall_s": 2.0, "stop_reason": "eos", "text": text, "lossless": True}
    return Trace(**{**defaults, **kwargs})


def sample_trace(**kwargs) -> Trace:
    rounds = [
        make_round(0, 0, ["The", " cat"], accepted=2, target=" sat"),  # bonus
        make_round(1, 3, [" on", " a", " mat"], accepted=1, target=" the"),  # correction
        make_round(2, 5, [" mat", ".\n"], accepted=2, target="\n"),  # bonus, whitespace
        make_round(3, 8, [], accepted=0, target="Done"),  # nothing drafted: the target token is a bonus
        make_round(4, 9, ["!", "?"], accepted=0, target=None),  # run ended before the target token
    ]
    return make_trace(rounds, **kwargs)


def make_comparison(traces: list[Trace], baseline_wall: float = 3.0, **kwargs) -> Comparison:
    baseline = Baseline(token_ids=list(range(12)), wall_s=baseline_wall, stop_reason="eos",
                        text="The cat sat on the mat.\n")
    return Comparison(preset="tiny", prompt="p", max_new_tokens=32, baseline=baseline,
                      traces=traces, **kwargs)


class Collector(HTMLParser):
    """Records every tag, its attributes and the text content, as a browser would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text += data


def parse(markup: str) -> Collector:
    c = Collector()
    c.feed(markup)
    c.close()
    return c


def token_spans(markup: str) -> list[dict[str, str | None]]:
    return [a for tag, a in parse(markup).tags if tag == "span" and "tok" in (a.get("class") or "").split()]


def expected_text(trace: Trace) -> str:
    """Everything the token view shows, in order: draft tokens (kept or not), then the target's."""
    return "".join("".join(r.draft_texts) + (r.target_text or "") for r in trace.rounds)


# ---- escaping ------------------------------------------------------------------------------

NASTY = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '" onmouseover="alert(1)',
    "' onclick='alert(1)",
    "javascript:alert(1)",
    "![x](javascript:alert(1))",
    "[link](javascript:alert(1))",
    "&amp; &lt;",
]


@pytest.mark.parametrize("nasty", NASTY)
def test_token_text_is_escaped(nasty):
    trace = make_trace([make_round(0, 0, [nasty, "ok"], accepted=1, target=nasty)])
    markup = render_trace(trace)
    doc = parse(markup)
    assert {tag for tag, _ in doc.tags} <= {"div", "span"}
    for _, attrs in doc.tags:
        assert not any(name.startswith("on") for name in attrs)
        assert set(attrs) <= {"class", "data-round", "title", "data-ws", "data-policy", "data-label"}
    assert doc.text == expected_text(trace)  # the token shows as the very same text


@pytest.mark.parametrize("nasty", NASTY)
def test_label_and_policy_are_escaped_in_attributes(nasty):
    trace = make_trace([make_round(0, 0, ["a"], accepted=1, target="b")], label=nasty, policy=nasty)
    doc = parse(render_trace(trace))
    container = doc.tags[0]
    assert container[0] == "div"
    assert container[1]["data-label"] == nasty
    assert container[1]["data-policy"] == nasty
    assert set(container[1]) == {"class", "data-policy", "data-label"}


@pytest.mark.parametrize("nasty", NASTY)
def test_plain_text_is_escaped(nasty):
    doc = parse(render_text(nasty + "\nline two"))
    assert [tag for tag, _ in doc.tags] == ["div"]
    assert doc.text == nasty + "\nline two"


def test_metrics_and_legend_produce_only_div_and_span():
    trace = sample_trace(label="<script>alert(1)</script>")
    doc = parse(metrics_html(trace, make_comparison([trace])))
    assert {tag for tag, _ in doc.tags} <= {"div", "span"}
    assert "<script>" not in metrics_html(trace, make_comparison([trace]))
    assert {tag for tag, _ in parse(LEGEND_HTML).tags} <= {"div", "span"}


# ---- structure -----------------------------------------------------------------------------


def test_span_classes_match_the_rounds():
    trace = sample_trace()
    spans = token_spans(render_trace(trace))
    counts = {kind: 0 for kind in ("accepted", "rejected", "correction", "bonus")}
    for attrs in spans:
        kinds = [c[4:] for c in attrs["class"].split() if c.startswith("tok-") and c != "tok-ws"]
        assert len(kinds) == 1
        counts[kinds[0]] += 1
    assert counts["accepted"] == sum(r.accepted for r in trace.rounds) == trace.accepted
    assert counts["rejected"] == sum(r.rejected for r in trace.rounds)
    assert counts["correction"] == sum(r.target_kind == "correction" for r in trace.rounds)
    assert counts["bonus"] == sum(r.target_kind == "bonus" for r in trace.rounds)
    assert counts == {"accepted": 5, "rejected": 4, "correction": 1, "bonus": 3}


def test_tokens_appear_in_order_with_round_and_tooltip():
    trace = sample_trace()
    spans = token_spans(render_trace(trace))
    assert [s["data-round"] for s in spans] == [
        str(r.index) for r in trace.rounds for _ in range(r.lookahead + (r.target_id is not None))
    ]
    assert spans[0]["title"] == "round 0 · draft p=0.90 · accepted"
    assert spans[2]["title"] == "round 0 · target's bonus token"
    assert spans[4]["title"] == "round 1 · draft p=0.80 · rejected"
    assert spans[6]["title"] == "round 1 · target's correction"


def test_round_wrappers_alternate_and_mark_current():
    trace = sample_trace()
    doc = parse(render_trace(trace, current_round=2))
    wrappers = [a for tag, a in doc.tags if tag == "span" and "round" in a["class"].split()]
    assert [w["data-round"] for w in wrappers] == ["0", "1", "2", "3", "4"]
    parity = [("round-even" in w["class"].split(), "round-odd" in w["class"].split()) for w in wrappers]
    assert parity == [(True, False), (False, True)] * 2 + [(True, False)]
    current = [w["data-round"] for w in wrappers if "round-current" in w["class"].split()]
    assert current == ["2"]
    assert "round-current" not in render_trace(trace)


def test_newlines_and_whitespace_are_kept_and_marked():
    trace = sample_trace()
    markup = render_trace(trace)
    doc = parse(markup)
    assert doc.text == expected_text(trace)
    assert ".\n" in doc.text and "\n" in doc.text
    ws = [a for a in token_spans(markup) if "tok-ws" in a["class"].split()]
    assert len(ws) == 1  # the lone "\n" bonus token; ".\n" has visible text already
    assert ws[0]["data-ws"] == "⏎"
    assert "<br" not in markup  # newlines are literal, shown by white-space: pre-wrap
    assert "white-space: pre-wrap" in TOKEN_CSS


def test_missing_display_text_falls_back_to_ids():
    r = Round(index=0, position=0, budget=2, draft_ids=[7, 8], draft_probs=[], accepted=1, target_id=9)
    doc = parse(render_trace(make_trace([r])))
    assert doc.text == "[7][8][9]"
    assert token_spans(render_trace(make_trace([r])))[0]["title"] == "round 0 · accepted"


def test_empty_trace_renders_an_empty_container():
    doc = parse(render_trace(make_trace([])))
    assert [tag for tag, _ in doc.tags] == ["div"]
    assert doc.text == ""


def test_css_is_readable_and_legend_covers_every_kind():
    assert "font-size: 17px" in TOKEN_CSS
    for kind in ("accepted", "rejected", "correction", "bonus", "pending"):
        assert f".tok-{kind}" in TOKEN_CSS
        assert f"tok-{kind}" in LEGEND_HTML
    assert legend_html() == LEGEND_HTML


# ---- metrics -------------------------------------------------------------------------------


def metric_values(markup: str) -> dict[str, str]:
    """data-metric name -> the element's own text, as a browser test would read it."""

    class Metrics(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.stack: list[str | None] = []
            self.values: dict[str, str] = {}

        def handle_starttag(self, tag, attrs):
            name = dict(attrs).get("data-metric")
            self.stack.append(name)
            if name:
                self.values[name] = ""

        def handle_endtag(self, tag):
            self.stack.pop()

        def handle_data(self, data):
            if self.stack and self.stack[-1]:
                self.values[self.stack[-1]] += data

    m = Metrics()
    m.feed(markup)
    return m.values


def test_metric_values_equal_the_trace():
    trace = sample_trace()
    comparison = make_comparison([trace], baseline_wall=3.0)
    values = metric_values(metrics_html(trace, comparison))
    assert int(values["target_passes"]) == trace.target_passes == 5
    assert int(values["draft_passes"]) == trace.draft_passes == 9
    assert int(values["new_tokens"]) == trace.new_tokens
    assert float(values["acceptance_rate"]) == pytest.approx(trace.acceptance_rate * 100, abs=0.05)
    assert float(values["mean_accepted_length"]) == pytest.approx(trace.mean_accepted_length, abs=0.005)
    assert float(values["wall_s"]) == pytest.approx(trace.wall_s)
    assert values["speedup"] == "1.50"
    assert values["lossless"] == "identical to target-only greedy"


def test_lossless_differs_and_sampled():
    differs = sample_trace(lossless=False, first_difference=7)
    values = metric_values(metrics_html(differs, make_comparison([differs])))
    assert values["first_difference"] == "7"
    assert "differs from position 7" in parse(metrics_html(differs, make_comparison([differs]))).text

    sampled = sample_trace(temperature=0.7, seed=42, lossless=None)
    text = parse(metrics_html(sampled, make_comparison([sampled]))).text
    assert "sampled (T=0.7, seed 42): compared by distribution, not token identity" in text

    unknown = sample_trace(lossless=None)
    assert metric_values(metrics_html(unknown, make_comparison([unknown])))["lossless"] == "checked after the target-only run"


# ---- summary table -------------------------------------------------------------------------


def test_summary_rows():
    static = sample_trace()
    dynamic = sample_trace(policy="dynamic", label="dynamic", lossless=False, first_difference=4,
                           wall_s=1.0)
    comparison = make_comparison([static, dynamic], baseline_wall=3.0)
    rows = summary_rows(comparison)
    assert len(SUMMARY_HEADERS) == 9
    assert all(len(row) == len(SUMMARY_HEADERS) for row in rows)
    assert rows[0] == ["target-only", 12, 12, 0, "—", 1.0, 3.0, "1.00x", "reference"]
    assert rows[1] == ["static k=3", static.new_tokens, 5, 9, "55.6%", 2.0, 2.0, "1.50x", "yes"]
    assert rows[2][0] == "dynamic"
    assert rows[2][7] == "3.00x"
    assert rows[2][8] == "no (from position 4)"


# ---- pending drafts ------------------------------------------------------------------------


def test_a_pending_draft_follows_the_judged_rounds_escaped_with_its_probability():
    trace = sample_trace()
    trace.pending = Pending([7, 8], [0.91, 0.35], ["<b>x</b>", " "])
    page = render_trace(trace)
    doc = parse(page)
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    pending = page[page.index("round-pending"):]
    assert pending.count("tok tok-pending") == 2 and 'data-round="5"' in pending
    assert "draft p=0.91 · pending" in pending and "draft p=0.35 · pending" in pending
    assert 'data-ws="␣"' in pending  # whitespace stays visible while pending too
    assert page.count("tok-pending") == 2 and doc.text.endswith("<b>x</b> ")
    assert "round-pending" not in render_trace(sample_trace())


def test_drafting_view_shows_the_rounds_before_judged_and_the_next_pending():
    trace = sample_trace()
    view = drafting_view(trace, 1)
    assert [r.index for r in view.rounds] == [0]
    assert view.pending == Pending(trace.rounds[1].draft_ids, trace.rounds[1].draft_probs, [" on", " a", " mat"])
    assert view.token_ids == trace.rounds[0].committed_ids and view.lossless is None
    assert drafting_view(trace, 3).pending is None  # round 3 drafted nothing
    whole = drafting_view(trace, 99)
    assert whole.rounds == trace.rounds and whole.pending is None and whole.token_ids == trace.token_ids
    assert trace.pending is None and len(trace.rounds) == 5  # the finished trace is untouched
