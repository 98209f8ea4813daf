"""UI glue without a browser or models: modes string, column HTML, status line, server options."""

from __future__ import annotations

import pytest

from specviz.errors import SpecVizError
from specviz.models import PRESETS
from specviz.policies import parse_modes
from specviz.trace import Baseline, Comparison, Round, Trace
from specviz.ui_helpers import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    POLICY_COLUMNS,
    column_htmls,
    column_title_html,
    done_message,
    load_examples,
    max_new_tokens_value,
    modes_string,
    next_policy,
    placeholder_html,
    preset_info,
    server_options,
    status_html,
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
    assert len(examples) == 4
    assert all(e.name and e.prompt.strip() for e in examples)


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
    assert 'data-state="running"' in running[0] and "running…" in running[0]
    assert all('data-state="waiting"' in h and "waiting…" in h for h in running[1:])
    idle = column_htmls(None, running=False, note="waiting…")
    assert all("waiting…" in h for h in idle)


def test_columns_fill_in_order():
    comparison = make_comparison(["static", "heuristic"])
    assert next_policy(comparison) == "dynamic"
    html = column_htmls(comparison)
    assert 'data-state="done"' in html[0] and 'data-state="done"' in html[1]
    assert "specviz-metrics" in html[0] and "tok-accepted" in html[0]
    assert 'data-state="running"' in html[2]
    assert 'data-state="waiting"' in html[3]
    stopped = column_htmls(comparison, running=False, note="stopped")
    assert "stopped" in stopped[2] and "stopped" in stopped[3]
    assert next_policy(make_comparison(POLICY_COLUMNS)) is None


def test_columns_escape_model_text():
    html = column_htmls(make_comparison(["static"]))[0]
    assert "<b>" not in html and "&lt;b&gt;" in html


def test_column_title_shows_settings_only():
    assert "k=5" in column_title_html("static", "static k=5")
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
