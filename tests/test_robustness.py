"""Issue 6, in process: hostile and odd input through the app's own `run` handler.

`events.run` is the generator Gradio calls for "Run" (scripts use the `/compare` endpoint). It is driven here
directly; its last output is what the page finally shows. Every
bad input must end with a status line in the error state that says what is wrong, no traceback,
and the next valid request must still work. Widget-level limits (slider minimum, number box
minimum/maximum, dropdown choices) are enforced by Gradio before the handler runs; those are
tested against a running app in test_robustness_server.py.
"""

from __future__ import annotations

import dataclasses
import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

GOOD = {"prompt": "Name a fruit.", "preset": "smollm2-135m-int8", "max_new_tokens": 8, "static_k": 5,
        "heuristic_k": 5, "dynamic_threshold": 0.4, "dynamic_max": 20}


def run_app(**overrides) -> tuple:
    """The last output of events.run for GOOD with `overrides` (a settings widget by its page id,
    "static_k" for #static-k): (status html, column htmls)."""
    from specviz.ui import events
    from specviz.ui.inputs import DRAFT_WIDGETS, PAGE_WIDGETS
    from specviz.ui.outputs import COMPARISON_OUTPUTS

    given = {**GOOD, **overrides}
    settings = [given.get(w.elem_id.replace("-", "_"), w.setting.default if w.setting else False)
                for w in PAGE_WIDGETS]
    drafts = [w.setting.default for w in DRAFT_WIDGETS]  # the draft model runs: its boxes at their defaults
    outputs = None
    for outputs in events.run(None, given["prompt"], given["preset"], given["max_new_tokens"], 0, None, "model",
                              *drafts, *settings):
        pass
    assert outputs is not None
    shown = COMPARISON_OUTPUTS.read(outputs)
    columns = [c for c in shown["columns"] if isinstance(c, str) and 'class="specviz-column"' in c]
    return shown["status"], columns


def state_of(status: str) -> str:
    match = re.search(r'data-state="([a-z]+)"', status)
    assert match, status
    return match.group(1)


