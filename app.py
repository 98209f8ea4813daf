"""SpecViz web app: one prompt, four lookahead policies side by side.

UI and event wiring only. Model work is in specviz.pipeline, formatting and input checks in
specviz.ui_format, ui_inputs, ui_replay and ui_import (all testable without a browser).

    python app.py [--host HOST] [--port PORT] [--share]
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from html import escape as html_escape
from pathlib import Path

import gradio as gr
import pandas as pd

from specviz import api
from specviz.analysis import measured_draft_cost_ratio
from specviz.errors import SpecVizError
from specviz.explain_plots import explain_figures
from specviz.export import SWEEP_HEADERS, sweep_rows, write_all
from specviz.heartbeat import with_heartbeat
from specviz.models import DEFAULT_PRESET, PRESETS, ModelLoadError, ModelPair, get_pair, load_state, wait_for_pair
from specviz.pacing import Pacer
from specviz.pipeline import Limits, compare, make_request, run_comparison
from specviz.plots import lookahead_figure, progress_figure, sweep_figure, threshold_figure
from specviz.policies import DEFAULT_MODES
from specviz.presentation import FOLLOW_JS, PRESENT_CSS, TOGGLE_JS, presentation_requested
from specviz.render import LEGEND_HTML, SUMMARY_HEADERS, TOKEN_CSS, render_trace, summary_rows
from specviz.sweep import sweep
from specviz.ui_format import (
    ALL_COLUMNS,
    EXTRA_COLUMNS,
    active_columns,
    column_htmls,
    done_message,
    load_status_html,
    placeholder_html,
    playback_htmls,
    preset_info,
    status_html,
)
from specviz.ui_import import MAX_IMPORT_BYTES, example_comparison, load_comparison_file, load_examples
from specviz.ui_inputs import max_new_tokens_value, modes_string, seed_value, server_options, temperature_value
from specviz.ui_replay import REPLAY_CSS, REPLAY_REVEAL_JS, replay_html, replay_step

logger = logging.getLogger("specviz.app")

STUDY_URL = "https://huggingface.co/blog/dynamic_speculation_lookahead"

INTRO_MD = f"""\
## SpecViz: where speculative decoding spends its work
A small *draft* model guesses tokens, the big *target* checks them in one pass: each column runs one \
**lookahead** policy and colours every token by its fate ([the study]({STUDY_URL})).
"""

APP_CSS = """
#specviz-intro h2 { margin: 0 0 4px 0; font-size: 1.45em; }
#specviz-intro p { margin: 0; font-size: 16px; line-height: 1.45; }
.specviz-status { font-size: 16px; padding: 6px 10px; border-radius: 6px; min-height: 1.6em; }
.specviz-status[data-state="error"] { background: #fde2c4; color: #4a2200; border: 2px solid #b34700; }
.specviz-status[data-state="warning"] { background: #fff2a8; color: #3a3000; }
.specviz-status[data-state="done"] { background: rgba(0, 114, 178, 0.10); }
.specviz-col-title { font-size: 19px; font-weight: bold; margin-bottom: 2px; }
.specviz-col-detail { font-weight: normal; font-size: 15px; opacity: 0.8; }
.specviz-placeholder { font-size: 17px; padding: 24px 8px; opacity: 0.7; font-style: italic; }
.specviz-column[data-state="running"] .specviz-placeholder { opacity: 1; font-weight: bold; }
#status { min-height: 0; }
#model-status .specviz-status { padding: 0 10px; min-height: 0; }
#model-status, #status, #legend { padding-top: 0; padding-bottom: 0; }
#top, #options-row { gap: 10px; }
.specviz-column { border: 1px solid rgba(128, 128, 128, 0.45); border-radius: 8px; padding: 6px 8px; }
.specviz-column[data-state="running"] { border: 2px solid #0072B2; }
.specviz-column[data-state="replaying"] { border: 2px dashed #0072B2; }
#replay { outline: none; }
#replay:focus-within { box-shadow: 0 0 0 3px rgba(0, 114, 178, 0.45); border-radius: 8px; }
.specviz-replay { font-size: 19px; line-height: 1.6; }
.specviz-replay .replay-head { font-size: 22px; font-weight: bold; margin-bottom: 6px; }
.specviz-replay .replay-line { margin: 6px 0; }
.specviz-replay .replay-context { font-family: ui-monospace, Menlo, Consolas, monospace; white-space: pre-wrap;
  overflow-wrap: anywhere; background: rgba(128, 128, 128, 0.10); padding: 2px 6px; border-radius: 4px; }
.specviz-replay table.replay-drafts { border-collapse: collapse; font-size: 19px; margin: 4px 0; }
.specviz-replay table.replay-drafts th, .specviz-replay table.replay-drafts td {
  border: 1px solid rgba(128, 128, 128, 0.45); padding: 3px 10px; text-align: left; }
.specviz-replay table.replay-drafts td .tok { font-family: ui-monospace, Menlo, Consolas, monospace;
  white-space: pre; font-size: 20px; }
.specviz-replay .replay-counts { font-size: 20px; }
.specviz-replay-context-title { font-size: 17px; font-weight: bold; margin-top: 10px; }
#replay-help { font-size: 15px; opacity: 0.8; }
.specviz-live { font-size: 15px; margin-top: 6px; padding: 4px 6px; border-radius: 4px;
  background: rgba(0, 114, 178, 0.08); }
#examples { align-items: center; gap: 6px; }
#examples-label { flex: 0 0 auto; min-width: 0; }
"""

# Left/right arrows step the replay while focus is inside the replay panel (click it first); never
# while typing in a text box. The buttons do the work, so keys and clicks behave the same.
REPLAY_JS = """
() => {
  const panel = () => document.getElementById('replay');
  const arm = () => { const p = panel(); if (p && !p.hasAttribute('tabindex')) p.setAttribute('tabindex', '0'); };
  arm();
  new MutationObserver(arm).observe(document.body, {childList: true, subtree: true});
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const p = panel();
    const active = document.activeElement;
    if (!p || !active || !p.contains(active)) return;
    const tag = active.tagName;
    if (tag === 'TEXTAREA' || tag === 'SELECT' || active.isContentEditable) return;
    if (tag === 'INPUT') return;  /* the slider's own arrows, the number box, the dropdown */
    const button = document.querySelector(event.key === 'ArrowLeft' ? '#replay-prev' : '#replay-next');
    if (button) { event.preventDefault(); button.click(); }
  });
}
"""

# The page's one load-time script: replay keys and its draft-then-verdict reveal, and columns
# that follow the live edge.
PAGE_JS = (f"() => {{ ({REPLAY_JS.strip()})(); ({REPLAY_REVEAL_JS.strip()})(); "
           f"({FOLLOW_JS.strip()})(); }}")

# Model work is serialized: a run cancelled by Stop finishes its current step in a worker thread,
# and the next run must not start computing on the shared pair until that step is over.
MODEL_LOCK = threading.Lock()


def _fit(fig):
    """Plots sit in half-width columns: put the legend under the plot so it never covers the title.
    A figure that sets its own height (the lookahead panels, one per policy) keeps its layout."""
    if fig.layout.height is not None:
        return fig
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0},
                      margin={"t": 60, "b": 20, "l": 60, "r": 20}, height=460, title={"font": {"size": 17}})
    return fig


def _table(comparison) -> pd.DataFrame:
    rows = summary_rows(comparison) if comparison is not None else []
    return pd.DataFrame(rows, columns=SUMMARY_HEADERS)


def _outputs(status: str, columns: list[str], lookahead=None, progress=None, table=None, state=None,
             eos=None) -> tuple:
    """The handler's outputs in order; None for a plot/table/state means: leave it as it is."""
    skip = gr.skip()
    return (status, *columns,
            skip if lookahead is None else lookahead,
            skip if progress is None else progress,
            skip if table is None else table,
            skip if state is None else state,
            skip if eos is None else eos)


def _columns(comparison, active=ALL_COLUMNS, **kwargs) -> list[str]:
    """HTML for all six columns: the active ones from the comparison, the others say "not run"."""
    shown = dict(zip(active, column_htmls(comparison, order=active, **kwargs)))
    return [shown.get(policy) or placeholder_html(policy, "skipped", "not run (tick its box under Policy settings)")
            for policy in ALL_COLUMNS]


# Streaming: the pipeline reports every draft step and every round; the page gets a column update
# about this often (specviz/pacing.py picks frames that show a pending draft), and charts (the
# costliest part to build and to draw) at most once a second.
COLUMN_EVERY_S = 0.4
CHARTS_EVERY_S = 1.0
# How often the engine's worker is asked for news, and how long the page may then stay still.
HEARTBEAT_S = 0.25
STILL_RUNNING_S = 0.4


def _charts(comparison) -> tuple:
    """The two charts under the columns, built from a comparison (finished or mid-run)."""
    return _fit(lookahead_figure(comparison)), _fit(progress_figure(comparison))


def _with_live(comparison, live):
    """The comparison with the running policy's rounds so far, for charts drawn mid-run."""
    return comparison if live is None else replace(comparison, traces=[*comparison.traces, live])


def run(prompt, preset, max_new_tokens, static_k, heuristic_k, threshold, dynamic_max, temperature=0, seed=None,
        adaptive_on=False, adaptive_t0=0.4, entropy_on=False, entropy_h=1.0):
    """Run the comparison, streaming every column round by round."""
    comparison = None
    active = active_columns(bool(adaptive_on), bool(entropy_on))
    try:
        limits = Limits.from_env()
        modes = modes_string(static_k, heuristic_k, threshold, dynamic_max,
                             adaptive_t0 if adaptive_on else None, entropy_h if entropy_on else None)
        request = make_request(prompt, modes, max_new_tokens_value(max_new_tokens, limits.max_new_tokens),
                               temperature=temperature_value(temperature), seed=seed_value(seed), limits=limits)
        logger.info("run: preset=%s max_new_tokens=%d modes=%s temperature=%g prompt_chars=%d", preset,
                    request.max_new_tokens, modes, request.temperature, len(request.prompt))
        pair = None
        for state in wait_for_pair(preset):
            if isinstance(state, ModelPair):
                pair = state
            else:  # a Run pressed during a cold start waits for it, saying which step runs
                yield (load_status_html(state, preset), *_columns(None, active), None, None, _table(None), None,
                       gr.skip())
        eos = sorted(pair.eos_token_ids)
        yield _outputs(status_html("Starting…", "running"), _columns(None, active), eos=eos)

        # The engine steps in a worker thread; while one long step runs (an oracle round drafting
        # 28 tokens, a long stretch of the oracle's search) the status still ticks.
        steps = with_heartbeat(run_comparison(pair, request, limits), HEARTBEAT_S, MODEL_LOCK)
        run_started = time.monotonic()
        pacer = Pacer(COLUMN_EVERY_S)
        sent_charts, sent_page = run_started, run_started  # the first chart update comes with data
        finished, judged_on_page = 0, 0  # policies finished; rounds of the running one on the page
        message = "Starting"
        on_page: dict[int, str] = {}

        def changed(htmls: list[str]) -> list:
            """Only the columns whose HTML changed travel to the page."""
            out = [gr.skip() if on_page.get(i) == h else h for i, h in enumerate(htmls)]
            on_page.update(enumerate(htmls))
            return out

        def running(text: str) -> str:
            return status_html(f"{text}… {time.monotonic() - run_started:.1f} s", "running")

        for update in steps:
            now = time.monotonic()
            if update is None:  # a long engine step: the status says the run goes on
                if now - sent_page >= STILL_RUNNING_S:
                    sent_page = now
                    yield _outputs(running(message), [gr.skip()] * len(ALL_COLUMNS))
                continue
            comparison, live, message = update.comparison, update.running, update.message
            ended = len(comparison.traces) != finished  # a policy just finished: show it whole
            if ended:
                judged_on_page = 0
            judged = 0 if live is None else len(live.rounds)
            first_verdict = judged > 0 and judged_on_page == 0
            if not pacer.due(now, pending=live is not None and live.pending is not None,
                             must=ended or first_verdict):
                continue
            finished, sent_page, judged_on_page = len(comparison.traces), now, judged
            charts = ended or now - sent_charts >= CHARTS_EVERY_S
            if charts:
                sent_charts = now
                shown = _with_live(comparison, live)
            yield _outputs(running(message), changed(_columns(comparison, active, live=live)),
                           *(_charts(shown) if charts else (None, None)),
                           _table(comparison) if ended else None, comparison if ended else None)
        if comparison is not None:
            state = "warning" if comparison.partial else "done"
            note = "not run: time budget ran out" if comparison.partial else None
            logger.info("run finished: %d policies%s in %.1f s, of which model work %.1f s (as the engine reports it)",
                        len(comparison.traces), " (partial)" if comparison.partial else "",
                        time.monotonic() - run_started, comparison.model_s())
            yield _outputs(status_html(done_message(comparison), state),
                           _columns(comparison, active, running=False, note=note),
                           *_charts(comparison), _table(comparison),
                           comparison)
    except SpecVizError as error:  # bad input, or a model pair that cannot load (cause and fix included)
        if isinstance(error, ModelLoadError):
            logger.error("Loading %s failed: %s", preset, error)
        yield _outputs(status_html(str(error), "error"),
                       _columns(comparison, active, running=False, note="no result (see the message above)"))
    except Exception:  # anything unexpected: log it, tell the user, end the spinner
        logger.exception("SpecViz run failed")
        yield _outputs(status_html("Something went wrong on the server; the error was logged. "
                                   "Try again, perhaps with fewer tokens.", "error"),
                       _columns(comparison, active, running=False, note="no result"))


def stop(comparison):
    """After Stop cancelled the run: keep finished columns, mark the others as stopped."""
    active = [p for p in ALL_COLUMNS if p not in EXTRA_COLUMNS or (
        comparison is not None and any(t.policy == p for t in comparison.traces))]
    return (status_html("Stopped. Finished columns are kept; press Run to start again.", "warning"),
            *_columns(comparison, active, running=False, note="stopped"))


# ---- after a run or an import: what-if sweep, threshold chart, replay, downloads --------------

REPLAY_EMPTY = '<div class="specviz-replay"><i>Run a comparison (or import one) to step through its rounds.</i></div>'


def what_if(comparison, eos, draft_cost=None):
    """The what-if sweep's chart and table; `draft_cost`: a draft pass as a fraction of a target
    pass (None: as measured in the run)."""
    if comparison is None or comparison.draft_along_reference is None or not comparison.traces:
        return gr.skip(), gr.skip()
    result = sweep(comparison, frozenset(eos or ()), None if draft_cost is None else float(draft_cost))
    return (gr.Plot(sweep_figure(result, comparison), visible=True),
            gr.Dataframe(pd.DataFrame(sweep_rows(result), columns=SWEEP_HEADERS), visible=True))


def views(comparison, eos):
    """The views computed from a finished comparison (milliseconds: no models involved)."""
    skip = gr.skip()
    if comparison is None or not comparison.traces:
        return (skip,) * 14
    ratio = measured_draft_cost_ratio(comparison)
    cost = gr.Slider(value=round(min(1.0, max(0.01, ratio)), 2) if ratio else 0.5,
                     visible=comparison.draft_along_reference is not None)
    explain = explain_figures(comparison)
    explained = (_fit(explain["calibration"]), _fit(explain["positions"]), explain["work"])
    if comparison.draft_along_reference is not None:
        sweep_plot, sweep_table = what_if(comparison, eos)
        note = ("Every other lookahead setting replayed on this run's answer, without running the models again: "
                "the draft's guess at each position depends on the text alone, so its guesses along the answer give "
                "every setting's target passes exactly, and its draft passes exactly for the settings run (stars). "
                "For the others, the tokens a draft would propose after a rejected one are unseen: their draft "
                "passes can be off by the few calls where a confidence rule would have stopped there. Times are "
                "modeled from this run's per-pass costs; set the draft's cost below to see what the same passes "
                "would give with a cheaper draft.")
    else:
        sweep_plot, sweep_table = gr.Plot(None, visible=False), gr.Dataframe(visible=False)
        note = ("The what-if sweep replays a greedy run (temperature 0); this run was sampled"
                f" (T={comparison.temperature:g}), so there is no single answer to replay."
                if comparison.temperature > 0 else "This run has no draft table to replay (it was cut short).")
    adaptive = any(t.policy == "adaptive" for t in comparison.traces)
    threshold_plot = gr.Plot(_fit(threshold_figure(comparison)) if adaptive else None, visible=adaptive)
    labels = [t.label for t in comparison.traces]
    trace = comparison.traces[0]
    extra = [gr.Column(visible=any(t.policy == p for t in comparison.traces)) for p in EXTRA_COLUMNS]
    return (sweep_plot, sweep_table, note, cost, *explained, threshold_plot,
            gr.Dropdown(choices=labels, value=trace.label, interactive=True),
            gr.Slider(minimum=1, maximum=max(2, len(trace.rounds)), value=1, step=1, interactive=True),
            _replay_panel(comparison, trace.label, 1, eos), *extra)


def _replay_panel(comparison, label, number, eos) -> str:
    if comparison is None or not label:
        return REPLAY_EMPTY
    try:
        trace = comparison.trace(label)
    except KeyError:
        return REPLAY_EMPTY
    if not trace.rounds:
        return f'<div class="specviz-replay">{html_escape(label)} has no rounds.</div>'
    step = replay_step(trace, int(number or 1) - 1, frozenset(eos or ()))
    return (replay_html(step) + '<div class="specviz-replay-context-title">The round in the whole answer '
            '(outlined):</div>' + render_trace(trace, current_round=trace.rounds[step.index].index))


def replay_pick(comparison, label, eos):
    """A policy picked in the replay dropdown: back to its first round."""
    rounds = 1
    if comparison is not None and label:
        try:
            rounds = max(1, len(comparison.trace(label).rounds))
        except KeyError:
            pass
    return gr.Slider(minimum=1, maximum=max(2, rounds), value=1), _replay_panel(comparison, label, 1, eos)


def replay_move(comparison, label, number, eos, delta):
    if comparison is None or not label:
        return gr.skip(), REPLAY_EMPTY
    try:
        rounds = max(1, len(comparison.trace(label).rounds))
    except KeyError:
        return gr.skip(), REPLAY_EMPTY
    number = max(1, min(rounds, int(number or 1) + delta))
    return number, _replay_panel(comparison, label, number, eos)


def exports(comparison, eos, png=False):
    """Write the downloads into a fresh temporary folder (never a path from the visitor)."""
    if comparison is None:
        return gr.skip(), gr.skip()
    try:
        folder = Path(tempfile.mkdtemp(prefix="specviz-export-"))
        paths, warnings = write_all(comparison, folder, frozenset(eos or ()), png=png)
    except Exception:
        logger.exception("export failed")
        return gr.skip(), "The downloads could not be written; the error was logged."
    kinds = "JSON, CSV and charts as HTML" + (" and PNG" if png and not warnings else "")
    note = f"Ready: {kinds}." + (" " + " ".join(warnings) if warnings else "")
    return [str(p) for p in paths], note


def import_json(path):
    """Show a comparison from an uploaded JSON file, without any model."""
    try:
        comparison = load_comparison_file(path)
    except SpecVizError as error:
        return _outputs(status_html(f"Import failed: {error}", "error"), [gr.skip()] * len(ALL_COLUMNS))
    except Exception:
        logger.exception("import failed")
        return _outputs(status_html("Import failed: the file could not be read.", "error"),
                        [gr.skip()] * len(ALL_COLUMNS))
    mode = "sampled" if comparison.temperature > 0 else "greedy"
    return _shown(comparison, f"Imported a {mode} run of {comparison.preset} ({len(comparison.traces)} policies, "
                              f"{comparison.max_new_tokens} max new tokens); no model was run.")


def _example_opener(example):
    """The click handler of one example button (a generator function, so gradio streams it)."""
    def open_example():
        yield from show_example(example)
    return open_example


def _present_columns(comparison) -> list[str]:
    """The columns a finished comparison fills: the four policies, and any extra one it ran."""
    return [p for p in ALL_COLUMNS if p not in EXTRA_COLUMNS or any(t.policy == p for t in comparison.traces)]


def _shown(comparison, message: str) -> tuple:
    """The whole view of a finished comparison that needs no model (an import, an example)."""
    return _outputs(status_html(message, "done"), _columns(comparison, _present_columns(comparison), running=False),
                    *_charts(comparison), _table(comparison),
                    comparison, [])


# Opening an example plays its rounds back as they streamed (drafts pending, then judged), fast
# enough that the example is complete in under a second.
PLAYBACK_FRAMES = 4
PLAYBACK_FRAME_S = 0.06


def show_example(example):
    """An example prompt: into the prompt box, and its comparison computed ahead, played back
    round by round and then shown whole."""
    try:
        comparison = example_comparison(example)
    except SpecVizError:
        logger.exception("example %s could not be loaded", example.name)
        comparison = None
    if comparison is None:
        yield (example.prompt, *_outputs(status_html("Example prompt ready: press Run.", "idle"),
                                         [gr.skip()] * len(ALL_COLUMNS)))
        return
    made = comparison.provenance or {}
    message = (f"Precomputed example ({comparison.preset}, {comparison.max_new_tokens} max new tokens, "
               f"{made.get('date', 'ahead')}, {made.get('machine', 'another machine')}): no model ran; Run recomputes it.")
    present = _present_columns(comparison)
    playing = status_html("Playing the precomputed example back, round by round…", "running")
    for step, htmls in enumerate(playback_htmls(comparison, present, PLAYBACK_FRAMES)):
        shown = dict(zip(present, htmls))
        yield (example.prompt if step == 0 else gr.skip(),
               *_outputs(playing, [shown.get(p, gr.skip()) for p in ALL_COLUMNS]))
        time.sleep(PLAYBACK_FRAME_S)
    # The finished columns first, then the charts (the costlier part to build and to draw).
    yield (gr.skip(), *_outputs(status_html(message, "done"), _columns(comparison, present, running=False)))
    yield (gr.skip(), *_outputs(gr.skip(), [gr.skip()] * len(ALL_COLUMNS), *_charts(comparison),
                                _table(comparison), comparison, []))


# ---- the public API: what a script calls (gradio_client), data in and out ---------------------


API_SERVER_ERROR = "Something went wrong on the server; the error was logged."


@contextmanager
def _api_errors():
    """Around a public endpoint's work: a SpecVizError (bad input, unknown preset or example, a pair
    that cannot load) becomes the client's error message, anything else is logged."""
    try:
        yield
    except SpecVizError as error:
        raise gr.Error(str(error), print_exception=False) from None
    except Exception:
        logger.exception("API call failed")
        raise gr.Error(API_SERVER_ERROR, print_exception=False) from None


def _api_call(work, *args):
    with _api_errors():
        return work(*args)


def compare_api(prompt: str, preset: str = DEFAULT_PRESET, max_new_tokens: int = 128,
                modes: str = DEFAULT_MODES, temperature: float = 0.0, seed: int = 0) -> Iterator[dict]:
    """Run a prompt through each lookahead policy (modes, e.g. "static:5,heuristic:5,dynamic:0.4,oracle";
    also adaptive:T0 and entropy:H) and target-only decoding on the model pair `preset` (see /presets),
    greedy at temperature 0 or sampled with `seed`, for at most max_new_tokens new tokens. Returns the
    comparison as JSON, the same as `python -m specviz compare --json`: per policy its tokens, every
    round (draft tokens, probabilities, accepted count), target and draft passes, times and the lossless
    check. Streams: the comparison so far after each policy; the last value is the whole comparison.

    Args:
        prompt: the question or task; the pair's chat template is applied
        preset: the model pair, a name from the presets endpoint
        max_new_tokens: at most this many new tokens (1 to the server's limit, 512 by default)
        modes: the policies, as on the command line
        temperature: 0 for greedy decoding (lossless, and the oracle runs); above 0 samples
        seed: the sampling seed (used only when temperature is above 0)
    """
    logger.info("run: preset=%s max_new_tokens=%s modes=%s temperature=%s prompt_chars=%d (API)", preset,
                max_new_tokens, modes, temperature, len(prompt) if isinstance(prompt, str) else -1)
    with _api_errors():
        comparison = None
        for comparison in api.compare(prompt, preset, max_new_tokens, modes, temperature, seed, MODEL_LOCK):
            yield comparison
        logger.info("run finished: %d policies (API)", len(comparison["modes"]) if comparison else 0)


def presets_api() -> list:
    """The model pairs a comparison can run on: name, description, target and draft, and whether
    the pair is bundled (offline)."""
    return _api_call(api.presets)


def examples_api() -> list:
    """The example prompts the page offers: name and prompt."""
    return _api_call(api.examples)


def example_api(name: str) -> dict:
    """An example's comparison, computed ahead (no model runs), in the same JSON as `compare`.

    Args:
        name: the example's name, one of those from the `examples` endpoint
    """
    return _api_call(api.example, name)


def _preloading() -> bool:
    return os.environ.get("SPECVIZ_PRELOAD", "1") != "0"


def model_status(preset):
    """The model-pair line, polled once a second until the pair is loaded (or has failed).

    A page opened while the preload thread is only starting sees "not loaded": keep polling then."""
    state = load_state(preset)
    waiting = state.phase == "loading" or (state.phase == "not loaded" and _preloading() and preset == DEFAULT_PRESET)
    return load_status_html(state, preset), gr.Timer(active=waiting)


def presentation_from_url(request: gr.Request) -> bool:
    return presentation_requested(dict(request.query_params))


def build_demo() -> gr.Blocks:
    limits = Limits.from_env()
    examples = load_examples()
    with gr.Blocks(title="SpecViz: speculative decoding lookahead", fill_width=True,
                   analytics_enabled=False) as demo:
        # The first screen holds the prompt, Run, the examples and one row of settings, so that the
        # four columns and their first tokens are in view at 1280x720 without scrolling.
        gr.Markdown(INTRO_MD, elem_id="specviz-intro")
        with gr.Row(equal_height=False, elem_id="top"):
            with gr.Column(scale=3, min_width=360):
                prompt = gr.Textbox(label="Prompt", lines=2, max_lines=8, elem_id="prompt",
                                    placeholder="Ask a question or give a task, or pick an example below",
                                    value=examples[0].prompt if examples else "")
                example_buttons = []
                if examples:
                    with gr.Row(elem_id="examples"):
                        gr.Markdown("**Examples**", elem_id="examples-label")
                        for index, example in enumerate(examples):
                            example_buttons.append(gr.Button(example.name, size="sm", elem_id=f"example-{index}",
                                                             elem_classes=["specviz-example"], min_width=110))
            with gr.Column(scale=2, min_width=320):
                with gr.Row(elem_id="settings-row"):
                    # The pair's description is the dropdown's hover title (set in the page), not a
                    # line of its own: it would push the columns below the first screen.
                    preset = gr.Dropdown(choices=list(PRESETS), value=DEFAULT_PRESET, label="Model pair",
                                         elem_id="preset", scale=3, min_width=150)
                    max_tokens = gr.Slider(min(16, limits.max_new_tokens - 1), limits.max_new_tokens,
                                           value=min(128, limits.max_new_tokens), step=1,
                                           label="Max new tokens", elem_id="max-new-tokens", scale=3,
                                           min_width=150)
                with gr.Row(elem_id="run-row"):
                    run_button = gr.Button("Run", variant="primary", elem_id="run", scale=2)
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)
        with gr.Row(equal_height=True, elem_id="options-row"):
            with gr.Accordion("Policy settings, temperature and seed", open=False, elem_id="policy-settings"):
                with gr.Row():
                    static_k = gr.Number(5, label="static k", precision=0, minimum=1, maximum=64,
                                         elem_id="static-k")
                    heuristic_k = gr.Number(5, label="heuristic starting k", precision=0, minimum=1,
                                            maximum=64, elem_id="heuristic-k")
                    threshold = gr.Number(0.4, label="dynamic threshold", minimum=0, maximum=1, step=0.05,
                                          elem_id="dynamic-threshold")
                    dynamic_max = gr.Number(20, label="dynamic max tokens", precision=0, minimum=1,
                                            maximum=64, elem_id="dynamic-max")
                with gr.Row():
                    adaptive_on = gr.Checkbox(False, label="adaptive column", elem_id="adaptive-on",
                                              info="dynamic, threshold re-fitted every round")
                    adaptive_t0 = gr.Number(0.4, label="adaptive start threshold", minimum=0, maximum=1,
                                            step=0.05, elem_id="adaptive-t0")
                    entropy_on = gr.Checkbox(False, label="entropy column", elem_id="entropy-on",
                                             info="stop when the draft is unsure")
                    entropy_h = gr.Number(1.0, label="entropy bound (nats)", minimum=0, step=0.1,
                                          elem_id="entropy-h")
                with gr.Row():
                    temperature = gr.Number(0, label="Temperature (0 = greedy)", minimum=0, maximum=2, step=0.1,
                                            elem_id="temperature")
                    seed = gr.Number(1, label="Seed (sampling)", precision=0, minimum=0, elem_id="seed")
            present = gr.Checkbox(False, label="Presentation mode", elem_id="present", scale=0, min_width=220)
        model_line = gr.HTML(load_status_html(load_state(DEFAULT_PRESET), DEFAULT_PRESET), elem_id="model-status")
        status = gr.HTML(status_html("Pick an example to see a comparison at once, or type a prompt and press Run "
                                     "(about 30 s for 128 tokens, shown round by round).", "idle"), elem_id="status")
        model_timer = gr.Timer(1.0, active=True)
        gr.HTML(LEGEND_HTML, elem_id="legend")
        columns = []
        extra_boxes = []
        with gr.Row(equal_height=False, elem_id="columns"):
            for policy, html in zip(ALL_COLUMNS, column_htmls(None, running=False, note="waiting…",
                                                               order=ALL_COLUMNS)):
                with gr.Column(min_width=260, visible=policy not in EXTRA_COLUMNS,
                               elem_classes=["specviz-extra-column"] if policy in EXTRA_COLUMNS else None) as box:
                    columns.append(gr.HTML(html, elem_id=f"col-{policy}", elem_classes=["specviz-col"]))
                if policy in EXTRA_COLUMNS:
                    extra_boxes.append(box)
        # Full width: one panel per policy needs the room (the central picture of the app).
        lookahead_plot = gr.Plot(label="Lookahead per round", elem_id="lookahead-plot")
        with gr.Row(equal_height=False):
            progress_plot = gr.Plot(label="Tokens per target pass", elem_id="progress-plot", min_width=420)
            positions_plot = gr.Plot(label="Acceptance by draft position", elem_id="positions-plot", min_width=420)
        summary = gr.Dataframe(value=_table(None), headers=SUMMARY_HEADERS, label="Summary", interactive=False,
                               elem_id="summary", wrap=True)
        threshold_plot = gr.Plot(label="Confidence threshold per round", elem_id="threshold-plot", visible=False)
        with gr.Accordion("Why? The draft's calibration and where the work went",
                          open=True, elem_id="explain-accordion"):
            calibration_plot = gr.Plot(label="Draft calibration", elem_id="calibration-plot")
            work_plot = gr.Plot(label="Where the work went", elem_id="work-plot")
        with gr.Accordion("Replay round by round", open=True, elem_id="replay"):
            gr.Markdown("Pick a policy and step through its rounds: **◀ Prev** / **Next ▶**, the slider, or "
                        "the ← / → keys after clicking in this panel.", elem_id="replay-help")
            with gr.Row():
                replay_policy = gr.Dropdown(choices=[], label="Policy", elem_id="replay-policy",
                                            interactive=True, scale=2)
                replay_round = gr.Slider(1, 2, value=1, step=1, label="Round", elem_id="replay-round", scale=3)
                prev_button = gr.Button("◀ Prev", elem_id="replay-prev", scale=1)
                next_button = gr.Button("Next ▶", elem_id="replay-next", scale=1)
            replay_panel = gr.HTML(REPLAY_EMPTY, elem_id="replay-panel")
        with gr.Accordion("What if? Other lookahead settings on this run", open=True, elem_id="sweep-accordion"):
            sweep_note = gr.Markdown("After a greedy run, every dynamic threshold and static k is replayed here.",
                                     elem_id="sweep-note")
            draft_cost = gr.Slider(0.01, 1.0, value=0.5, step=0.01, visible=False, elem_id="draft-cost",
                                   label="Draft pass cost, as a fraction of a target pass (modeled; starts at "
                                         "this run's measured ratio)")
            sweep_plot = gr.Plot(label="What-if sweep", elem_id="sweep-plot", visible=False)
            sweep_table = gr.Dataframe(headers=SWEEP_HEADERS, label="Replayed policies", interactive=False,
                                       max_height=360,
                                       elem_id="sweep-table", visible=False)
        with gr.Accordion("Download or import", open=True, elem_id="files-accordion"), gr.Row():
            with gr.Column():
                downloads = gr.File(label="Downloads: comparison.json, rounds.csv, charts", file_count="multiple",
                                    interactive=False, elem_id="downloads")
                export_note = gr.Markdown("", elem_id="export-note")
                png_button = gr.Button("Also make PNG images of the charts", elem_id="make-png")
            with gr.Column():
                upload = gr.File(label=f"Import a comparison (.json, at most {MAX_IMPORT_BYTES // 2**20} MB)",
                                 file_types=[".json"], type="filepath", elem_id="import")
        last = gr.State(None)
        eos_state = gr.State([])

        preset_title_js = ("(name) => { const descriptions = " + json.dumps({n: preset_info(PRESETS, n) for n in PRESETS})
                           + "; const box = document.querySelector('#preset'); if (box) box.title = descriptions[name]"
                           " || ''; return name; }")
        preset.change(None, preset, None, js=preset_title_js, queue=False, show_progress="hidden",
                      api_visibility="private")
        demo.load(None, preset, None, js=preset_title_js, queue=False, show_progress="hidden",
                  api_visibility="private")
        model_timer.tick(model_status, preset, [model_line, model_timer], queue=False, show_progress="hidden",
                         api_visibility="private")
        demo.load(model_status, preset, [model_line, model_timer], queue=False, show_progress="hidden",
                  api_visibility="private")
        for checkbox, box in zip([adaptive_on, entropy_on], extra_boxes):
            checkbox.change(lambda on: gr.Column(visible=bool(on)), checkbox, box, queue=False,
                            show_progress="hidden", api_visibility="private")
        view_outputs = [sweep_plot, sweep_table, sweep_note, draft_cost, calibration_plot, positions_plot, work_plot,
                        threshold_plot, replay_policy, replay_round,
                        replay_panel, *extra_boxes]
        run_event = run_button.click(
            run,
            inputs=[prompt, preset, max_tokens, static_k, heuristic_k, threshold, dynamic_max, temperature, seed,
                    adaptive_on, adaptive_t0, entropy_on, entropy_h],
            outputs=[status, *columns, lookahead_plot, progress_plot, summary, last, eos_state],
            show_progress="full", show_progress_on=[status], concurrency_id="specviz-model",
            api_visibility="private",  # scripts call the `compare` endpoint below: data in, JSON out
            # After Stop the frontend may still count the cancelled run as pending; "once" would then
            # swallow the next click on Run. Runs are serialized by the queue either way.
            trigger_mode="multiple",
        )
        # The views need no model: they run outside the model queue, right after the run ends.
        run_event.then(views, [last, eos_state], view_outputs, show_progress="hidden", api_visibility="private",
                       concurrency_id="specviz-views", concurrency_limit=None).then(
            exports, [last, eos_state], [downloads, export_note], show_progress="hidden", api_visibility="private",
            concurrency_id="specviz-export")
        stop_button.click(stop, inputs=[last], outputs=[status, *columns], cancels=[run_event],
                          show_progress="hidden", api_visibility="private", concurrency_id="specviz-stop",
                          concurrency_limit=None)
        upload.upload(import_json, upload, [status, *columns, lookahead_plot, progress_plot, summary, last, eos_state],
                      show_progress="hidden", api_visibility="private", concurrency_id="specviz-views",
                      concurrency_limit=None).then(
            views, [last, eos_state], view_outputs, show_progress="hidden", api_visibility="private",
            concurrency_id="specviz-views", concurrency_limit=None).then(
            exports, [last, eos_state], [downloads, export_note], show_progress="hidden", api_visibility="private",
            concurrency_id="specviz-export").then(
            # ready for the next file
            lambda: None, None, upload, queue=False, show_progress="hidden", api_visibility="private")
        view_all = [status, *columns, lookahead_plot, progress_plot, summary, last, eos_state]
        for button, example in zip(example_buttons, examples):
            # No model work: outside the model queue, so an example opens at once even during a run.
            button.click(_example_opener(example), None, [prompt, *view_all], show_progress="hidden",
                         api_visibility="private", concurrency_id="specviz-views", concurrency_limit=None).then(
                views, [last, eos_state], view_outputs, show_progress="hidden", api_visibility="private",
                concurrency_id="specviz-views", concurrency_limit=None).then(
                exports, [last, eos_state], [downloads, export_note], show_progress="hidden", api_visibility="private",
                concurrency_id="specviz-export")
        draft_cost.release(what_if, [last, eos_state, draft_cost], [sweep_plot, sweep_table], show_progress="hidden",
                           api_visibility="private", concurrency_id="specviz-views", concurrency_limit=None)
        present.change(None, present, None, js=TOGGLE_JS, queue=False, show_progress="hidden",
                       api_visibility="private")
        demo.load(presentation_from_url, None, present, queue=False, show_progress="hidden", api_visibility="private")
        png_button.click(lambda c, e: exports(c, e, png=True), [last, eos_state], [downloads, export_note],
                         concurrency_id="specviz-export", api_visibility="private")
        replay_policy.input(replay_pick, [last, replay_policy, eos_state], [replay_round, replay_panel],
                            queue=False, show_progress="hidden", api_visibility="private")
        replay_round.release(lambda c, label, n, e: replay_move(c, label, n, e, 0),
                             [last, replay_policy, replay_round, eos_state], [replay_round, replay_panel],
                             queue=False, show_progress="hidden", api_visibility="private")
        for button, delta in ((prev_button, -1), (next_button, 1)):
            button.click(lambda c, label, n, e, d=delta: replay_move(c, label, n, e, d),
                         [last, replay_policy, replay_round, eos_state], [replay_round, replay_panel],
                         queue=False, show_progress="hidden", api_visibility="private")
        # The public API (the "Use via API" page of a Space): data in, data out. Model work shares the
        # page's queue slot and lock, so a script and a visitor never compute on the pair at once.
        gr.api(compare_api, api_name="compare", concurrency_id="specviz-model")
        gr.api(presets_api, api_name="presets", queue=False)
        gr.api(examples_api, api_name="examples", queue=False)
        gr.api(example_api, api_name="example", concurrency_id="specviz-views", concurrency_limit=None)
    demo.queue(default_concurrency_limit=1, max_size=limits.queue_size)
    return demo


THEME = gr.themes.Default(text_size="lg")
demo = build_demo()


def _preload() -> None:
    try:
        pair = get_pair(DEFAULT_PRESET)
    except ModelLoadError as error:  # the page shows it (model_status); the next Run tries again
        logger.error("Preloading the default model pair failed: %s", error)
        return
    # A few tokens through both models and the charts drawn once now, so that the first Run does not
    # pay the one-time set-up of torch's kernels and of plotly's figure classes (together about
    # 2 s on 2 cores) before its first coloured token.
    started = time.monotonic()
    with MODEL_LOCK:
        warm = compare(pair, make_request("Hello", "static:3,oracle", 4), Limits(time_budget_s=60))
    _charts(warm)
    logger.info("Warm-up finished in %.1f s", time.monotonic() - started)


def main(argv: list[str] | None = None) -> None:
    options = server_options(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if _preloading():
        threading.Thread(target=_preload, name="specviz-preload", daemon=True).start()
    demo.launch(server_name=options.host, server_port=options.port, share=options.share,
                theme=THEME, css=TOKEN_CSS + APP_CSS + REPLAY_CSS + PRESENT_CSS, js=PAGE_JS, max_file_size=MAX_IMPORT_BYTES)


if __name__ == "__main__":
    main()
