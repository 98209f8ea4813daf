"""UI glue without a browser or models: modes string, column HTML, status line, server options."""

from __future__ import annotations

import json

import pytest

from specviz.decoding.modes import parse_modes
from specviz.decoding.trace import Baseline, Comparison, Round, Trace
from specviz.errors import SpecVizError
from specviz.pair.presets import PRESETS
from specviz.ui.columns import (
    POLICY_COLUMNS,
    column_htmls,
    column_title_html,
    done_message,
    placeholder_html,
    preset_info,
    status_html,
)
from specviz.ui.files import load_examples
from specviz.ui.inputs import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    PAGE_WIDGETS,
    max_new_tokens_value,
    modes_string,
    server_options,
    ticked_columns,
)

# ---- fixtures ------------------------------------------------------------------------------


def make_trace(policy: str, label: str, texts=("a", "<b>"), accepted: int = 1) -> Trace:
    r = Round(index=0, position=0, budget=len(texts), draft_ids=[1, 2][: len(texts)],
              draft_probs=[0.9, 0.3][: len(texts)], accepted=accepted, target_id=7,
              draft_texts=list(texts), target_text="c")
    return Trace(policy=policy, label=label, params={}, token_ids=[1, 7], rounds=[r], wall_s=0.5,
                 stop_reason="max_new_tokens", lossless=True)


def make_comparison(policies=()) -> Comparison:
    labels = {"static": "static k=5", "heuristic": "heuristic k0=5", "dynamic": "dynamic t=0.4", "oracle": "oracle"}
    return Comparison(preset="p", prompt="<script>alert(1)</script>", max_new_tokens=2,
                      baseline=Baseline(token_ids=[1, 7], wall_s=1.0, stop_reason="max_new_tokens"),
                      traces=[make_trace(p, labels[p]) for p in policies], oracle_ideal=[1, 0])


# ---- modes ---------------------------------------------------------------------------------


def test_modes_string_defaults_match_parse_modes():
    text = modes_string()
    assert text == "static:5,heuristic:5,dynamic:0.4:20,oracle"
    specs = parse_modes(text)
    assert [s.policy for s in specs] == POLICY_COLUMNS
    assert specs[2].params == {"assistant_confidence_threshold": 0.4, "max_tokens": 20}


def test_modes_string_accepts_widget_floats():
    # gr.Number and gr.Slider hand over floats
    assert modes_string(3.0, 7.0, 0.25, 12.0) == "static:3,heuristic:7,dynamic:0.25:12,oracle"
    assert modes_string("4", 5, "0.5", 20) == "static:4,heuristic:5,dynamic:0.5:20,oracle"


@pytest.mark.parametrize("args, words", [
    ((0, 5, 0.4, 20), "Static k"),
    ((2.5, 5, 0.4, 20), "whole number"),
    ((None, 5, 0.4, 20), "whole number"),
    ((5, 65, 0.4, 20), "Heuristic"),
    ((5, 5, 1.5, 20), "between 0 and 1"),
    ((5, 5, float("nan"), 20), "number"),
    ((5, 5, "abc", 20), "number"),
    ((5, 5, 0.4, 0), "Dynamic max"),
    ((True, 5, 0.4, 20), "whole number"),
])
def test_modes_string_rejects_bad_settings(args, words):
    with pytest.raises(SpecVizError, match=words):
        modes_string(*args)


def test_max_new_tokens_value():
    assert max_new_tokens_value(48.0, 512) == 48
    with pytest.raises(SpecVizError, match="between 1 and 512"):
        max_new_tokens_value(600, 512)
    with pytest.raises(SpecVizError, match="whole number"):
        max_new_tokens_value(12.5, 512)


# ---- examples and presets ------------------------------------------------------------------


def test_examples_load():
    examples = load_examples()
    assert len(examples) == 7
    assert all(e.name and e.prompt.strip() and e.preset in PRESETS for e in examples)
    # the bundled pair shows a real win with a draft that costs nothing
    assert [e.draft for e in examples].count("lookup") == 1 and all(e.draft in ("model", "lookup") for e in examples)
    # The real pair's examples: a comparison with measured speedups, without any set-up or wait.
    assert [e.preset for e in examples].count("qwen2.5-coder-1.5b") >= 2


def test_examples_missing_file(tmp_path):
    assert load_examples(tmp_path / "none.json") == []


def test_preset_info():
    name = next(iter(PRESETS))
    assert preset_info(PRESETS, name) == PRESETS[name].description
    assert preset_info(PRESETS, "no-such-preset") == ""