def message_of(status: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", status))


class AnswerText(HTMLParser):
    """The answer a policy column shows: accepted, correction and bonus tokens, in order."""

    def __init__(self):
        super().__init__()
        self.parts: list[str] = []
        self._stack: list[bool] = []

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        keep = "tok" in classes and "tok-rejected" not in classes
        self._stack.append(keep)

    def handle_endtag(self, tag):
        if self._stack:
            self._stack.pop()

    def handle_data(self, data):
        if self._stack and self._stack[-1]:
            self.parts.append(data)


def answer_text(column_html: str) -> str:
    parser = AnswerText()
    parser.feed(column_html)
    return "".join(parser.parts).replace("<|im_end|>", "")


# ---- fast: rejected before any model work -------------------------------------------------------


@pytest.mark.parametrize("overrides, says", [
    ({"prompt": ""}, "The prompt is empty"),
    ({"prompt": "   \n\t  "}, "The prompt is empty"),
    ({"prompt": "\x00\x00"}, "The prompt is empty"),
    ({"prompt": None}, "The prompt is empty"),
    ({"max_new_tokens": 0}, "Max new tokens must be between 1 and"),
    ({"max_new_tokens": -5}, "Max new tokens must be between 1 and"),
    ({"max_new_tokens": 10**9}, "Max new tokens must be between 1 and"),
    ({"max_new_tokens": 7.5}, "Max new tokens must be a whole number"),
    ({"max_new_tokens": float("nan")}, "Max new tokens must be a whole number"),
    ({"max_new_tokens": None}, "Max new tokens is empty: enter a whole number"),
    ({"dynamic_threshold": -0.1}, "dynamic threshold must be between 0 and 1"),
    ({"dynamic_threshold": 1.5}, "dynamic threshold must be between 0 and 1"),
    ({"dynamic_threshold": float("inf")}, "dynamic threshold must be a number"),
    ({"static_k": 0}, "Static k must be between 1 and"),
    ({"static_k": 1000}, "Static k must be between 1 and"),
    ({"heuristic_k": 0}, "Heuristic starting k must be between 1 and"),
    ({"heuristic_k": 1000}, "Heuristic starting k must be between 1 and"),
    ({"dynamic_max": 0}, "Dynamic max tokens must be between 1 and"),
    ({"dynamic_max": 1000}, "Dynamic max tokens must be between 1 and"),
    ({"preset": "gpt-17"}, "Unknown preset 'gpt-17'"),
    ({"preset": "../../etc/passwd"}, "Unknown preset '../../etc/passwd'"),
    ({"preset": "/tmp|/etc"}, "Unknown preset"),
    ({"preset": "Qwen/Qwen2.5-0.5B-Instruct|Qwen/Qwen2.5-0.5B-Instruct"}, "Unknown preset"),
    ({"preset": None}, "The preset must be a name"),
])
def test_bad_input_ends_in_a_clear_error_status(overrides, says):
    status, columns = run_app(**overrides)
    assert state_of(status) == "error", status
    assert says in message_of(status), message_of(status)
    assert "Traceback" not in status
    assert columns and all('data-state="running"' not in c for c in columns), "a column still says running"


def test_the_cap_follows_the_environment(monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "20")
    status, _ = run_app(max_new_tokens=21)
    assert state_of(status) == "error" and "between 1 and 20, got 21" in message_of(status)


def test_hub_ids_only_behind_the_switch(monkeypatch):
    monkeypatch.delenv("SPECVIZ_ALLOW_HUB_MODELS", raising=False)
    status, _ = run_app(preset="Qwen/Qwen2.5-0.5B-Instruct|Qwen/Qwen2.5-0.5B-Instruct")
    assert "Unknown preset" in message_of(status)
    monkeypatch.setenv("SPECVIZ_ALLOW_HUB_MODELS", "1")
    for bad in ("../x|a/b", "/etc/passwd|a/b", "a/b|~/models/x", "a/..|a/b"):
        status, _ = run_app(preset=bad)
        assert state_of(status) == "error" and "is not a hub model id" in message_of(status), bad


def test_nothing_loads_remote_code():
    """No model is ever loaded with trust_remote_code=True, anywhere in the package or the app."""
    offenders = []
    for path in [ROOT / "app.py", *sorted((ROOT / "specviz").rglob("*.py"))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"trust_remote_code\s*=\s*(?!False\b)", line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []


# ---- slow: the real bundled pair ---------------------------------------------------------------


@pytest.mark.slow
def test_too_long_prompts_get_the_limit_message(bundled_pair, monkeypatch):
    status, _ = run_app(prompt="The quick brown fox. " * 5000)  # 105 kB
    assert state_of(status) == "error"
    assert re.search(r"The prompt is \d+ tokens long; this server accepts at most 2048 prompt tokens",
                     message_of(status)), message_of(status)
    # Longer than the model's context (8192) when the prompt limit allows more: the context wins.
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "100000")
    status, _ = run_app(prompt="word " * 9000)
    assert state_of(status) == "error" and "context 8192" in message_of(status), message_of(status)
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "5")
    status, _ = run_app(prompt="Please name one fruit that is red.")
    assert state_of(status) == "error" and "at most 5 prompt tokens" in message_of(status)


@pytest.mark.slow
def test_odd_characters_just_work_and_the_app_keeps_serving(bundled_pair):
    """Control characters, NUL, right-to-left text, emoji and combining marks: a normal run."""
    status, _ = run_app(prompt="")
    assert state_of(status) == "error"
    odd = ("Translate:\x00 \x01\x07\x1b[31m \u202eשלום עולם\u202c مرحبا 👩‍👩‍👧‍👦🔭 e\u0301\u0301\u0301 "
           "Z\u0351\u0352\u0353a\u0300lgo\x7f \ufeff\ud7ff")
    status, columns = run_app(prompt=odd)
    assert state_of(status) == "done", message_of(status)
    assert len([c for c in columns if 'data-state="done"' in c]) == 4
    texts = {answer_text(c) for c in columns if 'data-state="done"' in c}
    assert len(texts) == 1, texts  # lossless: every column shows the same answer


