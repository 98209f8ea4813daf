"""The app in headless Chromium: type a prompt, run all four policies, check what the page shows.

Drives the shared live app (conftest.live_server: `python app.py`, SPECVIZ_CACHE inherited) with
Playwright. The numbers on the page are checked against the same request run here, in the
test process, through `specviz.decoding.pipeline.compare`: greedy decoding is deterministic, so the pass
counts must match exactly (wall times differ and are not compared).

Run: python -m pytest tests/test_app_browser.py -q     (about 1-2 minutes on 2 cores)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from app_server import CHROMIUM, ROOT, set_box

pytestmark = [pytest.mark.browser, pytest.mark.slow]

POLICIES = ["static", "heuristic", "dynamic", "oracle"]
PROMPT = "Explain what a hash table is, with a short Python example."
MAX_NEW_TOKENS = 40
RUN_TIMEOUT_MS = 600_000  # generous: the CI machine has 2 cores and is often shared

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)


def expected_comparison():
    """The same request through the engine in this process."""
    from specviz.decoding.pipeline import Limits, compare, make_request
    from specviz.pair.models import get_pair
    from specviz.pair.presets import DEFAULT_PRESET

    request = make_request(PROMPT, "static:5,heuristic:5,dynamic:0.4:20,oracle", MAX_NEW_TOKENS)
    return compare(get_pair(DEFAULT_PRESET), request, Limits(time_budget_s=1200))


READ_COLUMNS_JS = """(policies) => {
  const out = {};
  for (const policy of policies) {
    const col = document.querySelector('#col-' + policy);
    const metrics = {};
    for (const el of col.querySelectorAll('[data-metric]')) {
      metrics[el.dataset.metric] = {text: el.textContent.trim(), value: el.dataset.value ?? null};
    }
    const kinds = {};
    const styles = {};
    for (const kind of ['accepted', 'rejected', 'correction', 'bonus']) {
      const spans = col.querySelectorAll('.specviz-tokens span.tok-' + kind);
      kinds[kind] = spans.length;
      if (spans.length) {
        const cs = getComputedStyle(spans[0]);
        styles[kind] = {background: cs.backgroundColor, fontSize: parseFloat(cs.fontSize)};
      }
    }
    const tokens = col.querySelector('.specviz-tokens');
    out[policy] = {metrics, kinds, styles, state: col.querySelector('.specviz-column')?.dataset.state,
                   label: tokens ? tokens.dataset.label : null};
  }
  return out;
}"""

# Streaming is real: a column shows coloured tokens while its policy is still running (no metrics
# block yet), and more of them at a later update.
# A running column also shows the round under way as pending draft tokens, before the verdict:
# each pending round seen is recorded with its tokens, to be found judged in the final column.
WATCH_STREAMING_JS = """() => {
  const seen = window.__specvizStreamed = {};
  const pending = window.__specvizPending = [];
  new MutationObserver(() => {
    for (const col of document.querySelectorAll('#columns .specviz-column[data-state="running"]')) {
      if (col.querySelector('.specviz-metrics')) continue;
      const p = col.dataset.policy, n = col.querySelectorAll('.specviz-tokens .tok').length;
      if (n) (seen[p] = seen[p] || []).push(n);
      const round = col.querySelector('.specviz-tokens .round-pending');
      if (round) {
        const tokens = [...round.querySelectorAll('.tok')];
        pending.push({policy: p, round: round.dataset.round, texts: tokens.map(t => t.textContent),
                      onlyPending: tokens.every(t => t.classList.contains('tok-pending')),
                      judgedBefore: col.querySelectorAll('.specviz-tokens .round:not(.round-pending)').length,
                      titles: tokens.map(t => t.title),
                      background: getComputedStyle(tokens[0]).backgroundColor});
      }
    }
  }).observe(document.body, {subtree: true, childList: true});
}"""

READ_ROUND_JS = """([policy, round]) => [...document.querySelectorAll(
  '#col-' + policy + ' .specviz-tokens .round[data-round="' + round + '"] .tok')].map(t => t.textContent)"""

READ_PLOT_JS = """() => {
  const gd = document.querySelector('#lookahead-plot .js-plotly-plot');
  if (!gd || !gd.data) return null;
  return gd.data.map(d => ({name: d.name, meta: d.meta ?? null, n: (d.x || []).length}));
}"""


def test_run_fills_all_columns_with_engine_counts(live_app, browser):
    url, log_path = live_app
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    console_errors: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"page error: {e}"))

    def on_dialog(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)

    page.goto(url)
    page.wait_for_selector("#run", timeout=60_000)
    for policy in POLICIES:
        assert "waiting" in page.inner_text(f"#col-{policy}")

    prompt = page.locator("#prompt textarea")
    prompt.fill("")
    prompt.type(PROMPT, delay=5)
    set_box(page.locator("#max-new-tokens input[type=number]"), str(MAX_NEW_TOKENS), key="Enter")
    assert page.locator("#max-new-tokens input[type=range]").input_value() == str(MAX_NEW_TOKENS)

    page.evaluate("() => { window.__specvizAlerts = []; "
                  "window.alert = (m) => { window.__specvizAlerts.push(String(m)); }; }")
    page.evaluate(WATCH_STREAMING_JS)
    page.click("#run")
    page.wait_for_function(
        "(ps) => ps.every(p => document.querySelector('#col-' + p + ' .specviz-metrics'))",
        arg=POLICIES, timeout=RUN_TIMEOUT_MS,
    )
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=60_000)
    page.wait_for_function(READ_PLOT_JS.replace("return gd.data", "return gd.data.length > 8 && gd.data"),
                           timeout=30_000)
    page.wait_for_timeout(500)  # let plotly finish drawing before the screenshot

    streamed = page.evaluate("() => window.__specvizStreamed")
    pending = page.evaluate("() => window.__specvizPending")
    judged_rounds = [page.evaluate(READ_ROUND_JS, [seen["policy"], seen["round"]]) for seen in pending]
    shown = page.evaluate(READ_COLUMNS_JS, POLICIES)
    plot = page.evaluate(READ_PLOT_JS)
    status_text = page.inner_text("#status")
    toasts = page.locator(".toast-body.error, .toast-body.warning").count()
    alerts = page.evaluate("() => window.__specvizAlerts")

    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "app.png"), full_page=True)  # to look at; docs/ is scripts/screenshots.py's
    page.close()

    # The engine's own run of the same request, after the browser run (2 cores: no overlap).
    comparison = expected_comparison()
    assert not comparison.partial, "the reference run hit the time budget"

    assert toasts == 0, "an error toast was shown"
    assert alerts == [] and dialogs == [], f"alert/dialog fired: {alerts} {dialogs}"
    assert "Done" in status_text, status_text
    assert console_errors == [], f"browser console errors: {console_errors}"

    # Every column showed tokens before its policy ended, growing as rounds were decided; the
    # longer runs were seen at two or more sizes (the page gets an update every 0.4 s at most).
    for policy in POLICIES:
        counts = streamed.get(policy, [])
        assert counts and counts == sorted(counts), (policy, counts)
    assert sum(len(set(streamed[p])) >= 2 for p in POLICIES) >= 2, streamed

    # The draft step is visible: rounds showed as pending (their own style, the draft's probability
    # on hover) while the rounds before them were judged, and the same tokens were judged later.
    assert len({seen["policy"] for seen in pending}) >= 2, pending
    verdict_backgrounds = {style["background"] for col in shown.values() for style in col["styles"].values()}
    for seen, judged in zip(pending, judged_rounds):
        assert seen["onlyPending"] and seen["judgedBefore"] == int(seen["round"]), seen
        assert all(re.search(r"draft p=\d\.\d\d · pending", title) for title in seen["titles"]), seen
        assert seen["background"] not in verdict_backgrounds | {"rgba(0, 0, 0, 0)"}, seen
        assert judged[: len(seen["texts"])] == seen["texts"], (seen, judged)

    for trace in comparison.traces:
        col = shown[trace.policy]
        assert col["state"] == "done"
        assert col["label"] == trace.label
        m = col["metrics"]
        assert int(m["new_tokens"]["text"]) == trace.new_tokens, trace.label
        assert int(m["target_passes"]["text"]) == trace.target_passes, trace.label
        assert int(m["draft_passes"]["text"]) == trace.draft_passes, trace.label
        assert float(m["acceptance_rate"]["value"]) == pytest.approx(trace.acceptance_rate), trace.label
        assert m["mean_accepted_length"]["text"] == f"{trace.mean_accepted_length:.2f}", trace.label
        assert m["lossless"]["value"] == {True: "true", False: "false", None: "unknown"}[trace.lossless]

        expected_kinds = {
            "accepted": trace.accepted,
            "rejected": sum(r.rejected for r in trace.rounds),
            "correction": sum(r.target_kind == "correction" for r in trace.rounds),
            "bonus": sum(r.target_kind == "bonus" for r in trace.rounds),
        }
        assert col["kinds"] == expected_kinds, trace.label
        for kind, count in expected_kinds.items():
            if count:
                style = col["styles"][kind]
                assert style["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), (trace.label, kind)
                assert style["fontSize"] >= 16, (trace.label, kind)
    assert sorted(t.policy for t in comparison.traces) == sorted(POLICIES)

    assert plot is not None, "no lookahead chart"
    metas = [d["meta"] or {} for d in plot]
    assert sum(meta.get("series") == "oracle_ideal" for meta in metas) == len(POLICIES)  # one panel each
    accepted = sorted(meta.get("policy") for meta in metas if meta.get("series") == "accepted")
    assert accepted == sorted(POLICIES)
    assert "Traceback" not in log_path.read_text()


def test_stop_mid_run_keeps_the_page_and_the_model_working(live_app, browser):
    """Stop while the first column streams: finished work is kept, the column says stopped, the
    status ticks while it ran, and the next Run (which needs the model lock back) completes."""
    url, log_path = live_app
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(url)
    page.wait_for_selector("#run", timeout=60_000)
    page.wait_for_selector("#status .specviz-status", timeout=60_000)  # the observer needs it in the page
    page.evaluate("""() => {
      const seen = window.__statusTexts = new Set();
      new MutationObserver(() => {
        const el = document.querySelector('#status .specviz-status[data-state="running"]');
        if (el) seen.add(el.textContent);
      }).observe(document.querySelector('#status'), {subtree: true, childList: true, characterData: true});
    }""")
    page.click("#run")  # the example prompt, 128 new tokens: long enough to stop in the middle
    page.wait_for_selector('#col-static .specviz-column[data-state="running"] .tok', timeout=RUN_TIMEOUT_MS)
    page.wait_for_timeout(500)
    page.click("#stop")
    wait_for_stopped(page, timeout_ms=60_000)
    # The column that was streaming says stopped (static, unless it finished in the moment before
    # Stop: on a fast target it can), and every column before it kept its finished work.
    texts = [page.inner_text(f"#col-{policy}").lower() for policy in POLICIES]
    stopped = [i for i, text in enumerate(texts) if "stopped" in text]
    assert stopped, texts
    assert all("tokens per second" in text for text in texts[:stopped[0]]), texts
    ticks = page.evaluate("() => [...window.__statusTexts]")
    assert any(re.search(r"… \d+\.\d s$", t) for t in ticks), ticks  # the running status counts seconds

    set_box(page.locator("#max-new-tokens input[type=number]"), "16", key="Enter")
    page.evaluate("""() => {
      const states = window.__statesAfterStop = [];
      new MutationObserver(() => {
        const el = document.querySelector('#status .specviz-status');
        if (el) states.push(el.dataset.state);
      }).observe(document.querySelector('#status'), {subtree: true, childList: true, attributes: true});
    }""")
    page.click("#run")
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=RUN_TIMEOUT_MS)
    # Stop handed the stopped run's turn back: the next run never waited for it
    assert "waiting" not in page.evaluate("() => window.__statesAfterStop")
    page.wait_for_function("() => document.querySelectorAll('#columns .specviz-metrics').length >= 4",
                           timeout=30_000)
    page.close()
    assert "Traceback" not in log_path.read_text()


def wait_for_stopped(page, timeout_ms: int) -> None:
    """Wait for the status line to say "Stopped"; on a time-out, say what the page showed instead
    (a Stop lost on one machine once left only "60 s without Stopped" to go on)."""
    try:
        page.wait_for_function("() => /Stopped/.test(document.querySelector('#status').innerText)",
                               timeout=timeout_ms)
    except sync_api.TimeoutError:
        shown = page.evaluate("""() => ({status: document.querySelector('#status').innerText,
          html: document.querySelector('#status').innerHTML.slice(0, 1500),
          columns: [...document.querySelectorAll('#columns .specviz-column')].map(c => c.dataset.policy + ':' +
                                                                                  c.dataset.state)})""")
        raise AssertionError(f"no 'Stopped' within {timeout_ms / 1000:.0f} s of Stop; the page showed {shown}") from None


def status_state(page) -> str | None:
    return page.evaluate("() => document.querySelector('#status .specviz-status')?.dataset.state ?? null")


def open_page(browser, url: str, max_new_tokens: int):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(url)
    page.wait_for_selector("#run", timeout=60_000)
    page.wait_for_selector("#status .specviz-status", timeout=60_000)
    set_box(page.locator("#max-new-tokens input[type=number]"), str(max_new_tokens), key="Enter")
    return page


def one_streams_one_waits(streaming, waiting) -> None:
    """Run in one page until its first column shows tokens, then Run in the other: it waits."""
    streaming.click("#run")
    streaming.wait_for_selector('#columns .specviz-column[data-state="running"] .tok', timeout=RUN_TIMEOUT_MS)
    waiting.click("#run")
    waiting.wait_for_selector('#status .specviz-status[data-state="waiting"]', timeout=30_000)


def test_stop_after_a_finished_run_and_beside_another_visitors_run(live_app, browser):
    """Stop under the conditions that once lost it on another machine: a run has just finished on
    the same app, and another visitor's run streams. Both of one visitor's Stops (a run waiting
    for its turn, then a run streaming while the other visitor waits) show "Stopped" within 5 s,
    and the other visitor's runs go on to the end."""
    url, log_path = live_app
    alice, bob = open_page(browser, url, 16), open_page(browser, url, 64)
    alice.click("#run")  # a run to its end first: the state the earlier test leaves behind
    alice.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=RUN_TIMEOUT_MS)

    # Bob's run streams; Alice's waits for its turn, and she stops it.
    one_streams_one_waits(streaming=bob, waiting=alice)
    alice.click("#stop")
    wait_for_stopped(alice, timeout_ms=5_000)
    assert status_state(bob) == "running", "Alice's Stop touched Bob's run"
    bob.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=RUN_TIMEOUT_MS)

    # Alice's run streams; Bob's waits; she stops hers mid-run and his starts.
    set_box(alice.locator("#max-new-tokens input[type=number]"), "128", key="Enter")
    set_box(bob.locator("#max-new-tokens input[type=number]"), "16", key="Enter")  # his run goes to the end
    one_streams_one_waits(streaming=alice, waiting=bob)
    alice.click("#stop")
    wait_for_stopped(alice, timeout_ms=5_000)
    bob.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=RUN_TIMEOUT_MS)
    assert "Stopped" in alice.inner_text("#status"), "a later update overwrote Alice's 'Stopped'"
    alice.close()
    bob.close()
    assert "Traceback" not in log_path.read_text()


