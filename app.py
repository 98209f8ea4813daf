"""SpecViz web app: one prompt, four lookahead policies side by side.

UI and event wiring only. Model work is in specviz.pipeline, formatting and input checks in
specviz.ui_helpers (both testable without a browser).

    python app.py [--host HOST] [--port PORT] [--share]
"""

from __future__ import annotations

import logging
import os
import threading

import gradio as gr
import pandas as pd

from specviz.errors import SpecVizError
from specviz.models import DEFAULT_PRESET, PRESETS, get_pair
from specviz.pipeline import Limits, make_request, run_comparison
from specviz.plots import lookahead_figure, progress_figure
from specviz.render import LEGEND_HTML, SUMMARY_HEADERS, TOKEN_CSS, summary_rows
from specviz.ui_helpers import (
    POLICY_COLUMNS,
    POLICY_TITLES,
    column_htmls,
    done_message,
    load_examples,
    max_new_tokens_value,
    modes_string,
    next_policy,
    preset_info,
    server_options,
    status_html,
)

logger = logging.getLogger("specviz.app")

STUDY_URL = "https://huggingface.co/blog/dynamic_speculation_lookahead"

INTRO_MD = f"""\
## SpecViz: where speculative decoding spends its work
In **speculative decoding** a small *draft* model guesses the next few tokens and the big *target* \
model checks them all in one forward pass, so the answer is exactly the target's own, only faster. \
The **lookahead** is how many tokens the draft guesses per round: too short wastes target passes, \
too long wastes draft passes on tokens that get thrown away. Each column runs one lookahead policy on \
your prompt and colours every token by what happened to it; the chart compares each round's lookahead \
with the oracle's ideal ([the study]({STUDY_URL})).
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
#status { min-height: 56px; }
.specviz-column { border: 1px solid rgba(128, 128, 128, 0.45); border-radius: 8px; padding: 6px 8px; }
.specviz-column[data-state="running"] { border: 2px solid #0072B2; }
"""

# Model work is serialized: a run cancelled by Stop finishes its current step in a worker thread,
# and the next run must not start computing on the shared pair until that step is over.
MODEL_LOCK = threading.Lock()


def _fit(fig):
    """Plots sit in half-width columns: put the legend under the plot so it never covers the title."""
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.2, "xanchor": "left", "x": 0},
                      margin={"t": 60, "b": 20, "l": 60, "r": 20}, height=460, title={"font": {"size": 17}})
    return fig


def _table(comparison) -> pd.DataFrame:
    rows = summary_rows(comparison) if comparison is not None else []
    return pd.DataFrame(rows, columns=SUMMARY_HEADERS)


def _outputs(status: str, columns: list[str], lookahead=None, progress=None, table=None, state=None) -> tuple:
    """The handler's outputs in order; None for a plot/table/state means: leave it as it is."""
    skip = gr.skip()
    return (status, *columns,
            skip if lookahead is None else lookahead,
            skip if progress is None else progress,
            skip if table is None else table,
            skip if state is None else state)


def run(prompt, preset, max_new_tokens, static_k, heuristic_k, threshold, dynamic_max,
        progress=gr.Progress()):  # noqa: B008 - gradio's idiom for a progress tracker
    """Run the comparison, yielding after the baseline+oracle step and after each policy."""
    comparison = None
    try:
        limits = Limits.from_env()
        modes = modes_string(static_k, heuristic_k, threshold, dynamic_max)
        request = make_request(prompt, modes, max_new_tokens_value(max_new_tokens, limits.max_new_tokens),
                               limits=limits)
        logger.info("run: preset=%s max_new_tokens=%d modes=%s prompt_chars=%d", preset, request.max_new_tokens,
                    modes, len(request.prompt))
        empty = _table(None)
        yield (status_html("Loading the model pair…", "running"), *column_htmls(None),
               None, None, empty, None)
        pair = get_pair(preset, progress=lambda message: progress(None, desc=message))

        done = [0]
        total = 2 + len(request.modes)  # baseline, oracle search, then one step per policy

        def say(message: str) -> None:
            progress((done[0], total), desc=message)
            done[0] += 1

        yield _outputs(status_html("Running the target alone (baseline) and finding the oracle's ideal "
                                   "lookahead…", "running"), column_htmls(None))
        steps = run_comparison(pair, request, limits, progress=say)
        while True:
            with MODEL_LOCK:
                step = next(steps, None)
            if step is None:
                break
            comparison = step
            upcoming = next_policy(comparison)
            message = (f"Running {POLICY_TITLES[upcoming].lower()}… "
                       f"({len(comparison.traces)} of {len(POLICY_COLUMNS)} policies done)"
                       if upcoming and not comparison.partial else "Finishing…")
            yield _outputs(status_html(message, "running"), column_htmls(comparison),
                           _fit(lookahead_figure(comparison)), _fit(progress_figure(comparison)), _table(comparison),
                           comparison)
        if comparison is not None:
            state = "warning" if comparison.partial else "done"
            note = "not run: time budget ran out" if comparison.partial else None
            logger.info("run finished: %d policies%s", len(comparison.traces), " (partial)" if comparison.partial else "")
            yield _outputs(status_html(done_message(comparison), state),
                           column_htmls(comparison, running=False, note=note))
    except SpecVizError as error:
        yield _outputs(status_html(str(error), "error"),
                       column_htmls(comparison, running=False, note="no result (see the message above)"))
    except Exception:  # anything unexpected: log it, tell the user, end the spinner
        logger.exception("SpecViz run failed")
        yield _outputs(status_html("Something went wrong on the server; the error was logged. "
                                   "Try again, perhaps with fewer tokens.", "error"),
                       column_htmls(comparison, running=False, note="no result"))


