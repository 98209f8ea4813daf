"""What the page does when a visitor acts: run a comparison (streamed), stop it, open an example
or an imported file, step the replay, move the what-if slider, make the downloads.

Each handler takes widget values and returns widget updates, built by the names of its event's
outputs (`outputs.py`); model work goes through `specviz.decoding.pipeline`, and every piece of
HTML comes from the escaping formatters in this package. None of these events is in the public
API (see `api.py`), and the state the page shares with it is in `server_state.py`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from html import escape as html_escape

import gradio as gr
import pandas as pd

from ..decoding.drafts import DEFAULT_DRAFT
from ..decoding.modes import format_modes
from ..decoding.pipeline import Limits, compare_preset, make_request
from ..decoding.trace import Trace
from ..errors import SpecVizError
from ..explain.analysis import measured_draft_cost_ratio, rule_rounds
from ..explain.sweep import can_replay, sweep
from ..pair import gpu
from ..pair.models import LoadState, ModelLoadError, get_pair, load_state
from ..pair.setup_job import JOB
from .columns import (
    ALL_COLUMNS,
    EXTRA_COLUMNS,
    active_columns,
    column_htmls,
    done_message,
    expected_duration,
    load_status_html,
    placeholder_html,
    playback_htmls,
    status_html,
)
from .explain_plots import explain_figures, rule_round_figure
from .export import SWEEP_HEADERS, ExportFolders, sweep_rows, write_all
from .files import example_comparison, load_comparison_file
from .heartbeat import with_heartbeat
from .inputs import (
    DRAFT_WIDGETS,
    max_new_tokens_value,
    seed_value,
    temperature_value,
    ticked_columns,
    widget_draft,
    widget_modes,
)
from .outputs import COMPARISON_OUTPUTS, EXAMPLE_OUTPUTS, STOP_OUTPUTS, VIEW_OUTPUTS
from .pacing import Pacer
from .plots import lookahead_figure, progress_figure, sweep_figure, threshold_figure
from .presentation import presentation_requested
from .render import SUMMARY_HEADERS, render_trace, summary_rows
from .replay import replay_html, replay_step
from .server_state import MODEL_LOCK, TURNS, preloading, serving_default
from .setup_panel import model_line_note
from .turns import RunSession, Standing, waiting_message

logger = logging.getLogger("specviz.app")
EXPORT_FOLDERS = ExportFolders()  # the page's downloads (the API writes none)
NOT_STARTED = "not started yet: another run has the models"


def _fit(fig):
    """Plots sit in half-width columns: put the legend under the plot so it never covers the title.
    A figure that sets its own height (the lookahead panels, one per policy) keeps its layout."""
    if fig.layout.height is not None:
        return fig
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0},
                      margin={"t": 60, "b": 20, "l": 60, "r": 20}, height=460, title={"font": {"size": 17}})
    return fig


def summary_table(comparison) -> pd.DataFrame:
    """The summary table's rows (empty before any comparison)."""
    rows = summary_rows(comparison) if comparison is not None else []
    return pd.DataFrame(rows, columns=SUMMARY_HEADERS)


def _columns(comparison, active=ALL_COLUMNS, **kwargs) -> list[str]:
    """HTML for all six columns: the active ones from the comparison, the others say "not run"."""
    shown = dict(zip(active, column_htmls(comparison, order=active, **kwargs)))
    return [shown.get(policy) or placeholder_html(policy, "skipped", "not run (tick its box under Policy settings)")
            for policy in ALL_COLUMNS]


# Streaming: the pipeline reports every draft step and every round; the page gets a column update
# about this often (specviz/ui/pacing.py picks frames that show a pending draft), and charts (the
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


