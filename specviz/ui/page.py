"""The page: its sections top to bottom, the events wired to them, and its launch.

`build_demo` lays out the sections in the order a visitor meets them (prompt and Run, settings,
the four columns, the charts, the replay, the what-if, the files) and then wires them to the
handlers in `events.py`; every page event is private, and the public API (`endpoints.py`) is
registered last.
"""

from __future__ import annotations

import json
import logging
import threading
from types import SimpleNamespace

import gradio as gr

from .. import settings
from ..decoding.drafts import DEFAULT_DRAFT, DRAFTS
from ..decoding.modes import POLICIES
from ..decoding.pipeline import Limits
from ..pair.models import load_state
from ..pair.presets import DEFAULT_PRESET, PRESETS
from ..pair.setup_job import JOB
from . import endpoints, setup_panel
from .columns import ALL_COLUMNS, EXTRA_COLUMNS, column_htmls, load_status_html, preset_info, status_html
from .events import (
    REPLAY_EMPTY,
    example_opener,
    exports,
    import_json,
    model_status,
    preload,
    presentation_from_url,
    replay_move,
    replay_pick,
    rule_view,
    run,
    stop,
    summary_table,
    views,
    what_if,
)
from .export import SWEEP_HEADERS
from .files import MAX_IMPORT_BYTES, Example, load_examples
from .inputs import DRAFT_WIDGETS, PAGE_WIDGETS, DraftWidget, PageWidget, server_options
from .outputs import COMPARISON_OUTPUTS, EXAMPLE_OUTPUTS, STOP_OUTPUTS, VIEW_OUTPUTS
from .presentation import TOGGLE_JS
from .render import LEGEND_HTML, SUMMARY_HEADERS
from .server_state import preloading, serving_default, setting_up_at_start
from .style import CSS, PAGE_JS, THEME

STUDY_URL = "https://huggingface.co/blog/dynamic_speculation_lookahead"

INTRO_MD = f"""\
## SpecViz: where speculative decoding spends its work
A small *draft* model guesses tokens, the big *target* checks them in one pass: each column runs one \
**lookahead** policy and colours every token by its fate ([the study]({STUDY_URL})).
"""

QUIET = {"show_progress": "hidden", "api_visibility": "private"}  # every page event
NO_MODEL = {**QUIET, "concurrency_id": "specviz-views", "concurrency_limit": None}  # outside the model queue


# ---- the sections, top to bottom -----------------------------------------------------------


def _prompt_and_run(p: SimpleNamespace, examples: list[Example], limits: Limits) -> None:
    """The first screen's top: the prompt with the example buttons, the pair, the length, Run."""
    gr.Markdown(INTRO_MD, elem_id="specviz-intro")
    with gr.Row(equal_height=False, elem_id="top"):
        with gr.Column(scale=5, min_width=360):
            p.prompt = gr.Textbox(label="Prompt", lines=2, max_lines=8, elem_id="prompt",
                                  placeholder="Ask a question or give a task, or pick an example below",
                                  value=examples[0].prompt if examples else "")
            p.example_buttons = []
            if examples:
                with gr.Row(elem_id="examples"):
                    gr.Markdown("**Examples**", elem_id="examples-label")
                    for index, example in enumerate(examples):
                        p.example_buttons.append(gr.Button(example.name, size="sm", elem_id=f"example-{index}",
                                                           elem_classes=["specviz-example"], min_width=80))
        with gr.Column(scale=4, min_width=320):
            with gr.Row(elem_id="settings-row"):
                # The pair's description is the dropdown's hover title (set in the page), not a
                # line of its own: it would push the columns below the first screen.
                p.preset = gr.Dropdown(choices=list(PRESETS), value=serving_default(), label="Model pair",
                                       elem_id="preset", scale=4, min_width=150)
                p.max_tokens = gr.Slider(min(16, limits.max_new_tokens - 1), limits.max_new_tokens,
                                         value=min(128, limits.max_new_tokens), step=1,
                                         label="Max new tokens", elem_id="max-new-tokens", scale=3, min_width=150)
                # A menu, not radio buttons: two stacked choices would push the columns below the
                # first screen at 1280x720.
                p.draft = gr.Dropdown([(kind.title, name) for name, kind in DRAFTS.items()], value=DEFAULT_DRAFT.name,
                                      label="Draft", elem_id="draft", scale=3, min_width=130)
            with gr.Row(elem_id="run-row"):
                p.run_button = gr.Button("Run", variant="primary", elem_id="run", scale=2)
                p.stop_button = gr.Button("Stop", variant="stop", elem_id="stop", scale=1)