# ---- columns -------------------------------------------------------------------------------


def test_columns_before_any_result():
    running = column_htmls(None)
    assert len(running) == 4
    assert all('data-state="waiting"' in h for h in running)
    assert all("waiting…" in h for h in running[:3]) and "first policy&#x27;s answer" in running[3]
    idle = column_htmls(None, running=False, note="waiting…")
    assert all("waiting…" in h for h in idle)


def test_columns_fill_in_order_and_the_running_one_streams():
    comparison = make_comparison(["static", "heuristic"])
    live = make_trace("dynamic", "dynamic t=0.4", texts=("x", "<y>"), accepted=1)
    html = column_htmls(comparison, live=live)
    assert 'data-state="done"' in html[0] and 'data-state="done"' in html[1]
    assert "specviz-metrics" in html[0] and "tok-accepted" in html[0]
    # The running column shows its rounds so far and live counters, but no final metrics yet.
    assert 'data-state="running"' in html[2] and "tok-accepted" in html[2] and "&lt;y&gt;" in html[2]
    assert 'data-live="target_passes">1<' in html[2] and 'data-live="draft_passes">2<' in html[2]
    assert "specviz-metrics" not in html[2]
    assert 'data-state="waiting"' in html[3]
    stopped = column_htmls(comparison, running=False, note="stopped")
    assert "stopped" in stopped[2] and "stopped" in stopped[3]


def test_columns_escape_model_text():
    html = column_htmls(make_comparison(["static"]))[0]
    assert "<b>" not in html and "&lt;b&gt;" in html


def test_column_title_shows_settings_only():
    assert "k=5" in column_title_html("static", "static k=5")
    assert "m=12" in column_title_html("costaware", "cost-aware m=12")
    assert "worth its price" in column_title_html("costaware", "cost-aware")  # no settings: its blurb
    assert "static k=5" not in column_title_html("static", "static k=5")
    assert "&lt;x&gt;" in column_title_html("static", "<x>")


def test_placeholder_escapes_note():
    assert "&lt;i&gt;" in placeholder_html("oracle", "skipped", "<i>")


# ---- status --------------------------------------------------------------------------------


def test_status_html_escapes():
    html = status_html("The prompt <script>x</script> is too long", "error")
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'data-state="error"' in html


def test_done_message():
    message = done_message(make_comparison(POLICY_COLUMNS))
    assert message.startswith("Done: 4 policies") and "identical" in message
    assert "<script>" not in message  # the prompt is never echoed
    partial = make_comparison(["static"])
    partial.partial = True
    assert "time budget" in done_message(partial)
    differing = make_comparison(POLICY_COLUMNS)
    differing.traces[0].lossless = False
    assert "1 policies differ" in done_message(differing)


# ---- server options ------------------------------------------------------------------------


def test_server_options_defaults():
    assert server_options([], {}) == (DEFAULT_HOST, DEFAULT_PORT, False)


def test_server_options_env_then_flags():
    env = {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "9000"}
    options = server_options([], env)
    assert (options.host, options.port, options.share) == ("0.0.0.0", 9000, False)
    options = server_options(["--host", "127.0.0.2", "--port", "9100", "--share"], env)
    assert (options.host, options.port, options.share) == ("127.0.0.2", 9100, True)


def test_server_options_bad_port():
    with pytest.raises(SystemExit):
        server_options([], {"GRADIO_SERVER_PORT": "http"})
    with pytest.raises(SystemExit):
        server_options(["--port", "70000"], {})


# ---- explorer: extra columns, sampling, replay, import ---------------------------------------

from specviz.decoding.policies import CostAware, DraftStep, PassCosts
from specviz.ui.columns import ORACLE_SAMPLED_NOTE, active_columns
from specviz.ui.files import comparison_from_text, load_comparison_file
from specviz.ui.inputs import seed_value, temperature_value
from specviz.ui.replay import replay_html, replay_step, stop_reason


def widgets(**optional: float) -> list[object]:
    """The page's settings widgets' values at their defaults, with the named optional columns
    ticked and their first setting at the given value."""
    values: list[object] = []
    for widget in PAGE_WIDGETS:
        if widget.setting is None:
            values.append(widget.policy in optional)
        elif widget.policy in optional:
            values.append(optional[widget.policy])
        else:
            values.append(widget.setting.default)
    return values


