"""The explorer parts of the app in headless Chromium: replay, what-if sweep, sampling, export/import.

Uses the shared live app and Chromium (conftest.py).
Run: python -m pytest tests/test_app_browser_explorer.py -q     (about 1-2 minutes on 2 cores)
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
from app_server import set_box
from test_app_browser import CHROMIUM, RUN_TIMEOUT_MS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 16  # the slider's minimum: enough rounds to step the replay through three
assert Path(CHROMIUM).exists()


def start_run(page, url, temperature: float = 0.0, seed: int = 1) -> None:
    page.goto(url)
    page.wait_for_selector("#run", timeout=60_000)
    set_box(page.locator("#max-new-tokens input[type=number]"), str(TOKENS), key="Enter")
    page.click("#policy-settings")  # temperature and seed live there, one click away
    for elem, value in (("#temperature", temperature), ("#seed", seed)):
        set_box(page.locator(f"{elem} input"), str(value))
    page.click("#run")
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=RUN_TIMEOUT_MS)


def replay_state(page) -> dict:
    return page.evaluate("""() => {
      const panel = document.querySelector('#replay-panel .specviz-replay');
      const current = document.querySelector('#replay-panel .round-current');
      return {round: panel && panel.dataset.round, shown: panel && panel.querySelector('[data-replay=round]').textContent,
              current: current && current.dataset.round, text: current && current.textContent};
    }""")


def test_greedy_run_replay_sweep_and_import(live_app, browser):
    url, log_path = live_app
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    start_run(page, url)
    done = time.monotonic()
    page.wait_for_selector("#sweep-plot .js-plotly-plot", timeout=10_000)
    assert time.monotonic() - done < 5, "the what-if sweep came late"  # 2 s target; slack for a busy machine
    metas = page.evaluate("() => document.querySelector('#sweep-plot .js-plotly-plot').data.map(d => d.meta || {})")
    assert {m.get("series") for m in metas} >= {"target_passes", "speedup"}
    assert page.locator("#sweep-table tbody tr").count() > 0

    page.wait_for_selector("#replay-panel .specviz-replay[data-round]", timeout=10_000)
    first = replay_state(page)
    assert first["round"] == "0" and first["shown"] == "1" and first["current"] == "0"
    page.click("#replay-next")
    page.wait_for_selector('#replay-panel .specviz-replay[data-round="1"]', timeout=10_000)
    page.click("#replay-next")
    page.wait_for_selector('#replay-panel .specviz-replay[data-round="2"]', timeout=10_000)
    third = replay_state(page)
    assert third["shown"] == "3" and third["current"] == "2" and third["text"] != first["text"]
    assert page.locator("#replay-panel .round-current").count() == 1
    assert page.locator("#replay-round input[type=number]").input_value() == "3"
    page.keyboard.press("ArrowLeft")  # focus is on the Next button, inside the replay panel
    page.wait_for_selector('#replay-panel .specviz-replay[data-round="1"]', timeout=10_000)
    page.click("#prompt textarea")
    page.keyboard.press("ArrowRight")  # typing in the prompt must not step the replay
    page.wait_for_timeout(800)
    assert replay_state(page)["round"] == "1"
    page.wait_for_timeout(1200)  # the round's verdict shows 0.8 s after its draft
    (ROOT / "artifacts").mkdir(exist_ok=True)  # docs/replay.png is scripts/screenshots.py's, not a test's
    page.locator("#replay").screenshot(path=str(ROOT / "artifacts" / "replay.png"))

    # Downloads are ready; import the JSON again: same columns, no model run.
    link = page.wait_for_selector("#downloads a[href*='comparison.json']", timeout=30_000)
    path = unquote(re.search(r"file=(/[^?#]+comparison\.json)", link.get_attribute("href")).group(1))
    before = page.inner_html("#col-dynamic .specviz-tokens")
    page.set_input_files("#import input[type=file]", path)
    page.wait_for_function("() => document.querySelector('#status')?.textContent.includes('Imported')",
                           timeout=30_000)
    assert page.inner_html("#col-dynamic .specviz-tokens") == before
    page.set_input_files("#import input[type=file]", files=[{"name": "bad.json", "mimeType": "application/json",
                                                            "buffer": b"{not json"}])
    page.wait_for_selector('#status .specviz-status[data-state="error"]', timeout=30_000)
    assert "not valid JSON" in page.inner_text("#status")
    page.close()
    assert errors == []
    assert "Traceback" not in log_path.read_text()


def test_sampled_run_notes_the_oracle(live_app, browser):
    url, log_path = live_app
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    start_run(page, url, temperature=0.8, seed=1)
    oracle = page.inner_text("#col-oracle")
    assert "greedy idea" in oracle and "not run" in oracle
    assert page.get_attribute("#col-static [data-metric=lossless]", "data-value") == "sampled"
    assert "distribution" in page.inner_text("#col-static [data-metric=lossless]")
    page.wait_for_function("() => document.querySelector('#sweep-note').textContent.includes('sampled')",
                           timeout=10_000)
    assert page.locator("#sweep-plot .js-plotly-plot").count() == 0
    page.close()
    assert "Traceback" not in log_path.read_text()


def test_the_cost_aware_column_and_how_it_chose_a_round(live_app, browser):
    """Ticked in the policy settings, the cost-aware rule gets a column of its own, and Why? shows
    how it chose a round, whichever round the slider picks."""
    url, log_path = live_app
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector("#run", timeout=60_000)
    assert not page.locator("#col-costaware").is_visible()
    set_box(page.locator("#max-new-tokens input[type=number]"), str(TOKENS), key="Enter")
    page.click("#policy-settings")
    page.click("#costaware-on input")
    page.wait_for_selector("#col-costaware", state="visible", timeout=10_000)
    page.click("#run")
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=RUN_TIMEOUT_MS)
    column = page.inner_text("#col-costaware")
    assert "Cost-aware" in column and "worth its price" in column
    assert page.get_attribute("#col-costaware [data-metric=lossless]", "data-value") == "true"
    page.wait_for_selector("#rule-plot .js-plotly-plot", timeout=20_000)
    series = page.evaluate("() => document.querySelector('#rule-plot .js-plotly-plot').data.map(d => d.meta.series)")
    assert {"marginal", "expected", "rate", "stop"} <= set(series)
    title = page.evaluate("() => document.querySelector('#rule-plot .js-plotly-plot').layout.title.text")
    assert "round 1" in title
    set_box(page.locator("#rule-round input[type=number]"), "2", key="Enter")
    page.wait_for_function("() => document.querySelector('#rule-plot .js-plotly-plot')?.layout.title.text"
                           ".includes('round 2')", timeout=20_000)
    (ROOT / "artifacts").mkdir(exist_ok=True)
    page.locator("#rule-plot").screenshot(path=str(ROOT / "artifacts" / "cost-aware-round.png"))
    page.close()
    assert errors == []
    assert "Traceback" not in log_path.read_text()