def _widget(widget: PageWidget) -> gr.Checkbox | gr.Number:
    """A policy's settings widget: its optional column's checkbox, or a number box whose label,
    default and bounds come from the registry."""
    kind, setting = POLICIES[widget.policy], widget.setting
    if setting is None:
        return gr.Checkbox(False, label=f"{kind.title.split(' (')[0].lower()} column", info=kind.blurb,
                           elem_id=widget.elem_id)
    if setting.whole:
        return gr.Number(setting.default, label=setting.label, precision=0, minimum=setting.low,
                         maximum=setting.high, elem_id=widget.elem_id)
    return gr.Number(setting.default, label=setting.label, minimum=setting.low, maximum=setting.high,
                     step=0.05 if setting.high == 1.0 else 0.1, elem_id=widget.elem_id)


def _draft_widget(widget: DraftWidget) -> gr.Number:
    """A box for one of a draft's settings: label, default, bounds and the line under it from the registry."""
    setting, kind = widget.setting, DRAFTS[widget.draft]
    whole = {"precision": 0} if setting.whole else {}
    return gr.Number(setting.default, label=setting.label, **whole, minimum=setting.low, maximum=setting.high,
                     elem_id=widget.elem_id, info=f"{kind.title}: {setting.info}")


def _policy_widgets(p: SimpleNamespace) -> None:
    """One row for the settings of the policies every Run compares, then the optional policies
    two to a row, each a column checkbox and its settings (the registry's order throughout)."""
    rows = [[w for w in PAGE_WIDGETS if not POLICIES[w.policy].optional]]
    optional = [name for name in POLICIES if POLICIES[name].optional]
    for pair in (optional[i:i + 2] for i in range(0, len(optional), 2)):
        rows.append([w for w in PAGE_WIDGETS if w.policy in pair])
    made = {}
    for row in rows:
        with gr.Row():
            made.update({w: _widget(w) for w in row})
    p.setting_widgets = [made[w] for w in PAGE_WIDGETS]
    p.column_checkboxes = {w.policy: made[w] for w in PAGE_WIDGETS if w.setting is None}


def _settings(p: SimpleNamespace) -> None:
    """One click away: each policy's settings, the optional columns, temperature and seed; and
    the presentation-mode switch."""
    with gr.Row(equal_height=True, elem_id="options-row"):
        with gr.Accordion("Policy settings, temperature and seed", open=False, elem_id="policy-settings"):
            _policy_widgets(p)
            with gr.Row():  # each draft's settings (the Draft menu above says which draft runs)
                p.draft_widgets = [_draft_widget(w) for w in DRAFT_WIDGETS]
            with gr.Row():
                p.temperature = gr.Number(0, label="Temperature (0 = greedy)", minimum=0, maximum=2, step=0.1,
                                          elem_id="temperature")
                p.seed = gr.Number(1, label="Seed (sampling)", precision=0, minimum=0, elem_id="seed")
        p.present = gr.Checkbox(False, label="Presentation mode", elem_id="present", scale=0, min_width=220)


def _policy_columns(p: SimpleNamespace) -> None:
    """The model line, the status, the legend and one column per policy (the extra ones hidden)."""
    p.model_line = gr.HTML(load_status_html(load_state(serving_default()), serving_default()), elem_id="model-status")
    setup_panel.build(p)  # shown where a pair that needs setting up is chosen
    p.status = gr.HTML(status_html("Pick an example to see a comparison at once, or type a prompt and press Run "
                                   "(about 30 s for 128 tokens, shown round by round).", "idle"), elem_id="status")
    p.model_timer = gr.Timer(1.0, active=True)
    gr.HTML(LEGEND_HTML, elem_id="legend")
    p.columns, p.extra_boxes = [], []
    with gr.Row(equal_height=False, elem_id="columns"):
        for policy, html in zip(ALL_COLUMNS, column_htmls(None, running=False, note="waiting…", order=ALL_COLUMNS)):
            with gr.Column(min_width=260, visible=policy not in EXTRA_COLUMNS,
                           elem_classes=["specviz-extra-column"] if policy in EXTRA_COLUMNS else None) as box:
                p.columns.append(gr.HTML(html, elem_id=f"col-{policy}", elem_classes=["specviz-col"]))
            if policy in EXTRA_COLUMNS:
                p.extra_boxes.append(box)