def run(visitor: gr.Request, prompt, preset, max_new_tokens, temperature=0, seed=None, draft=DEFAULT_DRAFT.name,
        *settings):
    """Run the comparison, streaming every column round by round; while another run has the
    models, say where this one stands in the queue. `settings`: the drafts' settings boxes, in
    `inputs.DRAFT_WIDGETS` order, then the policies' settings widgets, in `inputs.PAGE_WIDGETS`
    order (those left out at their defaults). The visitor comes first: Gradio hands the request
    only to a parameter before `*settings`."""
    draft_values, settings = settings[:len(DRAFT_WIDGETS)], settings[len(DRAFT_WIDGETS):]
    page = _PageRun(preset, active_columns(ticked_columns(*settings)))
    try:
        limits = Limits.from_env()
        modes = widget_modes(*settings)
        request = make_request(prompt, modes, max_new_tokens_value(max_new_tokens, limits.max_new_tokens),
                               temperature=temperature_value(temperature), seed=seed_value(seed), limits=limits,
                               draft=widget_draft(draft, *draft_values))
        logger.info("run: preset=%s max_new_tokens=%d modes=%s temperature=%g draft=%s prompt_chars=%d", preset,
                    request.max_new_tokens, format_modes(modes), request.temperature, request.draft.label,
                    len(request.prompt))
        yield from page.steps(request, limits, _session(visitor))
    except SpecVizError as error:  # bad input, or a model pair that cannot load (cause and fix included)
        if isinstance(error, ModelLoadError):
            logger.error("Loading %s failed: %s", preset, error)
        yield COMPARISON_OUTPUTS.answer(status=status_html(str(error), "error"), columns=_columns(
            page.comparison, page.active, running=False, note="no result (see the message above)"))
    except Exception:  # anything unexpected: log it, tell the user, end the spinner
        logger.exception("SpecViz run failed")
        yield COMPARISON_OUTPUTS.answer(
            status=status_html("Something went wrong on the server; the error was logged. "
                               "Try again, perhaps with fewer tokens.", "error"),
            columns=_columns(page.comparison, page.active, running=False, note="no result"))
    finally:
        if page.session is not None:
            page.session.leave()


