"""The app's public API against a running app, as a script uses it (gradio_client): what it lists,
/compare's JSON against the CLI's, bad input, a hub preset offline, eight clients at once, and a
client that goes away mid-run.

Talks to the shared live app (conftest.live_server: SPECVIZ_PRELOAD default, hub offline) with
gradio_client, as any visitor's script could.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from app_server import ROOT, LogSince

pytestmark = pytest.mark.slow

gradio_client = pytest.importorskip("gradio_client")

PROMPTS = ["Name a fruit.", "What is 2+2?", "Say hello in French.", "What colour is the sky?",
           "Name a planet.", "Spell the word cat.", "Name an ocean.", "What is the capital of Japan?"]
TOKENS = 16  # the slider's minimum
CLIENT_TOKENS = 8  # each of the eight clients: enough for an answer of its own, checked token by token


@pytest.fixture(scope="module")
def served(live_server):
    """The shared live app (conftest.py): its process, URL, and the log from this module's start."""
    return live_server.proc, live_server.url, LogSince(live_server.log_path)


def client_for(url: str):
    return gradio_client.Client(url, verbose=False)


def compare(client, prompt: str, **settings) -> dict:
    """The /compare endpoint as a script calls it: the final comparison, as JSON."""
    args = {"prompt": prompt, "preset": "smollm2-135m-int8", "max_new_tokens": TOKENS, **settings}
    return client.predict(**args, api_name="/compare")


def answer_texts(comparison: dict) -> list[str]:
    return [mode["text"] for mode in comparison["modes"]]


def assert_no_traceback_from_us(log_path: Path) -> None:
    """Gradio logs its own input validation errors with a traceback; none may come from SpecViz code."""
    log = log_path.read_text()
    assert str(ROOT / "specviz") not in log and str(ROOT / "app.py") not in log, log[-3000:]
    assert "SpecViz run failed" not in log


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


PUBLIC_ENDPOINTS = {"/compare", "/presets", "/examples", "/example", "/pair_state"}


def test_the_api_lists_only_what_a_script_calls(served):
    _, url, _ = served
    api = client_for(url).view_api(return_format="dict", print_info=False)
    assert set(api["named_endpoints"]) == PUBLIC_ENDPOINTS and not api["unnamed_endpoints"]
    compare_api = api["named_endpoints"]["/compare"]
    assert [p["parameter_name"] for p in compare_api["parameters"]] == [
        "prompt", "preset", "max_new_tokens", "modes", "temperature", "seed", "draft", "lookup_ngram", "lookup_tokens"]
    assert "python -m specviz compare --json" in compare_api["description"]
    for name in PUBLIC_ENDPOINTS:
        assert api["named_endpoints"][name]["description"], name


def test_presets_and_examples_are_data(served):
    from specviz.pair.presets import PRESETS
    from specviz.ui.files import load_examples

    _, url, _ = served
    client = client_for(url)
    presets = client.predict(api_name="/presets")
    assert [p["name"] for p in presets] == list(PRESETS)
    assert {p["name"] for p in presets if p["kind"] == "bundled"} == {"smollm2-135m-int8", "smollm2-135m-bf16"}
    assert {p["name"] for p in presets if p["offline"]} == {"smollm2-135m-int8", "smollm2-135m-bf16",
                                                            "qwen2.5-coder-1.5b"}
    examples = client.predict(api_name="/examples")
    assert [e["name"] for e in examples] == [e.name for e in load_examples()]
    stored = client.predict(name=examples[0]["name"], api_name="/example")
    assert stored["prompt"] == examples[0]["prompt"] and stored["baseline"]["token_ids"]
    with pytest.raises(gradio_client.exceptions.AppError, match="Unknown example 'nope'"):
        client.predict(name="nope", api_name="/example")
    # The real pair's state, read-only (nothing starts by asking): set up on this machine or not.
    state = client.predict(preset="qwen2.5-coder-1.5b", api_name="/pair_state")
    assert state["preset"] == "qwen2.5-coder-1.5b" and state["phase"] in ("not set up", "ready")
    assert client.predict(preset="smollm2-135m-int8", api_name="/pair_state")["phase"] == "ready"