def _chart_panels(p: SimpleNamespace) -> None:
    """Lookahead per round (full width: one panel per policy), tokens per pass, acceptance by
    position, the summary table, the adaptive threshold, and the "Why?" charts."""
    p.lookahead_plot = gr.Plot(label="Lookahead per round", elem_id="lookahead-plot")
    with gr.Row(equal_height=False):
        p.progress_plot = gr.Plot(label="Tokens per target pass", elem_id="progress-plot", min_width=420)
        p.positions_plot = gr.Plot(label="Acceptance by draft position", elem_id="positions-plot", min_width=420)
    p.summary = gr.Dataframe(value=summary_table(None), headers=SUMMARY_HEADERS, label="Summary", interactive=False,
                             elem_id="summary", wrap=True)
    p.threshold_plot = gr.Plot(label="Confidence threshold per round", elem_id="threshold-plot", visible=False)
    with gr.Accordion("Why? The draft's calibration, where the work went, what a pass cost", open=True,
                      elem_id="explain-accordion"):
        p.calibration_plot = gr.Plot(label="Draft calibration", elem_id="calibration-plot")
        p.work_plot = gr.Plot(label="Where the work went", elem_id="work-plot")
        p.pass_cost_plot = gr.Plot(label="What a pass cost", elem_id="pass-cost-plot")
        p.rule_round = gr.Slider(1, 2, value=1, step=1, label="Cost-aware round", elem_id="rule-round", visible=False)
        p.rule_plot = gr.Plot(label="How the cost-aware rule chose a round", elem_id="rule-plot", visible=False)


def _replay(p: SimpleNamespace) -> None:
    with gr.Accordion("Replay round by round", open=True, elem_id="replay"):
        gr.Markdown("Pick a policy and step through its rounds: **◀ Prev** / **Next ▶**, the slider, or "
                    "the ← / → keys after clicking in this panel.", elem_id="replay-help")
        with gr.Row():
            p.replay_policy = gr.Dropdown(choices=[], label="Policy", elem_id="replay-policy", interactive=True,
                                          scale=2)
            p.replay_round = gr.Slider(1, 2, value=1, step=1, label="Round", elem_id="replay-round", scale=3)
            p.prev_button = gr.Button("◀ Prev", elem_id="replay-prev", scale=1)
            p.next_button = gr.Button("Next ▶", elem_id="replay-next", scale=1)
        p.replay_panel = gr.HTML(REPLAY_EMPTY, elem_id="replay-panel")


def _what_if(p: SimpleNamespace) -> None:
    with gr.Accordion("What if? Other lookahead settings on this run", open=True, elem_id="sweep-accordion"):
        p.sweep_note = gr.Markdown("After a greedy run, every dynamic threshold and static k is replayed here.",
                                   elem_id="sweep-note")
        p.draft_cost = gr.Slider(0.01, 1.0, value=0.5, step=0.01, visible=False, elem_id="draft-cost",
                                 label="Draft pass cost, as a fraction of a target pass (modeled; starts at "
                                       "this run's measured ratio)")
        p.sweep_plot = gr.Plot(label="What-if sweep", elem_id="sweep-plot", visible=False)
        p.sweep_table = gr.Dataframe(headers=SWEEP_HEADERS, label="Replayed policies", interactive=False,
                                     max_height=360, elem_id="sweep-table", visible=False)


def _files(p: SimpleNamespace) -> None:
    with gr.Accordion("Download or import", open=True, elem_id="files-accordion"), gr.Row():
        with gr.Column():
            p.downloads = gr.File(label="Downloads: comparison.json, rounds.csv, charts", file_count="multiple",
                                  interactive=False, elem_id="downloads")
            p.export_note = gr.Markdown("", elem_id="export-note")
            p.png_button = gr.Button("Also make PNG images of the charts", elem_id="make-png")
        with gr.Column():
            p.upload = gr.File(label=f"Import a comparison (.json, at most {MAX_IMPORT_BYTES // 2**20} MB)",
                               file_types=[".json"], type="filepath", elem_id="import")