# While a run streams in presentation mode, record for the running column whether its newest token
# was inside both the column's window and the viewport after each update.
WATCH_LIVE_EDGE_JS = """() => {
  const seen = window.__liveEdge = [];
  new MutationObserver(() => requestAnimationFrame(() => {
    const running = document.querySelector('#columns .specviz-column[data-state="running"]');
    if (!running) return;
    const tokens = running.querySelectorAll('.specviz-tokens .tok');
    if (tokens.length < 2) return;
    const last = tokens[tokens.length - 1].getBoundingClientRect();
    const frame = running.closest('.specviz-col').getBoundingClientRect();
    seen.push({policy: running.dataset.policy, tokens: tokens.length,
               inView: last.bottom <= Math.min(frame.bottom, window.innerHeight) + 1 && last.top >= frame.top - 1,
               overflows: running.closest('.specviz-col').scrollHeight > frame.height + 1});
  })).observe(document.querySelector('#columns'), {subtree: true, childList: true});
}"""


def test_presentation_mode_follows_the_newest_tokens(live_app, browser):
    """At 1280x720 in presentation mode each column is a window that keeps its newest token in view
    while the run streams; afterwards the whole answer can be scrolled to."""
    url, log_path = live_app
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(url)
    # The example prompt, 64 new tokens: longer than a column's window (asserted below). The box is
    # set first: presentation mode hides it.
    set_box(page.locator("#max-new-tokens input[type=number]"), "64", key="Enter")
    page.locator("#present input[type=checkbox]").check()
    page.wait_for_function("() => document.body.classList.contains('specviz-present')", timeout=60_000)
    page.evaluate(WATCH_LIVE_EDGE_JS)
    page.click("#run")
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=RUN_TIMEOUT_MS)
    seen = page.evaluate("() => window.__liveEdge")
    overflowing = [s for s in seen if s["overflows"]]
    assert overflowing, "the answers never outgrew the column windows: nothing to follow"
    assert all(s["inView"] for s in seen), [s for s in seen if not s["inView"]][:5]
    # After the run the column's window scrolls back to the answer's first token.
    first = page.evaluate("""() => {
      window.scrollTo(0, 0);
      document.querySelector('#col-static .specviz-column').closest('.specviz-col').scrollTop = 0;
      return document.querySelector('#col-static .specviz-tokens .tok').getBoundingClientRect().top;
    }""")
    assert 0 <= first <= 720
    page.close()
    assert "Traceback" not in log_path.read_text()