class _PageRun:
    """One Run on the page: wait for a turn with the models, then stream the comparison into the
    columns and charts at a pace the browser can draw. `run` above turns errors into messages."""

    def __init__(self, preset: str, active):
        self.preset, self.active = preset, active
        self.comparison = None
        self.session: RunSession | None = None
        self.on_page: dict[int, str] = {}

    def steps(self, request, limits: Limits, owner: str | None):
        self.session = RunSession(TURNS, self.preset, request, limits, owner)
        pair = yield from self.wait_for_pair()
        if pair is None:  # its visitor pressed Stop while it waited
            yield COMPARISON_OUTPUTS.answer(**_stopped(None, self.active))
            return
        steps = self.session.steps(pair)  # a prompt too long for the pair: refused here, before any model work
        yield COMPARISON_OUTPUTS.answer(status=status_html("Starting…", "running"),
                                        columns=_columns(None, self.active), eos_state=sorted(pair.eos_token_ids))
        run_started = time.monotonic()
        went_on = yield from self.stream(steps, request, run_started)
        if went_on and self.comparison is not None:
            yield from self.finish(run_started)

    def wait_for_pair(self):
        """Outputs while this run waits in the queue or for a cold start; returns the pair (None
        if its visitor pressed Stop)."""
        pair = None
        for state in self.session.wait():
            if isinstance(state, Standing):  # another run has the models
                yield COMPARISON_OUTPUTS.answer(status=status_html(waiting_message(state), "waiting"),
                                                columns=_columns(None, self.active, running=False, note=NOT_STARTED))
            elif isinstance(state, LoadState):  # a Run pressed during a cold start waits for it, saying which step runs
                # (the last comparison's charts, table and state cleared meanwhile)
                yield COMPARISON_OUTPUTS.answer(status=load_status_html(state, self.preset),
                                                columns=_columns(None, self.active), lookahead_plot=None,
                                                progress_plot=None, summary=summary_table(None), last=None)
            else:
                pair = state
        return pair

    def changed(self, htmls: list[str]) -> list:
        """Only the columns whose HTML changed travel to the page."""
        out = [gr.skip() if self.on_page.get(i) == h else h for i, h in enumerate(htmls)]
        self.on_page.update(enumerate(htmls))
        return out

    def stream(self, steps, request, run_started: float):
        """The engine steps in a worker thread; while one long step runs (an oracle round drafting
        28 tokens, a long stretch of the oracle's search) the status still ticks. Returns False if
        the run lost its turn (Stop) on the way."""
        steps = with_heartbeat(steps, HEARTBEAT_S, MODEL_LOCK)
        pacer = Pacer(COLUMN_EVERY_S)
        sent_charts, sent_page = run_started, run_started  # the first chart update comes with data
        finished, judged_on_page = 0, 0  # policies finished; rounds of the running one on the page
        message = "Starting"
        about = expected_duration(self.preset, request.max_new_tokens, request.runs)

        def running(text: str) -> str:
            return status_html(f"{text}{about}… {time.monotonic() - run_started:.1f} s", "running")

        for update in steps:
            now = time.monotonic()
            if not self.session.alive(update):
                steps.close()  # the worker stops after the step under way
                yield from self.lost_turn()
                return False
            if update is None:  # a long engine step: the status says the run goes on
                if now - sent_page >= STILL_RUNNING_S:
                    sent_page = now
                    yield COMPARISON_OUTPUTS.answer(status=running(message))
                continue
            comparison, live, message = update.comparison, update.running, update.message
            self.comparison = comparison
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
            yield self.frame(running(message), live, charts, ended)
        return True

    def frame(self, status: str, live, charts: bool, ended: bool) -> tuple:
        """One update of a streaming run: the status and the columns that changed; the charts when
        `charts`, and the summary table and the comparison when a policy has just `ended`."""
        comparison = self.comparison
        shown = {"status": status, "columns": self.changed(_columns(comparison, self.active, live=live))}
        if charts:
            shown["lookahead_plot"], shown["progress_plot"] = _charts(_with_live(comparison, live))
        if ended:
            shown.update(summary=summary_table(comparison), last=comparison)
        return COMPARISON_OUTPUTS.answer(**shown)

    def lost_turn(self):
        _log_lost_turn()
        if self.session.ticket.stopped:  # the run's last message on its stream: nothing it sent
            yield COMPARISON_OUTPUTS.answer(**_stopped(self.comparison, self.active))  # before can replace "Stopped"

    def finish(self, run_started: float):
        comparison = self.comparison
        if not self.session.alive():  # Stop came during the last step: "Stopped" stays on the page
            yield from self.lost_turn()
            return
        state = "warning" if comparison.partial else "done"
        note = "not run: time budget ran out" if comparison.partial else None
        logger.info("run finished: %d policies%s in %.1f s, of which model work %.1f s (as the engine reports it)",
                    len(comparison.traces), " (partial)" if comparison.partial else "",
                    time.monotonic() - run_started, comparison.model_s())
        yield COMPARISON_OUTPUTS.answer(status=status_html(done_message(comparison), state),
                                        columns=_columns(comparison, self.active, running=False, note=note),
                                        **_finished(comparison))


def _log_lost_turn() -> None:
    logger.info("a run lost its turn (its visitor pressed Stop, or it was stranded for over %.0f s); it stops",
                TURNS.stale_s)


def _session(visitor: gr.Request | None) -> str | None:
    return getattr(visitor, "session_hash", None) if visitor is not None else None


def stop(comparison, visitor: gr.Request = None):
    """Stop: hand the run's turn with the models back. The run then ends at its next step or
    heartbeat (a quarter second) and says "Stopped" itself, as the last message on its own
    stream; this answer leaves the page to it, since it travels apart from that stream and an
    update the run sent just before could arrive after it. With no run to stop: "Stopped" here,
    finished columns kept, the others marked as stopped."""
    if (session := _session(visitor)) is not None and TURNS.cancel(session):
        return STOP_OUTPUTS.answer()  # every output left as it is
    active = [p for p in ALL_COLUMNS if p not in EXTRA_COLUMNS or (
        comparison is not None and any(t.policy == p for t in comparison.traces))]
    return STOP_OUTPUTS.answer(**_stopped(comparison, active))