def test_compare_returns_what_the_cli_writes(served, tmp_path):
    """The same request through the API and through `python -m specviz compare --json` (its `main`,
    called here; tests/test_cli.py runs it as a process): the same schema, the same tokens and
    passes (greedy decoding is deterministic), every policy lossless."""
    import json

    from specviz.cli import main

    _, url, _ = served
    prompt = "Write a Python function that reverses a string."
    ours = compare(client_for(url), prompt, max_new_tokens=20)
    path = tmp_path / "cli.json"
    assert main(["compare", "--prompt", prompt, "--max-new-tokens", "20", "--json", str(path)]) == 0
    cli = json.loads(path.read_text())
    assert set(ours) == set(cli)
    assert [m["name"] for m in ours["modes"]] == [m["name"] for m in cli["modes"]]
    for mine, theirs in zip(ours["modes"], cli["modes"]):
        assert set(mine) == set(theirs)
        assert mine["lossless"] is True
        assert (mine["token_ids"], mine["target_passes"], mine["draft_passes"]) == \
            (theirs["token_ids"], theirs["target_passes"], theirs["draft_passes"]), mine["name"]
        assert [set(r) for r in mine["rounds"]] == [set(r) for r in theirs["rounds"]]
    assert ours["baseline"]["token_ids"] == cli["baseline"]["token_ids"]


def test_compare_streams_the_comparison_as_it_grows(served):
    _, url, _ = served
    seen = list(client_for(url).submit(prompt="Name a fruit.", preset="smollm2-135m-int8", max_new_tokens=TOKENS,
                                       api_name="/compare"))
    # after each policy, then once more when target-only decoding has run and the check is made
    assert [len(c["modes"]) for c in seen] == [1, 2, 3, 4, 4]
    assert seen[-2]["baseline"] is None and seen[-1]["baseline"] is not None
    assert all(m["lossless"] for m in seen[-1]["modes"])


def test_bad_input_is_a_clear_error_and_the_app_still_serves(served):
    _, url, log_path = served
    client = client_for(url)
    refused = [
        ({"prompt": ""}, "The prompt is empty"),
        ({"prompt": "  \n\t "}, "The prompt is empty"),
        ({"max_new_tokens": 10**6}, "Max new tokens must be between 1 and 512"),
        ({"max_new_tokens": 0}, "Max new tokens must be between 1 and 512"),
        ({"preset": "gpt-17"}, "Unknown preset 'gpt-17'"),
        ({"preset": "../../../etc/passwd"}, "Unknown preset"),
        ({"modes": "static:0"}, "between 1 and"),
        ({"modes": "dynamic:1.5"}, "threshold"),
        ({"modes": "warp:9"}, "Unknown mode 'warp'"),
        ({"modes": "static:5," * 1250}, "1250 modes given; at most 8"),
        ({"modes": "dynamic:0.4,oracle,dynamic:0.4:20"}, "The mode 'dynamic t=0.4' is named twice"),
        ({"temperature": 5.0}, "Temperature"),
        ({"prompt": "The quick brown fox. " * 5000}, "this server accepts at most 2048 prompt tokens"),
    ]
    for settings, says in refused:
        args = {"prompt": "Name a fruit.", **settings}
        with pytest.raises(gradio_client.exceptions.AppError, match=re.escape(says)):
            compare(client, **args)
    assert len(answer_texts(compare(client, "Name a fruit."))) == 4
    assert_no_traceback_from_us(log_path)


def test_a_hub_preset_offline_fails_fast_and_bundled_presets_still_work(served):
    _, url, _ = served
    client = client_for(url)
    started = time.monotonic()
    with pytest.raises(gradio_client.exceptions.AppError) as refused:
        compare(client, "Name a fruit.", preset="smollm2-1.7b")
    took = time.monotonic() - started
    message = str(refused.value)
    assert "'smollm2-1.7b'" in message and "HuggingFaceTB/SmolLM2-1.7B-Instruct" in message
    assert "work offline" in message
    assert took < 60, f"the offline hub preset took {took:.0f} s to fail"
    assert len(answer_texts(compare(client, "Name a fruit."))) == 4