def test_the_page_settings_widgets_come_from_the_registry_in_its_order():
    assert [w.elem_id for w in PAGE_WIDGETS] == [
        "static-k", "heuristic-k", "dynamic-threshold", "dynamic-max", "adaptive-on", "adaptive-t0",
        "entropy-on", "entropy-h", "costaware-on", "costaware-max"]
    assert ticked_columns(*widgets(costaware=20, adaptive=0.4)) == ["adaptive", "costaware"]


def test_modes_string_with_optional_columns():
    text = modes_string(*widgets(adaptive=0.4, entropy=1.0))
    assert text == "static:5,heuristic:5,dynamic:0.4:20,oracle,adaptive:0.4:20,entropy:1:20"
    specs = parse_modes(text)
    assert [s.policy for s in specs] == POLICY_COLUMNS + ["adaptive", "entropy"]
    assert specs[4].params["assistant_confidence_threshold"] == 0.4
    assert specs[5].params["max_entropy"] == 1.0
    assert modes_string(*widgets(entropy=0.5)) == "static:5,heuristic:5,dynamic:0.4:20,oracle,entropy:0.5:20"
    assert active_columns({"adaptive"}) == POLICY_COLUMNS + ["adaptive"]
    assert modes_string(*widgets(costaware=12.0)).endswith(",oracle,costaware:12")
    assert parse_modes(modes_string(*widgets(costaware=20)))[-1].params == {"max_tokens": 20}
    assert active_columns({"entropy", "costaware"}) == POLICY_COLUMNS + ["entropy", "costaware"]
    with pytest.raises(SpecVizError, match="Cost-aware max tokens"):
        modes_string(*widgets(costaware=0))
    with pytest.raises(SpecVizError, match="adaptive start threshold"):
        modes_string(*widgets(adaptive=1.5))
    with pytest.raises(SpecVizError, match="entropy bound"):
        modes_string(*widgets(entropy=-1))


def test_temperature_and_seed_values():
    assert temperature_value(None) == 0.0 and temperature_value(0.8) == 0.8
    assert seed_value(None) is None and seed_value(3.0) == 3
    with pytest.raises(SpecVizError, match="temperature"):
        temperature_value(5)
    with pytest.raises(SpecVizError, match="seed"):
        seed_value(-1)
    with pytest.raises(SpecVizError, match="whole number"):
        seed_value(1.5)


def _round(**kw) -> Round:
    base = {"index": 0, "position": 0, "budget": 3, "draft_ids": [1, 2, 3], "draft_probs": [0.9, 0.8, 0.7],
            "accepted": 3, "target_id": 4, "draft_entropies": [0.1, 0.2, 0.3]}
    base.update(kw)
    return Round(**base)


def _trace(policy="static", params=None, rounds=()) -> Trace:
    return Trace(policy=policy, label=policy, params=params or {}, token_ids=[], rounds=list(rounds), wall_s=1.0,
                 stop_reason="max_new_tokens")


def test_stop_reason_budget_threshold_entropy_eos():
    assert stop_reason(_round(), _trace()).code == "budget"
    assert "3 tokens" in stop_reason(_round(), _trace()).text
    dyn = _trace("dynamic", {"assistant_confidence_threshold": 0.75})
    low = _round(budget=20, threshold=0.75)
    reason = stop_reason(low, dyn)
    assert reason.code == "threshold" and "0.70" in reason.text and "0.75" in reason.text
    ent = _trace("entropy", {"max_entropy": 0.25, "max_tokens": 20})
    assert stop_reason(_round(budget=20), ent).code == "entropy"
    assert stop_reason(_round(budget=20), _trace(), eos_ids={3}).code == "eos"
    assert stop_reason(_round(budget=20), _trace()).code == "eos"  # imported: nothing else explains it
    assert stop_reason(_round(budget=20), _trace(), eos_ids={99}).code == "none"
    assert stop_reason(_round(budget=0, draft_ids=[], draft_probs=[], accepted=0), _trace()).code == "budget"
    # The threshold wins over the budget when both would stop the round (the policy said stop).
    assert stop_reason(_round(threshold=0.75), dyn).code == "threshold"