def _stopped(comparison, active) -> dict:
    """What the page shows after Stop, by output: the stopped run's last message (or Stop's own
    answer when there was no run)."""
    return {"status": status_html("Stopped. Finished columns are kept; press Run to start again.", "warning"),
            "columns": _columns(comparison, active, running=False, note="stopped")}


# ---- after a run or an import: what-if sweep, threshold chart, replay, downloads --------------

REPLAY_EMPTY = '<div class="specviz-replay"><i>Run a comparison (or import one) to step through its rounds.</i></div>'


WHAT_IF_NOTE_MODEL = (
    "Every other lookahead setting replayed on this run's answer, without running the models again: "
    "the draft's guess at each position depends on the text alone, so its guesses along the answer give "
    "every setting's target passes exactly, and its draft passes exactly for the settings run (stars). "
    "For the others, the tokens a draft would propose after a rejected one are unseen: their draft "
    "passes can be off by the few calls where a confidence rule would have stopped there. Times are "
    "modeled from this run's per-pass costs; set the draft's cost below to see what the same passes "
    "would give with a cheaper draft.")
WHAT_IF_NOTE_TEXT = (  # a draft read from the text (drafts.DraftKind.from_text), by its name: "the lookup's"
    "Every other lookahead setting replayed on this run's answer, without running the models again: "
    "the {name}'s proposal at each position is a function of the prompt and the answer before it, so "
    "the replay recomputes it there and every count is exact. The {name} makes no draft pass; times "
    "are modeled from this run's per-pass costs (its proposals' own time, well under a millisecond, "
    "left out).")


def what_if(comparison, eos, draft_cost=None):
    """The what-if sweep's chart and table; `draft_cost`: a draft pass as a fraction of a target
    pass (None: as measured in the run)."""
    if comparison is None or not can_replay(comparison) or not comparison.traces:
        return gr.skip(), gr.skip()
    result = sweep(comparison, frozenset(eos or ()), None if draft_cost is None else float(draft_cost))
    return (gr.Plot(sweep_figure(result, comparison), visible=True),
            gr.Dataframe(pd.DataFrame(sweep_rows(result), columns=SWEEP_HEADERS), visible=True))


def views(comparison, eos):
    """The views computed from a finished comparison (milliseconds: no models involved)."""
    if comparison is None or not comparison.traces:
        return VIEW_OUTPUTS.answer()  # every view left as it is
    ratio = measured_draft_cost_ratio(comparison)
    cost = gr.Slider(value=round(min(1.0, max(0.01, ratio)), 2) if ratio else 0.5,
                     visible=comparison.draft_along_reference is not None)
    explained = _explained(comparison)
    what_if_view = _what_if_view(comparison, eos)
    adaptive = any(t.policy == "adaptive" for t in comparison.traces)
    threshold_plot = gr.Plot(_fit(threshold_figure(comparison)) if adaptive else None, visible=adaptive)
    labels = [t.label for t in comparison.traces]
    trace = comparison.traces[0]
    extra = [gr.Column(visible=any(t.policy == p for t in comparison.traces)) for p in EXTRA_COLUMNS]
    return VIEW_OUTPUTS.answer(
        **what_if_view, draft_cost=cost, **explained, threshold_plot=threshold_plot,
        replay_policy=gr.Dropdown(choices=labels, value=trace.label, interactive=True),
        replay_round=gr.Slider(minimum=1, maximum=max(2, len(trace.rounds)), value=1, step=1, interactive=True),
        replay_panel=_replay_panel(comparison, trace.label, 1, eos), extra_boxes=extra)