def test_eight_clients_at_once_each_get_their_own_answer(served, bundled_pair):
    from specviz.decoding.engine import target_only
    from specviz.pair.models import encode_prompt

    proc, url, log_path = served
    results: dict[str, object] = {}

    def one(prompt: str) -> None:
        try:
            results[prompt] = compare(client_for(url), prompt, max_new_tokens=CLIENT_TOKENS)
        except Exception as error:  # noqa: BLE001 - recorded and asserted below
            results[prompt] = error

    started = time.monotonic()
    threads = [threading.Thread(target=one, args=(p,)) for p in PROMPTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=900)
    total = time.monotonic() - started
    peak = peak_rss_mb(proc.pid)
    print(f"\nconcurrency: {len(PROMPTS)} clients x {CLIENT_TOKENS} new tokens, all done in {total:.1f} s "
          f"({total / len(PROMPTS):.1f} s per request, served one at a time); app peak RSS {peak:.0f} MB")

    errors = {p: r for p, r in results.items() if isinstance(r, Exception)}
    assert not errors and len(results) == len(PROMPTS), errors
    # Each client's columns hold its own prompt's answer: target-only greedy decoding of that prompt.
    for prompt in PROMPTS:
        texts = answer_texts(results[prompt])
        assert results[prompt]["prompt"] == prompt and len(texts) == 4, prompt
        expected = bundled_pair.tokenizer.decode(
            target_only(bundled_pair, encode_prompt(bundled_pair, prompt), CLIENT_TOKENS).token_ids,
            skip_special_tokens=True)
        assert set(texts) == {expected}, (prompt, texts, expected)
    assert peak < 3000, f"the app's peak RSS was {peak:.0f} MB"
    assert_no_traceback_from_us(log_path)


def start_and_drop(url: str, prompt: str, max_new_tokens: int) -> None:
    """Join the queue for /compare over raw HTTP, read the event stream until the model is at work,
    then close the connection, as a browser tab that is closed mid-run does."""
    import http.client
    import json
    import uuid
    from urllib.parse import urlparse

    with urllib.request.urlopen(f"{url}config", timeout=30) as response:
        config = json.loads(response.read())
    fn_index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "compare")
    api = client_for(url).view_api(return_format="dict", print_info=False)["named_endpoints"]["/compare"]
    values = {p["parameter_name"]: p["parameter_default"] for p in api["parameters"]}
    values.update(prompt=prompt, max_new_tokens=max_new_tokens)
    session = uuid.uuid4().hex[:11]
    body = {"data": list(values.values()), "fn_index": fn_index, "session_hash": session, "event_data": None,
            "trigger_id": None}
    request = urllib.request.Request(f"{url}gradio_api/queue/join", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert "event_id" in json.loads(response.read())
    address = urlparse(url)
    stream = http.client.HTTPConnection(address.hostname, address.port, timeout=300)
    stream.request("GET", f"/gradio_api/queue/data?session_hash={session}")
    response = stream.getresponse()
    deadline = time.monotonic() + 300
    seen = b""
    while seen.count(b"process_generating") < 1:  # the first policy's result: the model work is under way
        assert time.monotonic() < deadline, seen[-500:]
        line = response.fp.readline()
        assert line, "the stream ended before the run started"
        seen += line
    stream.sock.shutdown(socket.SHUT_RDWR)
    stream.close()


def test_a_client_that_goes_away_frees_its_slot(served):
    _, url, log_path = served
    long_prompt = "Write a long story about a lighthouse keeper."
    start_and_drop(url, long_prompt, 64)
    started = time.monotonic()
    assert len(answer_texts(compare(client_for(url), "Name a fruit."))) == 4
    took = time.monotonic() - started
    print(f"\nafter a client left mid-run, the next request finished in {took:.1f} s")
    # The dropped run was cut short: no "run finished" between its start and the next run's start.
    log = log_path.read_text()
    dropped = log.rindex(f"prompt_chars={len(long_prompt)}")
    assert "run finished" not in log[dropped:log.index("run: ", dropped)], "the dropped run ran to the end"
    assert took < 240, f"the next request waited {took:.0f} s"


def call_raw(url: str, api_name: str, data: list) -> str:
    """POST /gradio_api/call/<api_name> by hand (no client-side file upload) and return the SSE text."""
    import json

    request = urllib.request.Request(f"{url}gradio_api/call/{api_name}", data=json.dumps({"data": data}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        event_id = json.loads(response.read())["event_id"]
    with urllib.request.urlopen(f"{url}gradio_api/call/{api_name}/{event_id}", timeout=60) as response:
        return response.read().decode()


def test_no_visitor_path_reaches_the_file_system(served):
    """The page's events are private (kept out of the API docs and gradio_client), but raw HTTP can
    still name them: a server path sent to the import is refused before the handler runs."""
    _, url, _ = served
    for path in ("/etc/hostname", str(ROOT / "README.md"), "../../../../etc/passwd", "assets/examples.json"):
        try:
            events = call_raw(url, "import_json", [{"path": path, "meta": {"_type": "gradio.FileData"}}])
        except urllib.error.HTTPError as error:
            assert error.code in (404, 422), (path, error.code)
        else:
            assert "event: error" in events and "Imported" not in events, (path, events[:300])