@pytest.mark.slow
def test_eos_as_the_first_token_gives_empty_answers_with_correct_counts(bundled_pair, monkeypatch):
    """The pair's end-of-sequence set is made to contain the first greedy token of the prompt's
    answer, so every run stops at once: one target pass, one token (the EOS), an empty answer."""
    from specviz.decoding.engine import target_only
    from specviz.decoding.pipeline import Limits, compare, make_request
    from specviz.pair.models import encode_prompt

    ids = encode_prompt(bundled_pair, GOOD["prompt"])
    first = target_only(bundled_pair, ids, 1).token_ids[0]
    stopping = dataclasses.replace(bundled_pair, eos_token_ids=frozenset({first}))

    comparison = compare(stopping, make_request(GOOD["prompt"], "static:5,heuristic:5,dynamic:0.4:20,oracle", 16),
                         Limits())
    assert comparison.baseline.token_ids == [first] and comparison.baseline.stop_reason == "eos"
    assert len(comparison.traces) == 4
    for trace in comparison.traces:
        assert trace.token_ids == [first], trace.label
        assert trace.stop_reason == "eos" and trace.target_passes == 1 and trace.lossless is True, trace.label

    from specviz.decoding import pipeline
    from specviz.ui import turns

    monkeypatch.setattr(turns, "wait_for_pair", lambda name: iter([stopping]))
    monkeypatch.setattr(pipeline, "get_pair", lambda name: stopping)  # what run_preset runs on
    status, columns = run_app(max_new_tokens=16)
    assert state_of(status) == "done", message_of(status)
    done = [c for c in columns if 'data-state="done"' in c]
    assert len(done) == 4
    for column in done:
        assert 'data-metric="target_passes">1<' in column.replace(" ", "") or re.search(
            r'data-metric="target_passes"[^>]*>\s*1\s*<', column), column
        assert re.search(r'data-metric="new_tokens"[^>]*>\s*1\s*<', column), column


@pytest.mark.slow
def test_a_tiny_time_budget_shows_partial_results_marked_partial(bundled_pair, monkeypatch):
    monkeypatch.setenv("SPECVIZ_TIME_BUDGET_S", "0.5")
    status, columns = run_app(max_new_tokens=64)
    assert state_of(status) == "warning", message_of(status)
    assert "time budget ran out" in message_of(status)
    assert any("not run: time budget ran out" in c for c in columns)
    assert all('data-state="running"' not in c for c in columns)
    monkeypatch.delenv("SPECVIZ_TIME_BUDGET_S")
    status, _ = run_app()  # and the next request is whole again
    assert state_of(status) == "done", message_of(status)



@pytest.mark.slow
def test_a_stopped_run_ends_by_itself_and_its_last_message_says_stopped(bundled_pair):
    """Stop does not cancel the run through Gradio (an update sent just before could reach the page
    after Stop's own answer and replace "Stopped", as it once did in CI): the run sees the Stop at
    its next step and its next message, its last, says "Stopped"; the models are free again."""
    from types import SimpleNamespace

    import gradio as gr

    from specviz.ui import events, server_state
    from specviz.ui.inputs import DRAFT_WIDGETS, PAGE_WIDGETS
    from specviz.ui.outputs import COMPARISON_OUTPUTS, STOP_OUTPUTS

    alice = SimpleNamespace(session_hash="alice")
    settings = [w.setting.default if w.setting else False for w in PAGE_WIDGETS]
    drafts = [w.setting.default for w in DRAFT_WIDGETS]
    outputs = events.run(alice, GOOD["prompt"], GOOD["preset"], 64, 0, None, "model", *drafts, *settings)
    for shown in map(COMPARISON_OUTPUTS.read, outputs):
        if "Running" in message_of(shown["status"]):
            break
    else:
        pytest.fail("the run never streamed")
    answer = events.stop(None, alice)
    assert len(answer) == len(STOP_OUTPUTS)
    assert all(isinstance(o, type(gr.skip())) for o in answer)  # the page is the run's to update
    after = [COMPARISON_OUTPUTS.read(o)["status"] for o in outputs]
    assert len(after) == 1, [message_of(status) for status in after]
    assert state_of(after[0]) == "warning" and "Stopped" in message_of(after[0])
    assert server_state.TURNS.waiting() == 0
    status, _ = run_app()  # the next visitor's run is whole
    assert state_of(status) == "done", message_of(status)
    stopped = STOP_OUTPUTS.read(events.stop(None, alice))
    assert "Stopped" in message_of(stopped["status"])  # nothing to stop: Stop says it itself


# ---- limits from the environment ---------------------------------------------------------------


@pytest.mark.parametrize("raw", ["", "abc", "0", "-3", "nan", " "])
def test_a_bad_limit_in_the_environment_means_the_default(monkeypatch, raw):
    from specviz.decoding.pipeline import Limits

    for name in ("SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_TIME_BUDGET_S", "SPECVIZ_QUEUE_SIZE"):
        monkeypatch.setenv(name, raw)
    assert Limits.from_env() == Limits()


