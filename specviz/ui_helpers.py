"""Glue between the Gradio app and the pipeline: everything app.py needs that is testable without a browser.

Pure functions only (no gradio import): building the modes string from the settings widgets,
the HTML of each policy column and of the status line, example prompts, and the server's
host/port/share from flags and environment. Every piece of text that may come from a user or a
model goes through `html.escape` here or in `render.py` before it becomes HTML.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .errors import SpecVizError
from .policies import MAX_LOOKAHEAD
from .render import metrics_html, render_trace
from .trace import Comparison, Trace

# One column per policy, in this order, whatever the settings.
POLICY_COLUMNS: list[str] = ["static", "heuristic", "dynamic", "oracle"]

POLICY_TITLES: dict[str, str] = {
    "static": "Static",
    "heuristic": "Heuristic",
    "dynamic": "Dynamic (confidence)",
    "oracle": "Oracle",
}

POLICY_BLURBS: dict[str, str] = {
    "static": "k draft tokens every round",
    "heuristic": "+2 after a fully accepted round, else -1",
    "dynamic": "stop drafting when draft confidence < threshold",
    "oracle": "drafts exactly until the draft disagrees",
}

EXAMPLES_PATH = Path(__file__).resolve().parent.parent / "assets" / "examples.json"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860


# ---- settings -> modes ---------------------------------------------------------------------


def _whole(value: object, what: str) -> int:
    """A whole number from a widget value (sliders and number boxes give floats)."""
    if isinstance(value, bool) or value is None:
        raise SpecVizError(f"{what} must be a whole number, got {value!r}.")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SpecVizError(f"{what} must be a whole number, got {value!r}.") from None
    if not math.isfinite(number) or number != int(number):
        raise SpecVizError(f"{what} must be a whole number, got {value!r}.")
    return int(number)


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or value is None:
        raise SpecVizError(f"{what} must be a number, got {value!r}.")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SpecVizError(f"{what} must be a number, got {value!r}.") from None
    if not math.isfinite(number):
        raise SpecVizError(f"{what} must be a number, got {value!r}.")
    return number


def _lookahead(value: object, what: str) -> int:
    k = _whole(value, what)
    if not 1 <= k <= MAX_LOOKAHEAD:
        raise SpecVizError(f"{what} must be between 1 and {MAX_LOOKAHEAD}, got {k}.")
    return k


def modes_string(static_k: object = 5, heuristic_k: object = 5, threshold: object = 0.4,
                 dynamic_max: object = 20) -> str:
    """The `parse_modes` string for the four columns, e.g. "static:5,heuristic:5,dynamic:0.4:20,oracle"."""
    static = _lookahead(static_k, "Static k")
    heuristic = _lookahead(heuristic_k, "Heuristic starting k")
    confidence = _number(threshold, "The dynamic threshold")
    if not 0.0 <= confidence <= 1.0:
        raise SpecVizError(f"The dynamic threshold must be between 0 and 1, got {confidence:g}.")
    most = _lookahead(dynamic_max, "Dynamic max tokens")
    return f"static:{static},heuristic:{heuristic},dynamic:{confidence:g}:{most},oracle"


def max_new_tokens_value(value: object, limit: int) -> int:
    """The slider's value as an int, checked against the server's limit."""
    tokens = _whole(value, "Max new tokens")
    if not 1 <= tokens <= limit:
        raise SpecVizError(f"Max new tokens must be between 1 and {limit}, got {tokens}.")
    return tokens


# ---- example prompts -----------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    name: str
    prompt: str


def load_examples(path: Path | str = EXAMPLES_PATH) -> list[Example]:
    """The ready example prompts (assets/examples.json); an empty list if the file is missing."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    return [Example(str(item["name"]), str(item["prompt"])) for item in data]


# ---- columns and status --------------------------------------------------------------------


def column_title_html(policy: str, label: str | None = None) -> str:
    """The heading of a policy column: its name, and the run's label (with settings) once known."""
    title = POLICY_TITLES.get(policy, policy)
    if label:
        # "static k=5" under the title "Static": show only the settings part.
        settings = label[len(policy):].strip() if label.lower().startswith(policy.lower()) else label
        detail = settings
    else:
        detail = POLICY_BLURBS.get(policy, "")
    return (
        f'<div class="specviz-col-title"><span class="specviz-col-name">{html.escape(title)}</span>'
        f' <span class="specviz-col-detail">{html.escape(detail)}</span></div>'
    )