# ---- the events ----------------------------------------------------------------------------


def _wire_page(demo: gr.Blocks, p: SimpleNamespace) -> None:
    """The pair's hover title, the model line, the optional columns and presentation mode."""
    preset_title_js = ("(name) => { const descriptions = " + json.dumps({n: preset_info(PRESETS, n) for n in PRESETS})
                       + "; const box = document.querySelector('#preset'); if (box) box.title = descriptions[name]"
                       " || ''; return name; }")
    p.preset.change(None, p.preset, None, js=preset_title_js, queue=False, **QUIET)
    demo.load(None, p.preset, None, js=preset_title_js, queue=False, **QUIET)
    p.model_timer.tick(model_status, p.preset, [p.model_line, p.model_timer], queue=False, **QUIET)
    demo.load(model_status, p.preset, [p.model_line, p.model_timer], queue=False, **QUIET)
    # The line follows the pair menu, whether a visitor or an example set it.
    p.preset.change(model_status, p.preset, [p.model_line, p.model_timer], queue=False, **QUIET)
    setup_panel.wire(demo, p)
    if setting_up_at_start():  # each new visitor starts on the pair that serves now: the real one once set up
        demo.load(lambda: gr.Dropdown(value=serving_default()), None, p.preset, queue=False, **QUIET)
    for policy, box in zip(EXTRA_COLUMNS, p.extra_boxes):
        checkbox = p.column_checkboxes[policy]
        checkbox.change(lambda on: gr.Column(visible=bool(on)), checkbox, box, queue=False, **QUIET)
    p.present.change(None, p.present, None, js=TOGGLE_JS, queue=False, **QUIET)
    demo.load(presentation_from_url, None, p.present, queue=False, **QUIET)


def _then_views(event, p: SimpleNamespace):
    """After a comparison is on the page: the views that need no model, then the downloads."""
    return event.then(views, [p.last, p.eos_state], p.view_outputs, **NO_MODEL).then(
        exports, [p.last, p.eos_state], [p.downloads, p.export_note], **QUIET, concurrency_id="specviz-export")


def _wire_comparisons(p: SimpleNamespace, examples: list[Example], limits: Limits) -> None:
    """Run and Stop, an imported file and the example buttons: each puts a comparison on the page."""
    run_event = p.run_button.click(
        run,
        inputs=[p.prompt, p.preset, p.max_tokens, p.temperature, p.seed, p.draft, *p.draft_widgets,
                *p.setting_widgets],
        outputs=p.view_all, show_progress="full", show_progress_on=[p.status],
        # Runs start at once and wait for the models in server_state.TURNS, which can tell a waiting
        # visitor where it stands; Gradio's queue only holds what exceeds that many.
        concurrency_id="specviz-runs", concurrency_limit=limits.queue_size + 1,
        api_visibility="private",  # scripts call the `compare` endpoint: data in, JSON out
        # A stopped run may still be ending when its visitor presses Run again; "once" would then
        # swallow that click. Runs are serialized by the queue either way.
        trigger_mode="multiple",
    )
    _then_views(run_event, p)
    # Stop does no model work: outside the queue, so that nothing queued can hold its answer back.
    # It does not cancel the run through Gradio, and its answer does not say "Stopped" over a
    # live run: an update the run sent just before could reach the page after that answer (they
    # travel apart) and replace "Stopped". Stop hands the run's turn back; the run sees that at its
    # next step or heartbeat (a quarter second) and ends with "Stopped", the last message on its
    # own stream.
    p.stop_button.click(stop, inputs=[p.last], outputs=STOP_OUTPUTS.components(p), queue=False, **QUIET)
    imported = _then_views(p.upload.upload(import_json, p.upload, p.view_all, **NO_MODEL), p)
    imported.then(lambda: None, None, p.upload, queue=False, **QUIET)  # ready for the next file
    for button, example in zip(p.example_buttons, examples):
        # No model work: outside the model queue, so an example opens at once even during a run.
        _then_views(button.click(example_opener(example), None, EXAMPLE_OUTPUTS.components(p), **NO_MODEL), p)


