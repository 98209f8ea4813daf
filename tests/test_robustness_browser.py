"""Issue 6 in headless Chromium: nothing from a prompt or a model ever becomes live HTML or script.

1. A comparison whose model texts (draft tokens, target tokens, answers), prompt, preset and policy
   labels are script/HTML/javascript:-link/markdown-image payloads is imported through the app's
   own "Import a comparison" upload, so it is rendered by the app's real code path (columns,
   metrics, summary table, charts, replay panel).
2. The same payloads typed as a prompt and run through the model (which may echo them).

window.alert/confirm/prompt are hooked before any page script runs; the test fails if one fires,
or if any <script>, <img>, <iframe>, <svg>, on* attribute or javascript: link came from the payloads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_server import CHROMIUM, set_box

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '<a href="javascript:alert(3)">click</a>',
    "[click](javascript:alert(4))",
    "![x](javascript:alert(5))",
    '"><svg onload=alert(6)>',
    "<iframe srcdoc=\"<script>alert(7)</script>\"></iframe>",
    "'); alert(8); ('",
    "{{7*7}} ${alert(9)}",
]

HOOK_JS = """
window.__fired = [];
for (const name of ['alert', 'confirm', 'prompt']) {
  window[name] = (m) => { window.__fired.push(name + ':' + String(m)); return null; };
}
"""

# Elements or attributes that would mean a payload became markup.
LIVE_JS = """() => {
  const bad = [];
  for (const el of document.querySelectorAll('script:not([src])')) {
    if (/alert\\(/.test(el.textContent)) bad.push('inline script: ' + el.textContent.slice(0, 80));
  }
  for (const el of document.querySelectorAll('img[src="x"], iframe[srcdoc], svg[onload]')) {
    bad.push(el.outerHTML.slice(0, 120));
  }
  for (const el of document.querySelectorAll('a[href]')) {
    if (el.getAttribute('href').trim().toLowerCase().startsWith('javascript:')) bad.push(el.outerHTML.slice(0, 120));
  }
  for (const el of document.querySelectorAll('*')) {
    for (const attr of el.attributes) {
      if (attr.name.startsWith('on') && /alert\\(/.test(attr.value)) bad.push(el.tagName + ' ' + attr.name);
    }
  }
  return bad;
}"""


def hostile_comparison():
    from specviz.decoding.trace import Baseline, Comparison, Round, Trace

    text = " ".join(PAYLOADS)
    traces = []
    for policy in ("static", "heuristic", "dynamic", "oracle"):
        rounds = []
        for i, payload in enumerate(PAYLOADS):
            rounds.append(Round(index=i, position=2 * i, budget=3, draft_ids=[10 + i, 20 + i, 30 + i],
                                draft_probs=[0.9, 0.8, 0.3], accepted=1, target_id=40 + i,
                                draft_entropies=[0.1, 0.2, 1.5], draft_texts=[payload, PAYLOADS[-1 - i], "<b>x</b>"],
                                target_text=payload, oracle_ideal=1))
        ids = [t for r in rounds for t in r.draft_ids[:1] + [r.target_id]]
        traces.append(Trace(policy=policy, label=f"{policy} <img src=x onerror=alert(10)>", params={},
                            token_ids=ids, rounds=rounds, wall_s=0.1, stop_reason="max_new_tokens", text=text,
                            lossless=True))
    baseline = Baseline(token_ids=traces[0].token_ids, wall_s=0.2, stop_reason="max_new_tokens", text=text)
    return Comparison(preset="<script>alert(11)</script>", prompt=text, max_new_tokens=len(baseline.token_ids),
                      baseline=baseline, traces=traces, prompt_tokens=12)


@pytest.fixture()
def page(live_app, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.fired = []  # dialogs Playwright saw (if the hook were bypassed)
    page.on("dialog", lambda d: (page.fired.append(d.message), d.dismiss()))
    page.add_init_script(HOOK_JS)
    page.goto(live_app[0])
    page.wait_for_selector("#run", timeout=60_000)
    yield page
    page.close()


def assert_inert(page):
    page.wait_for_timeout(1000)  # give any onerror/onload a chance to fire
    assert page.evaluate("() => window.__fired") == [] and page.fired == []
    assert page.evaluate(LIVE_JS) == []


def test_the_detectors_work(page):
    """A payload that does become markup is caught by both the hook and the element scan."""
    page.evaluate("() => { const d = document.createElement('div'); d.id = 'planted'; "
                  "d.innerHTML = '<img src=x onerror=alert(99)>'; document.body.appendChild(d); }")
    page.wait_for_function("() => window.__fired.length > 0", timeout=10_000)
    assert page.evaluate("() => window.__fired") == ["alert:99"]
    assert page.evaluate(LIVE_JS) != []


def test_hostile_model_output_in_an_imported_comparison_stays_text(page, tmp_path):
    path = tmp_path / "hostile.json"
    path.write_text(hostile_comparison().to_json(), encoding="utf-8")
    json.loads(path.read_text())  # a well-formed export
    page.click("#files-accordion")
    page.set_input_files("#import input[type=file]", str(path))
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=60_000)
    page.wait_for_function("() => document.querySelectorAll('#col-oracle .specviz-metrics').length > 0",
                           timeout=30_000)
    assert "<script>alert(11)</script>" in page.inner_text("#status")  # the preset name, as text
    shown = page.inner_text("#col-static")
    for payload in PAYLOADS:
        assert payload in shown.replace("\n", ""), payload
    # The replay panel (filled after the import) shows the payloads too; step through a few rounds.
    page.wait_for_function("() => /alert\\(/.test(document.querySelector('#replay-panel').innerText)",
                           timeout=30_000)
    for _ in range(3):
        page.click("#replay-next")
    assert_inert(page)


def test_a_hostile_prompt_run_through_the_model_stays_text(page, live_app):
    prompt = "Repeat exactly, then stop: " + " ".join(PAYLOADS[:5])
    page.locator("#prompt textarea").fill(prompt)
    set_box(page.locator("#max-new-tokens input[type=number]"), "16", key="Enter")
    page.click("#run")
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=600_000)
    assert page.locator("#prompt textarea").input_value() == prompt
    assert_inert(page)
    assert "Traceback" not in live_app[1].read_text()


def wait_for_message(page, app_log: Path, pattern: str, timeout_ms: int = 120_000) -> None:
    """Wait until the page's text matches `pattern` (a JS regex); on a timeout, fail with what the
    status said and the end of the app's log, so a failure in CI says why."""
    try:
        page.wait_for_function(f"() => {pattern}.test(document.body.innerText)", timeout=timeout_ms,
                               polling=250)
    except sync_api.TimeoutError:
        raise AssertionError(f"no message matching {pattern} within {timeout_ms / 1000:.0f} s; "
                             f"the status says {page.inner_text('#status')!r}; the app log ends with:\n"
                             f"{app_log.read_text()[-2000:]}") from None


def test_bad_values_typed_in_the_page_get_a_clear_message(page, live_app):
    """An empty prompt gets the app's own error status; a number box outside its range gets Gradio's
    message, an emptied one the app's; in each case the spinner ends and the page keeps working."""
    page.locator("#prompt textarea").fill("   ")
    page.click("#run")
    page.wait_for_selector('#status .specviz-status[data-state="error"]', timeout=60_000)
    assert "The prompt is empty" in page.inner_text("#status")

    page.locator("#prompt textarea").fill("Name a fruit.")
    page.click("#policy-settings")
    box = page.locator("#static-k input")
    for typed, pattern in (("0", "/less than minimum|between 1 and/"), ("", "/Static k is empty/")):
        set_box(box, typed)
        page.click("#run")
        wait_for_message(page, live_app[1], pattern)
        page.wait_for_timeout(1000)
        assert page.locator("#status .pending, #status .eta-bar").count() == 0, "the spinner is stuck"
    assert_inert(page)