def stop(comparison):
    """After Stop cancelled the run: keep finished columns, mark the others as stopped."""
    return (status_html("Stopped. Finished columns are kept; press Run to start again.", "warning"),
            *column_htmls(comparison, running=False, note="stopped"))


def build_demo() -> gr.Blocks:
    limits = Limits.from_env()
    examples = load_examples()
    with gr.Blocks(title="SpecViz: speculative decoding lookahead", fill_width=True,
                   analytics_enabled=False) as demo:
        gr.Markdown(INTRO_MD, elem_id="specviz-intro")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=360):
                prompt = gr.Textbox(label="Prompt", lines=3, max_lines=8, elem_id="prompt",
                                    placeholder="Ask a question or give a task, or pick an example below",
                                    value=examples[0].prompt if examples else "")
                if examples:
                    gr.Examples([[e.prompt] for e in examples], inputs=[prompt], label="Examples",
                                example_labels=[e.name for e in examples], elem_id="examples")
            with gr.Column(scale=2, min_width=320):
                preset = gr.Dropdown(choices=list(PRESETS), value=DEFAULT_PRESET, label="Model pair",
                                     info=preset_info(PRESETS, DEFAULT_PRESET), elem_id="preset")
                max_tokens = gr.Slider(16, limits.max_new_tokens, value=min(128, limits.max_new_tokens), step=1,
                                       label="Max new tokens", elem_id="max-new-tokens")
                with gr.Accordion("Policy settings", open=False, elem_id="policy-settings"):
                    with gr.Row():
                        static_k = gr.Number(5, label="static k", precision=0, minimum=1, maximum=64,
                                             elem_id="static-k")
                        heuristic_k = gr.Number(5, label="heuristic starting k", precision=0, minimum=1,
                                                maximum=64, elem_id="heuristic-k")
                    with gr.Row():
                        threshold = gr.Number(0.4, label="dynamic threshold", minimum=0, maximum=1, step=0.05,
                                              elem_id="dynamic-threshold")
                        dynamic_max = gr.Number(20, label="dynamic max tokens", precision=0, minimum=1,
                                                maximum=64, elem_id="dynamic-max")
                with gr.Row():
                    run_button = gr.Button("Run", variant="primary", elem_id="run")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
        status = gr.HTML(status_html("Pick a prompt and press Run. A run takes about 30 s for 128 tokens.",
                                     "idle"), elem_id="status")
        gr.HTML(LEGEND_HTML, elem_id="legend")
        columns = []
        with gr.Row(equal_height=False, elem_id="columns"):
            for policy, html in zip(POLICY_COLUMNS, column_htmls(None, running=False, note="waiting…")):
                with gr.Column(min_width=260):
                    columns.append(gr.HTML(html, elem_id=f"col-{policy}", elem_classes=["specviz-col"]))
        with gr.Row(equal_height=False):
            lookahead_plot = gr.Plot(label="Lookahead per round", elem_id="lookahead-plot", min_width=420)
            progress_plot = gr.Plot(label="Tokens per target pass", elem_id="progress-plot", min_width=420)
        summary = gr.Dataframe(value=_table(None), headers=SUMMARY_HEADERS, label="Summary", interactive=False,
                               elem_id="summary", wrap=True)
        last = gr.State(None)

        preset.change(lambda name: gr.Dropdown(info=preset_info(PRESETS, name)), preset, preset,
                      queue=False, show_progress="hidden")
        run_event = run_button.click(
            run,
            inputs=[prompt, preset, max_tokens, static_k, heuristic_k, threshold, dynamic_max],
            outputs=[status, *columns, lookahead_plot, progress_plot, summary, last],
            show_progress="full", show_progress_on=[status], concurrency_id="specviz-model",
            api_name="compare",
            # After Stop the frontend may still count the cancelled run as pending; "once" would then
            # swallow the next click on Run. Runs are serialized by the queue either way.
            trigger_mode="multiple",
        )
        stop_button.click(stop, inputs=[last], outputs=[status, *columns], cancels=[run_event],
                          show_progress="hidden", concurrency_id="specviz-stop", concurrency_limit=None)
    demo.queue(default_concurrency_limit=1, max_size=int(os.environ.get("SPECVIZ_QUEUE_SIZE", "16")))
    return demo


THEME = gr.themes.Default(text_size="lg")
demo = build_demo()


def _preload() -> None:
    try:
        get_pair(DEFAULT_PRESET)
    except Exception:  # the first run will report it properly
        logger.exception("Preloading the default model pair failed")


def main(argv: list[str] | None = None) -> None:
    options = server_options(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if os.environ.get("SPECVIZ_PRELOAD", "1") != "0":
        threading.Thread(target=_preload, name="specviz-preload", daemon=True).start()
    demo.launch(server_name=options.host, server_port=options.port, share=options.share,
                theme=THEME, css=TOKEN_CSS + APP_CSS)


if __name__ == "__main__":
    main()