def test_replay_step_data():
    rounds = [
        _round(index=0, position=0, accepted=3, draft_texts=["a", "b", "c"], target_text="D"),
        _round(index=1, position=4, accepted=1, target_id=9, draft_texts=["e", "<f>", "g"], target_text="H"),
        _round(index=2, position=6, budget=2, draft_ids=[5], draft_probs=[0.2], draft_entropies=[2.0],
               accepted=0, target_id=8, draft_texts=["i"], target_text="J"),
    ]
    trace = _trace(rounds=rounds)
    first = replay_step(trace, 0)
    assert first.context == "" and first.target_passes == 1 and first.draft_passes == 3
    assert [t.verdict for t in first.tokens] == ["accepted"] * 3 and first.added_kind == "bonus"
    second = replay_step(trace, 1)
    assert second.context == "abcD"
    assert [t.verdict for t in second.tokens] == ["accepted", "rejected", "discarded"]
    assert second.added_text == "H" and second.added_kind == "correction"
    assert (second.target_passes, second.draft_passes) == (2, 6)
    third = replay_step(trace, 99)  # clamped
    assert third.index == 2 and third.context == "abcDeH" and third.stop.code == "eos"
    assert replay_step(trace, -5).index == 0
    page = replay_html(second)
    assert "&lt;f&gt;" in page and "<f>" not in page
    # Draft, then verdict: every draft token and every verdict carries the reveal animation.
    assert page.count("replay-reveal") == 3 and page.count('class="replay-verdict"') == 3
    assert "replay-line replay-verdict" in page
    assert 'data-replay="round">2<' in page and 'data-replay="draft_passes">6<' in page
    with pytest.raises(SpecVizError):
        replay_step(_trace(rounds=[]), 0)


def test_sampled_columns_note_the_oracle():
    c = make_comparison(["static", "heuristic", "dynamic"])
    c.temperature = 0.8
    for t in c.traces:
        t.temperature, t.lossless = 0.8, None
    htmls = column_htmls(c, running=False)
    assert "greedy idea" in htmls[3] and ORACLE_SAMPLED_NOTE[:20] in htmls[3]
    assert 'data-value="sampled"' in htmls[0]
    assert "distribution" in done_message(c) and "identical" not in done_message(c)


def test_import_rejects_bad_files(tmp_path):
    with pytest.raises(SpecVizError, match="not valid JSON"):
        comparison_from_text("{nope")
    with pytest.raises(SpecVizError, match="not a SpecViz comparison"):
        comparison_from_text('{"a": 1}')
    with pytest.raises(SpecVizError, match="not a SpecViz comparison"):
        comparison_from_text("[1, 2]")
    data = make_comparison(["static"]).to_dict()
    data["modes"][0]["rounds"][0]["accepted"] = 9
    with pytest.raises(SpecVizError, match="damaged"):
        comparison_from_text(json.dumps(data))
    data["modes"][0]["rounds"] = "x"
    with pytest.raises(SpecVizError, match="damaged"):
        comparison_from_text(json.dumps(data))
    big = tmp_path / "big.json"
    big.write_text(" " * 2000)
    with pytest.raises(SpecVizError, match="too large"):
        load_comparison_file(big, max_bytes=1000)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SpecVizError, match="UTF-8"):
        load_comparison_file(binary)
    with pytest.raises(SpecVizError, match="No file"):
        load_comparison_file(None)
    good = tmp_path / "good.json"
    good.write_text(make_comparison(["static", "oracle"]).to_json())
    assert [t.label for t in load_comparison_file(good).traces] == ["static k=5", "oracle"]


def test_json_round_trip_shows_the_same_view(tiny_pair):
    """A comparison exported as JSON and imported again renders exactly as before."""
    from specviz.decoding.engine import generate, target_only
    from specviz.decoding.modes import make_policy
    from specviz.decoding.trace import DraftAlongReference
    from specviz.ui.columns import ALL_COLUMNS
    from specviz.ui.render import summary_rows

    prompt = [1, 2, 3]
    baseline = target_only(tiny_pair, prompt, 24)
    traces = []
    for spec in parse_modes("static:4,heuristic:3,dynamic:0.4:8,adaptive:0.4:8,entropy:1.0:8"):
        trace = generate(tiny_pair, prompt, make_policy(spec), 24)
        for r in trace.rounds:  # display text with characters that need escaping
            r.draft_texts = [f"<{t}>&" for t in r.draft_ids]
            r.target_text = None if r.target_id is None else f'"{r.target_id}"'
        trace.lossless = trace.token_ids == baseline.token_ids
        traces.append(trace)
    before = Comparison(preset="tiny", prompt="<b>p</b>", max_new_tokens=24, baseline=baseline, traces=traces,
                        prompt_tokens=3, oracle_ideal=[1] * 24,
                        draft_along_reference=DraftAlongReference([1] * 24, [0.5] * 24, [0.7] * 24))
    after = comparison_from_text(before.to_json())
    assert column_htmls(after, running=False, order=ALL_COLUMNS) == \
        column_htmls(before, running=False, order=ALL_COLUMNS)
    assert summary_rows(after) == summary_rows(before)
    for t_before, t_after in zip(before.traces, after.traces):
        for i in range(len(t_before.rounds)):
            assert replay_html(replay_step(t_after, i)) == replay_html(replay_step(t_before, i))
    assert after.to_json() == before.to_json()