def _wire_views(p: SimpleNamespace) -> None:
    """The what-if slider, the PNG button and the replay's controls."""
    p.draft_cost.release(what_if, [p.last, p.eos_state, p.draft_cost], [p.sweep_plot, p.sweep_table], **NO_MODEL)
    p.png_button.click(lambda c, e: exports(c, e, png=True), [p.last, p.eos_state], [p.downloads, p.export_note],
                       concurrency_id="specviz-export", api_visibility="private")
    for moved in (p.rule_round.release, p.rule_round.input):  # dragged, or a number typed in its box
        moved(rule_view, [p.last, p.rule_round], p.rule_plot, **NO_MODEL)
    replay_inputs = [p.last, p.replay_policy, p.replay_round, p.eos_state]
    replay_outputs = [p.replay_round, p.replay_panel]
    p.replay_policy.input(replay_pick, [p.last, p.replay_policy, p.eos_state], replay_outputs, queue=False, **QUIET)
    p.replay_round.release(lambda c, label, n, e: replay_move(c, label, n, e, 0), replay_inputs, replay_outputs,
                           queue=False, **QUIET)
    for button, delta in ((p.prev_button, -1), (p.next_button, 1)):
        button.click(lambda c, label, n, e, d=delta: replay_move(c, label, n, e, d), replay_inputs, replay_outputs,
                     queue=False, **QUIET)


def _public_api() -> None:
    """The "Use via API" page of a Space: data in, data out. Model work shares the page's queue
    slot and lock, so a script and a visitor never compute on the pair at once."""
    gr.api(endpoints.compare, api_name="compare", concurrency_id="specviz-model")
    gr.api(endpoints.presets, api_name="presets", queue=False)
    gr.api(endpoints.pair_state, api_name="pair_state", queue=False)
    gr.api(endpoints.examples, api_name="examples", queue=False)
    gr.api(endpoints.example, api_name="example", concurrency_id="specviz-views", concurrency_limit=None)


def build_demo() -> gr.Blocks:
    limits = Limits.from_env()
    examples = load_examples()
    p = SimpleNamespace()
    # Gradio copies every download into its cache (about 40 MB a comparison): files older than an
    # hour go, checked hourly, and the rest when the app stops, so a Space's disk does not fill.
    with gr.Blocks(title="SpecViz: speculative decoding lookahead", fill_width=True,
                   analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        # The first screen holds the prompt, Run, the examples and one row of settings, so that the
        # four columns and their first tokens are in view at 1280x720 without scrolling.
        _prompt_and_run(p, examples, limits)
        _settings(p)
        _policy_columns(p)
        _chart_panels(p)
        _replay(p)
        _what_if(p)
        _files(p)
        p.last = gr.State(None)
        p.eos_state = gr.State([])
        # Each event's outputs, by the names its handler answers with (outputs.py).
        p.view_all = COMPARISON_OUTPUTS.components(p)
        p.view_outputs = VIEW_OUTPUTS.components(p)
        _wire_page(demo, p)
        _wire_comparisons(p, examples, limits)
        _wire_views(p)
        _public_api()
    demo.queue(default_concurrency_limit=1, max_size=limits.queue_size)
    return demo


MCP_ENV = "SPECVIZ_MCP"


def mcp_enabled(environ: dict[str, str] | None = None) -> bool:
    """The public API is also an MCP server (at /gradio_api/mcp/) unless SPECVIZ_MCP=0."""
    return settings.read(MCP_ENV, environ) != "0"


def launch(demo: gr.Blocks, argv: list[str] | None = None) -> None:
    """Start the server (and, unless SPECVIZ_PRELOAD=0, load the default pair in the background; on a
    Space whose default is the real pair, set that up in the background first: server_state.py);
    the public API is also served as MCP tools unless SPECVIZ_MCP=0."""
    options = server_options(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    demo.launch(server_name=options.host, server_port=options.port, share=options.share,
                theme=THEME, css=CSS, js=PAGE_JS, max_file_size=MAX_IMPORT_BYTES, mcp_server=mcp_enabled(),
                prevent_thread_lock=True)
    # The model work starts once the page answers, not beside the server's own start on a 2-core machine:
    # the default pair's load, and on a Space whose default is the real pair its set-up (pip, and the
    # unpacking child's import of torch), while the bundled pair serves.
    if preloading():
        threading.Thread(target=preload, name="specviz-preload", daemon=True).start()
    if setting_up_at_start():
        JOB.start(DEFAULT_PRESET, then=lambda: setup_panel.load_in_background(DEFAULT_PRESET))
    demo.block_thread()
