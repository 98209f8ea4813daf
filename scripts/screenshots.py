"""Retake the README's screenshots of the charts from a real run, without running any model.

Starts the app with SPECVIZ_PRELOAD=0, opens the first example (a real comparison computed
ahead by scripts/make_examples.py) in headless Chromium, and saves docs/lookahead.png (lookahead
against the oracle, one panel per policy), docs/charts.png (calibration and where the work went)
docs/present.png (presentation mode at 1280x720) and docs/screenshot.png (the page down to the
lookahead chart, for the README). The tests write their own screenshots under artifacts/ only,
so a test run leaves docs/ as it was.

    python scripts/screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the shared app harness
from app_server import CHROMIUM, CHROMIUM_ARGS, ROOT, start_app, stop_app

DOCS = ROOT / "docs"
FOUR_COLUMNS = ("() => ['static', 'heuristic', 'dynamic', 'oracle']"
                ".every(p => document.querySelector('#col-' + p + ' .specviz-metrics'))")


def main() -> None:
    proc, url = start_app(Path(tempfile.mkdtemp(prefix="specviz-shots-")) / "app.log", SPECVIZ_PRELOAD="0")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1376, "height": 900})
            page.goto(url)
            page.click("#example-0")
            page.wait_for_function(FOUR_COLUMNS, timeout=60_000)
            page.wait_for_selector("#lookahead-plot .js-plotly-plot", timeout=30_000)
            page.wait_for_timeout(1500)  # plotly's drawing and the "Why?" charts after the view step
            page.locator("#lookahead-plot").screenshot(path=str(DOCS / "lookahead.png"))
            page.locator("#explain-accordion").screenshot(path=str(DOCS / "charts.png"))
            # The README's picture: the page from the top down to the lookahead chart (the whole page
            # is several screens tall and unreadable at README width).
            bottom = page.evaluate("() => { const r = document.querySelector('#lookahead-plot')"
                                   ".getBoundingClientRect(); return r.bottom + window.scrollY; }")
            page.screenshot(path=str(DOCS / "screenshot.png"), full_page=True,
                            clip={"x": 0, "y": 0, "width": 1376, "height": bottom + 8})

            # Presentation mode hides the example buttons: open the example first, then switch it on.
            present = browser.new_page(viewport={"width": 1280, "height": 720})
            present.goto(url)
            present.click("#example-0")
            present.wait_for_function(FOUR_COLUMNS, timeout=60_000)
            present.check("#present input")
            present.wait_for_timeout(1000)
            present.screenshot(path=str(DOCS / "present.png"))
            browser.close()
    finally:
        stop_app(proc)
    print("wrote docs/lookahead.png, docs/charts.png, docs/screenshot.png, docs/present.png")


if __name__ == "__main__":
    main()