def test_limits_are_read_from_the_environment(monkeypatch):
    from specviz.decoding.pipeline import Limits

    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", "64")
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "100")
    monkeypatch.setenv("SPECVIZ_TIME_BUDGET_S", "2.5")
    monkeypatch.setenv("SPECVIZ_QUEUE_SIZE", "3")
    assert Limits.from_env() == Limits(max_new_tokens=64, max_prompt_tokens=100, time_budget_s=2.5, queue_size=3)


def test_a_slow_pairs_request_gets_a_time_budget_it_can_finish_in():
    from specviz.decoding.pipeline import Limits
    from specviz.ui.turns import expected_seconds

    limits = Limits(time_budget_s=300)
    assert limits.allowing(None) == limits and limits.allowing(0) == limits
    assert limits.allowing(60).time_budget_s == 300  # a quick pair keeps the configured budget
    real = expected_seconds("qwen2.5-coder-1.5b", 128, 5)  # about 4 min on 2 cores
    assert limits.allowing(real).time_budget_s == pytest.approx(1.5 * real) and 1.5 * real > 300
    assert limits.allowing(10_000).time_budget_s == 1200  # at most four times the budget
    assert limits.allowing(real).max_new_tokens == limits.max_new_tokens


@pytest.mark.parametrize("cap", ["1", "10", "16", "17"])
def test_the_app_builds_with_any_token_cap(monkeypatch, cap):
    """A cap below the slider's usual minimum (16) must not stop the app from starting."""
    from specviz.ui.page import build_demo

    monkeypatch.setenv("SPECVIZ_MAX_NEW_TOKENS", cap)
    monkeypatch.setenv("SPECVIZ_QUEUE_SIZE", "not-a-number")
    demo = build_demo()
    slider = next(c for c in demo.blocks.values() if getattr(c, "elem_id", None) == "max-new-tokens")
    assert slider.maximum == int(cap) and slider.minimum < slider.maximum


def test_every_setting_in_the_code_is_in_the_limits_table():
    code = (ROOT / "app.py").read_text() + "".join(p.read_text() for p in (ROOT / "specviz").rglob("*.py"))
    used = set(re.findall(r"SPECVIZ_[A-Z_]+", code)) - {"SPECVIZ_"}
    setup = (ROOT / "docs" / "SETUP.md").read_text()
    table = setup[setup.index("## Limits"):].split("\n## ")[0]
    documented = set(re.findall(r"`(SPECVIZ_[A-Z_]+)`", table))
    assert used <= documented, f"not in docs/SETUP.md's Limits table: {sorted(used - documented)}"
    from specviz.decoding.pipeline import Limits

    for name, default in [("SPECVIZ_MAX_NEW_TOKENS", Limits.max_new_tokens),
                          ("SPECVIZ_MAX_PROMPT_TOKENS", Limits.max_prompt_tokens),
                          ("SPECVIZ_TIME_BUDGET_S", int(Limits.time_budget_s)),
                          ("SPECVIZ_QUEUE_SIZE", Limits.queue_size)]:
        assert re.search(rf"\| `{name}` \| {default} \|", table), name


# ---- the bundled cache: rebuilt when corrupt or half-written, never in a loop -------------------


@pytest.mark.parametrize("damage", ["missing", "half-written", "corrupt", "corrupt-twice"])
def test_the_bundled_cache_is_rebuilt_once_when_damaged(tmp_path, monkeypatch, damage):
    """The retry logic of `weights.load_bundled_target` with the unpacking and loading faked (fast); the real
    rebuild from the GGUF is tests/test_models_cache.py."""
    import transformers

    from specviz.pair import weights

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(weights.importlib.util, "find_spec", lambda name: object())  # the package is there
    folder = tmp_path / weights.BUNDLED_CACHE_NAME
    if damage != "missing":
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    if damage.startswith("corrupt"):
        (folder / "config.json").write_text("{ not json")
    unpacked = []

    def fake_unpack(destination):
        unpacked.append(destination)
        destination.mkdir(parents=True, exist_ok=True)
        (destination / "config.json").write_text("{ not json" if damage == "corrupt-twice" else "{}")

    def fake_load(path, **kwargs):
        if (Path(path) / "config.json").read_text() != "{}":
            raise OSError("unreadable cache")
        return "loaded"

    monkeypatch.setattr(weights, "_unpack_bundled", fake_unpack)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fake_load)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake_load)
    if damage == "corrupt-twice":
        with pytest.raises(OSError):
            weights.load_bundled_target()
        assert len(unpacked) == 1  # one rebuild, then the error: no loop
    else:
        assert weights.load_bundled_target() == ("loaded", "loaded")
        assert len(unpacked) == 1