# ---- examples computed ahead ---------------------------------------------------------------


def test_every_shipped_example_loads_is_lossless_and_has_the_current_schema():
    from specviz.ui.files import example_comparison

    examples = load_examples()
    assert examples and all(e.comparison_path is not None for e in examples)
    for example in examples:
        comparison = example_comparison(example)
        assert comparison is not None, example.name
        assert comparison.prompt == example.prompt and not comparison.partial
        assert comparison.preset == example.preset, example.name
        assert [t.policy for t in comparison.traces] == POLICY_COLUMNS
        assert all(t.lossless is True for t in comparison.traces), example.name
        assert all(t.token_ids == comparison.baseline.token_ids for t in comparison.traces)
        oracle = comparison.trace("oracle")
        assert all(r.accepted == r.lookahead for r in oracle.rounds), "every oracle round accepts all it drafts"
        assert set(comparison.provenance) >= {"date", "machine", "command"}
        # The stored file is exactly what today's code writes for this comparison: same schema.
        stored = json.loads(example.comparison_path.read_text(encoding="utf-8"))
        assert comparison.to_dict() == stored, f"{example.name}: regenerate with scripts/make_examples.py"


def test_an_example_plays_back_round_by_round_before_it_is_shown_whole():
    from specviz.ui.columns import playback_htmls
    from specviz.ui.files import example_comparison

    comparison = example_comparison(load_examples()[0])
    order = POLICY_COLUMNS
    frames = list(playback_htmls(comparison, order, 6))
    assert len(frames) == 6 and all(len(htmls) == len(order) for htmls in frames)
    for column, policy in enumerate(order):
        trace = next(t for t in comparison.traces if t.policy == policy)
        shown = [htmls[column].count('<span class="round ') - htmls[column].count("round-pending")
                 for htmls in frames]
        assert shown == [len(trace.rounds) * step // 6 for step in range(6)], policy
        assert all('data-state="replaying"' in htmls[column] and "specviz-metrics" not in htmls[column]
                   for htmls in frames)
    assert all("tok-pending" in htmls[0] for htmls in frames)  # static drafts every round


def test_the_status_estimates_a_runs_duration_where_the_pair_was_measured():
    from specviz.ui.columns import expected_duration

    # 0.5 s per token and run on the real pair (the study: 0.46-0.57 per suite): four policies and
    # target-only, 128 tokens
    assert expected_duration("qwen2.5-coder-1.5b", 128, 5) == " (about 5 min in all)"
    assert expected_duration("smollm2-135m-int8", 48, 5) == " (about 17 s in all)"
    assert expected_duration("smollm2-1.7b", 128, 5) == ""  # a hub pair: not measured here
    assert expected_duration("not-a-preset", 128, 5) == ""


def test_the_views_handler_answers_every_output_it_is_wired_to():
    """views() returns one value per output of its event, before any comparison too (a count off by
    one is only a warning in Gradio's log, and a chart left unfilled)."""
    from specviz.ui.events import views
    from specviz.ui.page import build_demo

    wired = [f for f in build_demo().fns.values() if getattr(f.fn, "__name__", "") == "views"]
    assert wired
    for function in wired:
        assert len(views(None, [])) == len(function.outputs)


def test_each_event_is_wired_to_the_outputs_its_handler_answers_by_name():
    """The page wires Run, an import, an example, Stop and the views to the components named in
    outputs.py, in that order, so a handler's answer built by name lands where it belongs."""
    from specviz.ui.outputs import COMPARISON_OUTPUTS, EXAMPLE_OUTPUTS, STOP_OUTPUTS, VIEW_OUTPUTS
    from specviz.ui.page import build_demo

    expected = {"run": COMPARISON_OUTPUTS, "import_json": COMPARISON_OUTPUTS, "open_example": EXAMPLE_OUTPUTS,
                "stop": STOP_OUTPUTS, "views": VIEW_OUTPUTS}
    seen = set()
    for function in build_demo().fns.values():
        name = getattr(function.fn, "__name__", "")
        if name in expected:
            seen.add(name)
            assert len(function.outputs) == len(expected[name]), name
    assert seen == set(expected) - ({"open_example"} if not load_examples() else set())


def test_an_answer_by_name_fills_every_output_it_does_not_name_with_a_skip():
    import gradio as gr

    from specviz.ui.outputs import Group, Outputs

    outputs = Outputs("status", Group("columns", 2), "plot")
    answer = outputs.answer(columns=["a", "b"], plot=None)
    assert answer == (gr.skip(), "a", "b", None)  # None is sent: it clears the plot
    assert outputs.read(answer) == {"status": gr.skip(), "columns": ["a", "b"], "plot": None}
    assert outputs.answer() == (gr.skip(),) * len(outputs) and len(outputs) == 4
    with pytest.raises(TypeError):
        outputs.answer(colums=["a", "b"])  # a name not among the outputs
    with pytest.raises(ValueError):
        outputs.answer(columns=["a"])  # a group of the wrong size
    page = type("Page", (), {"status": 1, "columns": [2, 3], "plot": 4})()
    assert outputs.components(page) == [1, 2, 3, 4]


def _cost_aware_trace() -> Trace:
    """A cost-aware run of two rounds on a pair where a draft call costs 2 ms and a window is about
    one pass: it drafts (a sure first token is worth it), the target takes two of three, then a
    token at 0.05 is not worth its price."""
    prices = {"draft_call_ms": 2.0, "target_ms": [10.0, 10.1, 10.2, 10.3, 10.4, 10.5]}
    rule = CostAware(PassCosts(2.0, tuple(prices["target_ms"])), max_tokens=5)
    rounds = []
    for index, (position, probs, accepted) in enumerate([(0, [0.9, 0.9, 0.05], 2), (3, [0.9, 0.05], 1)]):
        rule.start_round(position)
        stop = next(i for i, p in enumerate(probs) if not rule.keep_drafting(DraftStep(i, 1, p))) + 1
        assert stop == len(probs)  # the scripted rounds are what the rule would have drafted
        rule.end_round(len(probs), accepted, probs)
        rounds.append(_round(index=index, position=position, budget=5, draft_ids=[1] * len(probs), draft_probs=probs,
                             accepted=accepted, draft_entropies=[0.1] * len(probs), draft_s=0.004, verify_s=0.01,
                             oracle_ideal=accepted))
    return _trace("costaware", {"max_tokens": 5, "prices": prices}, rounds)


def test_the_cost_aware_round_chart_and_its_stop_reason():
    from specviz.explain.analysis import rule_rounds
    from specviz.ui.explain_plots import rule_round_figure

    assert rule_rounds(None) == [] and rule_rounds(_trace("dynamic")) == []  # a run without the rule: no chart
    trace = _cost_aware_trace()
    seen = rule_rounds(trace)
    assert [len(r.decisions) for r in seen] == [3, 2]  # the plan drafts the first token, then a choice after each
    first = seen[0]
    assert first.plan.drafts and [d.drafts for d in first.decisions] == [True, True, False]
    assert first.expected_per_s()[0] == pytest.approx(1 / 10.0 * 1000)  # plain decoding: one token a pass
    series = {t.meta["series"]: t for t in rule_round_figure(first).data}
    assert set(series) >= {"marginal", "expected", "plan", "rate", "plain", "stop", "ideal", "actual"}
    assert list(series["marginal"].x) == [2, 3, 4] and list(series["plan"].x) == [first.plan.window]
    assert list(series["stop"].x) == [3, 3] and list(series["ideal"].x) == [2, 2]
    assert series["actual"].y[0] == pytest.approx(3 / 14 * 1000)  # 3 tokens in 4 + 10 ms
    reason = stop_reason(trace.rounds[1], trace)
    assert reason.code == "price" and "token 3 was not worth its price" in reason.text


def test_downloads_keep_only_the_newest_folders_and_never_reuse_one(tmp_path):
    """Each shown comparison writes its downloads (about 40 MB) to a fresh folder; a folder per
    export that nobody removed once filled CI's disk, so only the newest few stay."""
    from specviz.ui.export import ExportFolders

    folders = ExportFolders(kept=2, parent=tmp_path)
    made = [folders.new() for _ in range(5)]
    assert len(set(made)) == 5
    assert [f.exists() for f in made] == [False, False, False, True, True]
    assert len(list(tmp_path.iterdir())) == 1  # one root for the process
