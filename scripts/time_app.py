"""Time the app as a user sees it, in headless Chromium on a warm app.

Starts `python app.py` on a free port, waits until the model pair is loaded (warm), keeps the
default example prompt, sets max new tokens (128 by default) and presses Run, `--runs` times. For
each run it reports, from a MutationObserver in the page (so the figures do not depend on how
often Python polls):

* the first pending draft token, and the first coloured (judged) token, in a policy column after Run;
* the longest gap between two page updates while the run was in progress (a column, a chart or
  the status line, which ticks while one long engine step runs);
* the whole comparison's time against the sum of its model runs as the engine reports them
  (target-only, every policy, and the oracle's preparation), read from the run's own JSON export;

and then the time from clicking an example button to its first played-back tokens and to its
four complete columns (after the playback).

    python scripts/time_app.py [--tokens 128] [--runs 2]

Run it alone: nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from itertools import pairwise
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the shared app harness
from app_server import CHROMIUM, CHROMIUM_ARGS, start_app, stop_app

POLICIES = ["static", "heuristic", "dynamic", "oracle"]

WATCH_JS = """(policies) => {
  const t = window.__specviz = {start: performance.now(), firstToken: null, firstDraft: null, updates: [],
                                 filled: {}, cleared: {}};
  const columns = document.querySelector('#columns');
  new MutationObserver(() => {
    const now = performance.now() - t.start;
    t.updates.push(now);
    if (t.firstToken === null && columns.querySelector('.specviz-column[data-state="running"] .tok:not(.tok-pending)')) {
      t.firstToken = now;
    }
    if (t.firstDraft === null && columns.querySelector('.specviz-column[data-state="running"] .tok-pending')) {
      t.firstDraft = now;
    }
    for (const p of policies) {  // complete in this run: seen without its metrics first (a new run)
      const done = document.querySelector('#col-' + p + ' .specviz-metrics');
      if (!done) t.cleared[p] = true;
      else if (t.cleared[p] && !(p in t.filled)) t.filled[p] = now;
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
  document.querySelector('#run').click();
}"""

DONE = ('#status .specviz-status[data-state="done"], #status .specviz-status[data-state="warning"], '
        '#status .specviz-status[data-state="error"]')


def model_seconds(url: str, page, old_href: str | None) -> tuple[float, dict[str, float]]:
    """Sum of the engine's own timings in the run's exported comparison.json (not the last run's)."""
    link = page.locator('#downloads a[href*="comparison.json"]').first
    deadline = time.monotonic() + 60
    while (href := link.get_attribute("href") if link.count() else None) in (None, old_href):
        if time.monotonic() > deadline:
            raise TimeoutError("the run's comparison.json never appeared in the downloads")
        time.sleep(0.2)
    with urllib.request.urlopen(href if href.startswith("http") else url.rstrip("/") + href) as response:
        data = json.loads(response.read())
    parts = {"target-only": data["baseline"]["wall_s"], "oracle preparation": data.get("oracle_s", 0.0)}
    parts.update({m["name"]: m["wall_s"] for m in data["modes"]})
    return sum(parts.values()), parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="max new tokens (default 128)")
    parser.add_argument("--runs", type=int, default=2,
                        help="how many runs in a row (default 2; 0: only the examples, with no model loaded)")
    args = parser.parse_args()

    started = time.perf_counter()
    log_path = Path(tempfile.mkdtemp(prefix="specviz-app-")) / "app.log"
    # --runs 0 times the examples alone, on an app that loads no model (nothing else on the CPU).
    proc, url = start_app(log_path, **({"SPECVIZ_PRELOAD": "0"} if args.runs == 0 else {}))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(url)
            if args.runs:
                page.wait_for_selector('#model-status .specviz-status[data-state="done"]', timeout=600_000)
                # Loaded is not yet warm: the app then runs a few tokens through both models.
                deadline = time.monotonic() + 300
                while "Warm-up finished" not in log_path.read_text() and time.monotonic() < deadline:
                    time.sleep(0.5)
            print(f"app serving and warm after {time.perf_counter() - started:.1f} s (log: {log_path})")
            tokens = page.locator("#max-new-tokens input[type=number]")
            tokens.fill(str(args.tokens))
            tokens.press("Enter")
            prompt = page.locator("#prompt textarea").input_value()
            print(f"prompt: {prompt[:70]!r}…, max new tokens {args.tokens}")
            for run in range(1, args.runs + 1):
                previous = page.locator('#downloads a[href*="comparison.json"]').first
                old_href = previous.get_attribute("href") if previous.count() else None
                page.evaluate(WATCH_JS, POLICIES)
                page.wait_for_selector('#status .specviz-status[data-state="running"]', timeout=60_000)
                page.wait_for_selector(DONE, timeout=1_800_000)
                t = page.evaluate("() => window.__specviz")
                filled = t["filled"]
                if len(filled) < len(POLICIES):
                    print(f"run {run}: only {len(filled)} columns filled: {page.inner_text('#status').strip()}")
                    continue
                done_ms = max(t["updates"])
                gaps = [(b - a, a) for a, b in pairwise(t["updates"])]
                longest = sorted(gaps, reverse=True)[:3]
                total_model, parts = model_seconds(url, page, old_href)
                draft = "never" if t["firstDraft"] is None else f"{t['firstDraft'] / 1000:.2f} s"
                print(f"run {run}: first pending draft token {draft}, first coloured (judged) token "
                      f"{t['firstToken'] / 1000:.2f} s after Run; longest gaps "
                      "between page updates " + ", ".join(f"{g / 1000:.2f} s (at {at / 1000:.1f} s)" for g, at in longest)
                      + f"; complete after {done_ms / 1000:.1f} s; "
                      f"model runs {total_model:.1f} s -> ratio {done_ms / 1000 / total_model:.3f}")
                print("        " + ", ".join(f"{name} {s:.1f} s" for name, s in parts.items()))
            for index in (0, 1, 0, 1):  # each example twice: the first click also pays the cold path
                previous = page.locator('#downloads a[href*="comparison.json"]').first
                old_href = previous.get_attribute("href") if previous.count() else None
                page.evaluate("""() => {
                  const t = window.__specviz = {start: performance.now(), done: null, firstFrame: null};
                  new MutationObserver(() => {
                    if (t.firstFrame === null && document.querySelector('#columns [data-state="replaying"] .tok'))
                      t.firstFrame = performance.now() - t.start;
                    /* complete: four finished columns after the playback began (the previous
                       example's finished columns are still there before it) */
                    if (t.done === null && t.firstFrame !== null
                        && document.querySelectorAll('#columns .specviz-metrics').length >= 4
                        && document.querySelector('#status').innerText.includes('Precomputed'))
                      t.done = performance.now() - t.start;
                  }).observe(document.body, {subtree: true, childList: true, characterData: true});
                }""")
                page.click(f"#example-{index}")
                page.wait_for_function("() => window.__specviz.done !== null", timeout=30_000)
                name = page.inner_text(f"#example-{index}").strip()
                shown = page.evaluate("() => window.__specviz")
                first = "no playback" if shown["firstFrame"] is None else f"{shown['firstFrame'] / 1000:.2f} s"
                print(f"example {name!r}: first played-back tokens {first}, four complete columns "
                      f"{shown['done'] / 1000:.2f} s after the click")
                # Its downloads are written after the view: wait for them, so that the next click
                # does not share the CPU with them.
                page.wait_for_function("""(old) => { const a = document.querySelector('#downloads a[href*="comparison.json"]');
                                           return a && a.getAttribute('href') !== old; }""", arg=old_href,
                                       timeout=60_000)
            browser.close()
    finally:
        stop_app(proc)


if __name__ == "__main__":
    main()
