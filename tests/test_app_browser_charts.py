"""The explaining charts and presentation mode in headless Chromium, from an imported comparison.

No model runs: the shared app with SPECVIZ_PRELOAD=0 (conftest.modelless_server) is fed a hand-made comparison JSON
through its import box, so every chart has data within seconds.
Run: python -m pytest tests/test_app_browser_charts.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest
from app_server import CHROMIUM

from specviz.decoding.trace import Baseline, Comparison, DraftAlongReference, Round, Trace

pytestmark = [pytest.mark.browser, pytest.mark.slow]

sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed", allow_module_level=True)

PLOTS = ["lookahead-plot", "progress-plot", "calibration-plot", "positions-plot", "work-plot", "sweep-plot"]
FOUR = ["static", "heuristic", "dynamic", "oracle"]


def hand_made_comparison() -> Comparison:
    """Four greedy policies over a 12-token answer; the draft agrees with it except at positions 3 and 8."""
    reference = list(range(10, 22))
    along = DraftAlongReference([t if i not in (3, 8) else 99 for i, t in enumerate(reference)],
                                [0.9, 0.8, 0.7, 0.3, 0.95, 0.9, 0.6, 0.5, 0.2, 0.9, 0.85, 0.8], [0.5] * 12)
    ideal = [3, 2, 1, 0, 4, 3, 2, 1, 0, 3, 2, 1]

    def trace(policy, label, params, shape):
        rounds, position = [], 0
        for i, (drafted, accepted) in enumerate(shape):
            ids = [along.tokens[min(position + j, 11)] for j in range(drafted)]
            probs = [along.probs[min(position + j, 11)] for j in range(drafted)]
            rounds.append(Round(index=i, position=position, budget=drafted, draft_ids=ids, draft_probs=probs,
                                accepted=accepted, target_id=reference[min(position + accepted, 11)],
                                draft_s=0.01 * drafted, verify_s=0.03, oracle_ideal=ideal[position],
                                draft_texts=[f"<t{t}>" for t in ids], draft_entropies=[0.5] * drafted))
            position += accepted + 1
        return Trace(policy=policy, label=label, params=params, token_ids=reference, rounds=rounds,
                     wall_s=sum(r.draft_s + r.verify_s for r in rounds) + 0.01, stop_reason="max_new_tokens",
                     lossless=True)

    traces = [trace("static", "static k=5", {"num_assistant_tokens": 5}, [(5, 3), (5, 3), (5, 1)]),
              trace("heuristic", "heuristic k0=5", {"num_assistant_tokens": 5}, [(5, 3), (4, 3), (3, 1)]),
              trace("dynamic", "dynamic t=0.4", {"assistant_confidence_threshold": 0.4, "max_tokens": 20},
                    [(4, 3), (5, 3), (2, 2)]),
              trace("oracle", "oracle", {}, [(3, 3), (3, 3), (3, 2)])]
    return Comparison(preset="smollm2-135m-int8", prompt="hand-made", max_new_tokens=12,
                      baseline=Baseline(token_ids=reference, wall_s=0.5, stop_reason="max_new_tokens"),
                      traces=traces, oracle_ideal=ideal, draft_along_reference=along)


@pytest.fixture(scope="module")
def comparison_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("import") / "comparison.json"
    path.write_text(hand_made_comparison().to_json(), encoding="utf-8")
    return path


def import_comparison(page, url, path) -> None:
    page.goto(url)
    page.wait_for_selector("#import input[type=file]", state="attached", timeout=60_000)
    page.set_input_files("#import input[type=file]", str(path))
    page.wait_for_function("() => document.querySelector('#status')?.textContent.includes('Imported')",
                           timeout=30_000)
    for plot in PLOTS:
        page.wait_for_selector(f"#{plot} .js-plotly-plot", state="attached", timeout=30_000)


def plot_data(page, plot: str) -> list[dict]:
    return page.evaluate(f"""() => document.querySelector('#{plot} .js-plotly-plot').data.map(d => ({{
        series: d.meta && d.meta.series, label: d.meta && d.meta.label, x: Array.from(d.x || []),
        y: Array.from(d.y || []), hover: d.hovertext ? Array.from(d.hovertext) : []}}))""")


def svg_text(page, selector: str) -> str:
    return page.locator(selector).first.text_content() or ""


def test_every_chart_renders_from_an_imported_comparison(modelless_app, browser, comparison_file):
    url, log_path = modelless_app
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    import_comparison(page, url, comparison_file)

    lookahead = plot_data(page, "lookahead-plot")
    assert sum(d["series"] == "oracle_ideal" for d in lookahead) == 4  # one panel per policy
    static_beyond = next(d for d in lookahead if d["series"] == "beyond_ideal" and d["label"] == "static k=5")
    assert static_beyond["y"] == [2, 2, 4]
    assert "&lt;t10&gt;" in static_beyond["hover"][0] and "too long" in static_beyond["hover"][0]
    assert page.locator("#lookahead-plot .barlayer .point").count() >= 12  # bars drawn, not just data

    calibration = plot_data(page, "calibration-plot")
    assert sum(next(d for d in calibration if d["series"] == "count")["y"]) > 0
    assert "AUC" in svg_text(page, "#calibration-plot .gtitle")
    assert any(d["series"] == "position" for d in plot_data(page, "positions-plot"))
    work = plot_data(page, "work-plot")
    assert next(d for d in work if d["series"] == "target_passes")["x"] == [3, 3, 3, 3]

    # The what-if's draft cost: starts at the measured ratio; a cheaper draft says "set by hand".
    cost = page.locator("#draft-cost input[type=number]")
    assert float(cost.input_value()) == pytest.approx(0.33)  # 0.01 s per draft pass, 0.03 s per target pass
    def title() -> str:
        return svg_text(page, "#sweep-plot .gtitle")

    assert "as measured" in title()
    cost.fill("0.05")
    cost.press("Enter")
    page.locator("#draft-cost input[type=range]").dispatch_event("pointerup")
    page.wait_for_function("() => document.querySelector('#sweep-plot .gtitle').textContent.includes('by hand')",
                           timeout=15_000)
    assert "0.05 of a target pass" in title()
    page.close()
    assert errors == []
    assert "Traceback" not in log_path.read_text()


def horizontal_overflow(page) -> int:
    return page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")


def four_columns_visible(page) -> list[dict]:
    return page.evaluate("""(policies) => policies.map(p => {
        const box = document.querySelector('#col-' + p).getBoundingClientRect();
        return {policy: p, left: box.left, right: box.right, width: box.width, height: box.height};
    })""", FOUR)


@pytest.mark.parametrize("how", ["url", "toggle"])
def test_presentation_mode_fits_1280x720(modelless_app, browser, comparison_file, how):
    url, log_path = modelless_app
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    if how == "url":
        import_comparison(page, url + "?present=1", comparison_file)
        page.wait_for_function("() => document.body.classList.contains('specviz-present')", timeout=15_000)
        assert page.locator("#present input[type=checkbox]").is_checked()
    else:
        import_comparison(page, url, comparison_file)
        assert not page.evaluate("() => document.body.classList.contains('specviz-present')")
        page.locator("#present input[type=checkbox]").check()
        page.wait_for_function("() => document.body.classList.contains('specviz-present')", timeout=15_000)
    page.wait_for_timeout(500)  # let plotly re-layout at the new width
    assert horizontal_overflow(page) <= 0
    for box in four_columns_visible(page):
        assert box["width"] > 150 and box["height"] > 0, box
        assert box["left"] >= 0 and box["right"] <= 1280, box
    tops = page.evaluate("() => ['static', 'oracle'].map(p => document.querySelector('#col-' + p)"
                         ".getBoundingClientRect().top)")
    assert abs(tops[0] - tops[1]) < 5  # the four columns side by side, not wrapped
    for hidden in ("#specviz-intro", "#examples", "#policy-settings", "#summary", "#sweep-accordion",
                   "#explain-accordion", "#progress-plot", "#files-accordion"):
        assert not page.locator(hidden).first.is_visible(), hidden
    for shown in ("#prompt", "#run", "#lookahead-plot", "#present"):
        assert page.locator(shown).first.is_visible(), shown
    font = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#col-static .specviz-tokens'))"
                         ".fontSize)")
    assert font >= 20
    page.locator("#present input[type=checkbox]").uncheck()
    page.wait_for_function("() => !document.body.classList.contains('specviz-present')", timeout=15_000)
    assert page.locator("#summary").first.is_visible()
    page.close()
    assert "Traceback" not in log_path.read_text()