def placeholder_html(policy: str, state: str, note: str | None = None) -> str:
    """A column before (or instead of) its result; `state` is waiting, running, skipped or error."""
    text = note or {"waiting": "waiting…", "running": "running…", "skipped": "not run",
                    "error": "no result"}.get(state, state)
    return (
        f'<div class="specviz-column" data-policy="{html.escape(policy)}" data-state="{html.escape(state)}">'
        + column_title_html(policy)
        + f'<div class="specviz-placeholder">{html.escape(text)}</div></div>'
    )


def result_html(trace: Trace, comparison: Comparison) -> str:
    """A finished column: title, coloured tokens and the metrics block."""
    return (
        f'<div class="specviz-column" data-policy="{html.escape(trace.policy)}" data-state="done">'
        + column_title_html(trace.policy, trace.label)
        + render_trace(trace)
        + metrics_html(trace, comparison)
        + "</div>"
    )


def trace_for(comparison: Comparison | None, policy: str) -> Trace | None:
    if comparison is None:
        return None
    for t in comparison.traces:
        if t.policy == policy:
            return t
    return None


def next_policy(comparison: Comparison | None, order: Sequence[str] = POLICY_COLUMNS) -> str | None:
    """The first column policy that has no trace yet (the one running now, during a run)."""
    for policy in order:
        if trace_for(comparison, policy) is None:
            return policy
    return None


def column_htmls(comparison: Comparison | None, *, running: bool = True, note: str | None = None,
                 order: Sequence[str] = POLICY_COLUMNS) -> list[str]:
    """One HTML string per column.

    Columns with a trace show it. While `running`, the first column without one says
    "running…" and the rest "waiting…"; when not running (finished, stopped, failed) the
    columns without a trace say `note` (or "not run").
    """
    current = next_policy(comparison, order) if running else None
    out = []
    for policy in order:
        trace = trace_for(comparison, policy)
        if trace is not None:
            out.append(result_html(trace, comparison))  # type: ignore[arg-type]
        elif running:
            out.append(placeholder_html(policy, "running" if policy == current else "waiting"))
        else:
            out.append(placeholder_html(policy, "skipped", note))
    return out


def status_html(message: str, state: str = "info") -> str:
    """The status line under the buttons; `state` is idle, running, done, warning or error."""
    return f'<div class="specviz-status" data-state="{html.escape(state)}">{html.escape(message)}</div>'


def done_message(comparison: Comparison) -> str:
    """A one-line summary after a run: how many policies, whether everything matched the baseline."""
    traces = comparison.traces
    if comparison.partial:
        return (f"Stopped early: the time budget ran out after {len(traces)} of {len(POLICY_COLUMNS)} "
                "policies. Try fewer new tokens.")
    lossless = [t for t in traces if t.lossless is False]
    check = ("every policy's answer is identical to target-only greedy decoding"
             if traces and not lossless else
             f"{len(lossless)} policies differ from target-only greedy decoding" if lossless else "")
    base = comparison.baseline
    text = (f"Done: {len(traces)} policies, {comparison.max_new_tokens} max new tokens, "
            f"target-only baseline {base.target_passes} passes in {base.wall_s:.1f} s")
    return text + (f"; {check}." if check else ".")


def preset_info(presets: Mapping[str, object], name: str) -> str:
    """The description of a preset (plain text, for a widget's info line)."""
    preset = presets.get(name)
    return str(getattr(preset, "description", "")) if preset is not None else ""


# ---- server options ------------------------------------------------------------------------


class ServerOptions(NamedTuple):
    host: str
    port: int
    share: bool


def server_options(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> ServerOptions:
    """Host, port and share: flags override GRADIO_SERVER_NAME/GRADIO_SERVER_PORT, which override defaults."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(description="SpecViz: speculative decoding lookahead policies side by side.")
    parser.add_argument("--host", help=f"interface to listen on (default $GRADIO_SERVER_NAME or {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, help=f"port (default $GRADIO_SERVER_PORT or {DEFAULT_PORT})")
    parser.add_argument("--share", action="store_true", help="create a public gradio.live link")
    args = parser.parse_args(list(argv) if argv is not None else None)
    host = args.host or env.get("GRADIO_SERVER_NAME") or DEFAULT_HOST
    if args.port is not None:
        port = args.port
    elif env.get("GRADIO_SERVER_PORT"):
        try:
            port = int(env["GRADIO_SERVER_PORT"])
        except ValueError:
            parser.error(f"GRADIO_SERVER_PORT must be a port number, got {env['GRADIO_SERVER_PORT']!r}")
    else:
        port = DEFAULT_PORT
    if not 0 < port < 65536:
        parser.error(f"the port must be between 1 and 65535, got {port}")
    return ServerOptions(host=host, port=port, share=bool(args.share))