def _explained(comparison) -> dict:
    """The "Why?" charts, and the cost-aware rule's first round (hidden when it did not run)."""
    explain = explain_figures(comparison)
    rule_trace = _cost_aware(comparison)
    rounds = rule_rounds(rule_trace)
    return {"calibration_plot": _fit(explain["calibration"]), "positions_plot": _fit(explain["positions"]),
            "work_plot": explain["work"], "pass_cost_plot": _fit(explain["pass_costs"]),
            "rule_round": gr.Slider(minimum=1, maximum=max(2, len(rounds)), value=1, visible=bool(rounds)),
            "rule_plot": _rule_plot(rounds, rule_trace, 1)}


def _what_if_view(comparison, eos) -> dict:
    """The what-if sweep's chart, table and note (a note alone when the run cannot be replayed)."""
    if can_replay(comparison):
        sweep_plot, sweep_table = what_if(comparison, eos)
        kind = comparison.draft.kind
        note = WHAT_IF_NOTE_TEXT.format(name=kind.name) if kind.from_text else WHAT_IF_NOTE_MODEL
    else:
        sweep_plot, sweep_table = gr.Plot(None, visible=False), gr.Dataframe(visible=False)
        note = ("The what-if sweep replays a greedy run (temperature 0); this run was sampled"
                f" (T={comparison.temperature:g}), so there is no single answer to replay."
                if comparison.temperature > 0 else "This run has nothing to replay (it was cut short).")
    return {"sweep_plot": sweep_plot, "sweep_table": sweep_table, "sweep_note": note}


def _cost_aware(comparison) -> Trace | None:
    return next((t for t in comparison.traces if t.policy == "costaware"), None) if comparison else None


def rule_view(comparison, number):
    """How the cost-aware rule chose round `number` (from 1) of the comparison's cost-aware run;
    hidden when it has none."""
    trace = _cost_aware(comparison)
    return _rule_plot(rule_rounds(trace), trace, number)


def _rule_plot(rounds, trace, number):
    if not rounds:
        return gr.Plot(None, visible=False)
    chosen = rounds[max(1, min(len(rounds), int(number or 1))) - 1]
    return gr.Plot(_fit(rule_round_figure(chosen, trace.label)), visible=True)


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
    """Write the downloads into a fresh temporary folder (never a path from the visitor); older ones go."""
    if comparison is None:
        return gr.skip(), gr.skip()
    try:
        folder = EXPORT_FOLDERS.new()
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
        return COMPARISON_OUTPUTS.answer(status=status_html(f"Import failed: {error}", "error"))
    except Exception:
        logger.exception("import failed")
        return COMPARISON_OUTPUTS.answer(status=status_html("Import failed: the file could not be read.", "error"))
    mode = "sampled" if comparison.temperature > 0 else "greedy"
    message = (f"Imported a {mode} run of {comparison.preset} ({len(comparison.traces)} policies, "
               f"{comparison.max_new_tokens} max new tokens); no model was run.")
    return COMPARISON_OUTPUTS.answer(**_shown(comparison, message))


def example_opener(example):
    """The click handler of one example button (a generator function, so gradio streams it)."""
    def open_example():
        yield from show_example(example)
    return open_example


def _present_columns(comparison) -> list[str]:
    """The columns a finished comparison fills: the four policies, and any extra one it ran."""
    return [p for p in ALL_COLUMNS if p not in EXTRA_COLUMNS or any(t.policy == p for t in comparison.traces)]


def _shown(comparison, message: str) -> dict:
    """The whole view of a finished comparison that needs no model (an import), by output."""
    return {"status": status_html(message, "done"),
            "columns": _columns(comparison, _present_columns(comparison), running=False),
            **_finished(comparison), "eos_state": []}


def _finished(comparison) -> dict:
    """A finished comparison's charts, summary table and state, by output."""
    lookahead, progress = _charts(comparison)
    return {"lookahead_plot": lookahead, "progress_plot": progress, "summary": summary_table(comparison),
            "last": comparison}


