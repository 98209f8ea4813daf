"""Time the app as a user sees it: from pressing Run to the first and to all four columns filled.

Starts `python app.py` on a free port, opens it in headless Chromium, keeps the default example
prompt (the coding one), sets max new tokens (128 by default) and presses Run, `--runs` times
(the first run may include loading the models if the app's background preload has not finished).

    SPECVIZ_CACHE=/tmp/specviz-cache python scripts/time_app.py [--tokens 128] [--runs 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the shared app harness
from app_server import CHROMIUM, CHROMIUM_ARGS, start_app, stop_app

POLICIES = ["static", "heuristic", "dynamic", "oracle"]

# Counts finished columns and notes when each appeared, from a MutationObserver in the page, so
# the times do not depend on how often Python polls.
WATCH_JS = """(policies) => {
  window.__specvizTimes = {start: performance.now(), filled: {}};
  const check = () => {
    for (const p of policies) {
      if (!(p in window.__specvizTimes.filled) && document.querySelector('#col-' + p + ' .specviz-metrics')) {
        window.__specvizTimes.filled[p] = performance.now() - window.__specvizTimes.start;
      }
    }
  };
  new MutationObserver(check).observe(document.body, {subtree: true, childList: true});
  document.querySelector('#run').click();
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="max new tokens (default 128)")
    parser.add_argument("--runs", type=int, default=2, help="how many runs in a row (default 2)")
    args = parser.parse_args()

    started = time.perf_counter()
    log_path = Path(tempfile.mkdtemp(prefix="specviz-app-")) / "app.log"
    proc, url = start_app(log_path)
    try:
        print(f"app serving after {time.perf_counter() - started:.1f} s (log: {log_path})")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(url)
            page.wait_for_selector("#run")
            tokens = page.locator("#max-new-tokens input[type=number]")
            tokens.fill(str(args.tokens))
            tokens.press("Enter")
            prompt = page.locator("#prompt textarea").input_value()
            print(f"prompt: {prompt[:70]!r}…, max new tokens {args.tokens}")
            for run in range(1, args.runs + 1):
                page.evaluate(WATCH_JS, POLICIES)
                # Ends when the run is done, or cut short (time budget: status "warning") or failed.
                page.wait_for_selector('#status .specviz-status[data-state="done"], '
                                       '#status .specviz-status[data-state="warning"], '
                                       '#status .specviz-status[data-state="error"]', timeout=1_800_000)
                filled = page.evaluate("() => window.__specvizTimes.filled")
                if len(filled) < len(POLICIES):
                    print(f"run {run}: only {len(filled)} columns filled: {page.inner_text('#status').strip()}")
                    continue
                order = sorted(filled.items(), key=lambda kv: kv[1])
                steps = ", ".join(f"{policy} {ms / 1000:.1f} s" for policy, ms in order)
                print(f"run {run}: first column after {order[0][1] / 1000:.1f} s, all four after "
                      f"{order[-1][1] / 1000:.1f} s ({steps})")
                print(f"        {page.inner_text('#status').strip()}")
            browser.close()
    finally:
        stop_app(proc)


if __name__ == "__main__":
    main()
