"""Issue 6 against a running app: the /compare API with bad input, a hub preset offline, eight
clients at once, and a client that goes away mid-run.

Starts `python app.py --port <free port>` (SPECVIZ_PRELOAD default, hub offline) and talks to it
with gradio_client, as any visitor's script could.
"""

from __future__ import annotations

import html
import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from app_server import ROOT, start_app, stop_app

pytestmark = pytest.mark.slow

gradio_client = pytest.importorskip("gradio_client")

PROMPTS = ["Name a fruit.", "What is 2+2?", "Say hello in French.", "What colour is the sky?",
           "Name a planet.", "Spell the word cat.", "Name an ocean.", "What is the capital of Japan?"]
TOKENS = 16  # the slider's minimum


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("app")
    log_path = folder / "app.log"
    proc, url = start_app(log_path, HF_HUB_OFFLINE="1", HF_HOME=str(folder / "hf"), SPECVIZ_TIME_BUDGET_S="1200")
    try:
        yield proc, url, log_path
    finally:
        stop_app(proc)


def client_for(url: str):
    return gradio_client.Client(url, verbose=False)


def compare(client, prompt: str, **settings):
    args = {"prompt": prompt, "preset": "smollm2-135m-int8", "max_new_tokens": TOKENS, "static_k": 5,
            "heuristic_k": 5, "threshold": 0.4, "dynamic_max": 20, **settings}
    return client.predict(**args, api_name="/compare")


def status_and_columns(outputs) -> tuple[str, list[str]]:
    texts = [o for o in outputs if isinstance(o, str)]
    status = next(t for t in texts if "specviz-status" in t)
    return status, [t for t in texts if 'class="specviz-column"' in t]


def state_of(status: str) -> str:
    return re.search(r'data-state="([a-z]+)"', status).group(1)


def message_of(status: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", status))


def answer_texts(columns: list[str]) -> list[str]:
    from tests.test_robustness import answer_text

    return [answer_text(c) for c in columns if 'data-state="done"' in c]


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


def test_the_api_refuses_what_the_widgets_would_not_allow(served):
    from specviz.models import PRESETS

    _, url, log_path = served
    client = client_for(url)
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/compare"]
    preset = next(p for p in api["parameters"] if p["parameter_name"] == "preset")
    assert preset["type"]["enum"] == list(PRESETS)

    refused = [
        ({"preset": "gpt-17"}, "not in the list of choices"),
        ({"preset": "../../../etc/passwd"}, "not in the list of choices"),
        ({"preset": "Qwen/Qwen2.5-0.5B-Instruct|Qwen/Qwen2.5-0.5B-Instruct"}, "not in the list of choices"),
        ({"max_new_tokens": 0}, "less than minimum"),
        ({"max_new_tokens": -1}, "less than minimum"),
        ({"max_new_tokens": 100_000}, "greater than maximum"),
        ({"static_k": 0}, "less than minimum"),
        ({"heuristic_k": 1000}, "greater than maximum"),
        ({"threshold": -0.5}, "less than minimum"),
        ({"threshold": 1.5}, "greater than maximum"),
    ]
    for settings, says in refused:
        args = {"prompt": "Name a fruit.", **settings}
        with pytest.raises(gradio_client.exceptions.AppError, match=says):
            compare(client, **args)

    for prompt, says in [("", "The prompt is empty"), ("  \n\t ", "The prompt is empty"),
                         ("The quick brown fox. " * 5000, "this server accepts at most 2048 prompt tokens")]:
        status, columns = status_and_columns(compare(client, prompt))
        assert state_of(status) == "error" and says in message_of(status), message_of(status)
        assert all('data-state="running"' not in c for c in columns)
    assert_no_traceback_from_us(log_path)


def test_a_hub_preset_offline_fails_fast_and_bundled_presets_still_work(served):
    _, url, _ = served
    client = client_for(url)
    started = time.monotonic()
    status, columns = status_and_columns(compare(client, "Name a fruit.", preset="smollm2-1.7b"))
    took = time.monotonic() - started
    assert state_of(status) == "error"
    assert "'smollm2-1.7b'" in message_of(status) and "HuggingFaceTB/SmolLM2-1.7B-Instruct" in message_of(status)
    assert "work offline" in message_of(status)
    assert took < 60, f"the offline hub preset took {took:.0f} s to fail"
    status, columns = status_and_columns(compare(client, "Name a fruit."))
    assert state_of(status) == "done", message_of(status)
    assert len(answer_texts(columns)) == 4


def test_eight_clients_at_once_each_get_their_own_answer(served, bundled_pair):
    from specviz.engine import target_only
    from specviz.models import encode_prompt

    proc, url, log_path = served
    results: dict[str, object] = {}

    def one(prompt: str) -> None:
        try:
            results[prompt] = compare(client_for(url), prompt)
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
    print(f"\nconcurrency: {len(PROMPTS)} clients x {TOKENS} new tokens, all done in {total:.1f} s "
          f"({total / len(PROMPTS):.1f} s per request, served one at a time); app peak RSS {peak:.0f} MB")

    errors = {p: r for p, r in results.items() if isinstance(r, Exception)}
    assert not errors and len(results) == len(PROMPTS), errors
    # Each client's columns hold its own prompt's answer: target-only greedy decoding of that prompt.
    for prompt in PROMPTS:
        status, columns = status_and_columns(results[prompt])
        assert state_of(status) == "done", (prompt, message_of(status))
        texts = answer_texts(columns)
        assert len(texts) == 4, prompt
        expected = bundled_pair.tokenizer.decode(
            target_only(bundled_pair, encode_prompt(bundled_pair, prompt), TOKENS).token_ids, skip_special_tokens=True)
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
    while seen.count(b"process_generating") < 2:  # the second output: the model work has started
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
    status, _ = status_and_columns(compare(client_for(url), "Name a fruit."))
    took = time.monotonic() - started
    print(f"\nafter a client left mid-run, the next request finished in {took:.1f} s")
    assert state_of(status) == "done", message_of(status)
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


def test_no_visitor_path_reaches_the_file_system(served, tmp_path):
    """The import reads only files Gradio itself received as uploads: a path sent in the request is refused
    before the handler runs, whatever it names."""
    from gradio_client import handle_file

    _, url, _ = served
    for path in ("/etc/hostname", str(ROOT / "README.md"), "../../../../etc/passwd", "assets/examples.json"):
        events = call_raw(url, "import_json", [{"path": path, "meta": {"_type": "gradio.FileData"}}])
        assert "event: error" in events and "Imported" not in events, (path, events[:300])
    # A real upload of something that is not a comparison: a clear message, no traceback.
    bogus = tmp_path / "evil name <script>.json"
    bogus.write_text('{"hello": 1}')
    outputs = client_for(url).predict(handle_file(str(bogus)), api_name="/import_json")
    status = next(o for o in outputs if isinstance(o, str) and "specviz-status" in o)
    assert state_of(status) == "error" and "not a SpecViz comparison" in message_of(status), status