# Opening an example plays its rounds back as they streamed (drafts pending, then judged), fast
# enough that the example is complete in under a second.
PLAYBACK_FRAMES = 4
PLAYBACK_FRAME_S = 0.06


def show_example(example):
    """An example prompt: into the prompt box, its pair into the pair menu and its draft into the
    draft choice (so that Run recomputes it so), and its comparison computed ahead, played back
    round by round and then shown whole."""
    chosen = {"prompt": example.prompt, "preset": example.preset, "draft": example.draft}
    try:
        comparison = example_comparison(example)
    except SpecVizError:
        logger.exception("example %s could not be loaded", example.name)
        comparison = None
    if comparison is None:
        yield EXAMPLE_OUTPUTS.answer(**chosen, status=status_html("Example prompt ready: press Run.", "idle"))
        return
    made = comparison.provenance or {}
    kind = comparison.draft.kind  # a draft that is no model: say what proposed the tokens
    drafted_by = "" if kind.counts_passes else f", drafts by {kind.title}"
    message = (f"Precomputed example ({comparison.preset}{drafted_by}, {comparison.max_new_tokens} max new tokens, "
               f"{made.get('date', 'ahead')}, {made.get('machine', 'another machine')}"
               + (f"; {made['setup']}" if made.get("setup") else "") + "): no model ran; Run recomputes it.")
    present = _present_columns(comparison)
    playing = status_html("Playing the precomputed example back, round by round…", "running")
    for step, htmls in enumerate(playback_htmls(comparison, present, PLAYBACK_FRAMES)):
        shown = dict(zip(present, htmls))
        yield EXAMPLE_OUTPUTS.answer(**(chosen if step == 0 else {}), status=playing,
                                     columns=[shown.get(p, gr.skip()) for p in ALL_COLUMNS])
        time.sleep(PLAYBACK_FRAME_S)
    # The finished columns first, then the charts (the costlier part to build and to draw).
    yield EXAMPLE_OUTPUTS.answer(status=status_html(message, "done"),
                                 columns=_columns(comparison, present, running=False))
    yield EXAMPLE_OUTPUTS.answer(**_finished(comparison), eos_state=[])


# ---- the model line, presentation mode, the preload -------------------------------------------


def model_status(preset):
    """The model-pair line, polled once a second until the pair is loaded (or has failed).

    A page opened while the preload thread is only starting sees "not loaded": keep polling then."""
    state = load_state(preset)
    waiting = (state.phase == "loading" or (state.phase == "not loaded" and preloading() and preset == serving_default())
               or JOB.state().running)  # the set-up panel and the model line follow a set-up as it goes
    line = load_status_html(state, preset)
    note = model_line_note(preset)
    if note:  # the line's text is escaped HTML: the note is added inside it, escaped too
        line = line.replace("</div>", html_escape(note) + "</div>")
    return line, gr.Timer(active=waiting)


def presentation_from_url(request: gr.Request) -> bool:
    return presentation_requested(dict(request.query_params))


def preload() -> None:
    """Load the default pair and warm it up (run in a thread while the page starts): the bundled
    one while a Space's start-up set-up of the real pair runs (server_state.serving_default)."""
    preset = serving_default()
    try:
        pair = get_pair(preset)
    except ModelLoadError as error:  # the page shows it (model_status); the next Run tries again
        logger.error("Preloading the default model pair failed: %s", error)
        return
    # A few tokens through both models and the charts drawn once now, so that the first Run does not
    # pay the one-time set-up of torch's kernels and of plotly's figure classes (together about
    # 2 s on 2 cores) before its first coloured token.
    started = time.monotonic()
    if not gpu.warms_up(pair.device):
        return
    with MODEL_LOCK:
        warm = compare_preset(preset, make_request("Hello", "static:3,oracle", 4), Limits(time_budget_s=60))
    _charts(warm)
    logger.info("Warm-up finished in %.1f s", time.monotonic() - started)
