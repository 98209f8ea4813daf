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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .errors import SpecVizError
from .policies import MAX_LOOKAHEAD
from .render import metrics_html, render_trace
from .trace import Comparison, Round, Trace

# One column per policy, in this order, whatever the settings.
POLICY_COLUMNS: list[str] = ["static", "heuristic", "dynamic", "oracle"]

# Optional columns, shown only when their checkbox is ticked (or an imported run has them).
EXTRA_COLUMNS: list[str] = ["adaptive", "entropy"]
ALL_COLUMNS: list[str] = POLICY_COLUMNS + EXTRA_COLUMNS

POLICY_TITLES: dict[str, str] = {
    "static": "Static",
    "heuristic": "Heuristic",
    "dynamic": "Dynamic (confidence)",
    "oracle": "Oracle",
    "adaptive": "Adaptive (confidence)",
    "entropy": "Entropy",
}

POLICY_BLURBS: dict[str, str] = {
    "static": "k draft tokens every round",
    "heuristic": "+2 after a fully accepted round, else -1",
    "dynamic": "stop drafting when draft confidence < threshold",
    "oracle": "drafts exactly until the draft disagrees",
    "adaptive": "dynamic threshold re-fitted after every round",
    "entropy": "stop drafting when the draft's entropy > bound",
}

ORACLE_SAMPLED_NOTE = ("not run: the oracle is a greedy idea (it drafts exactly until the draft disagrees with "
                       "the target's greedy answer), and with temperature > 0 there is no single answer to "
                       "agree with.")

EXAMPLES_PATH = Path(__file__).resolve().parent.parent / "assets" / "examples.json"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860


# ---- settings -> modes ---------------------------------------------------------------------


def _finite(value: object, message: str) -> float:
    """A finite number from a widget value, or SpecVizError(message)."""
    if isinstance(value, bool) or value is None:
        raise SpecVizError(message)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SpecVizError(message) from None
    if not math.isfinite(number):
        raise SpecVizError(message)
    return number


def _whole(value: object, what: str) -> int:
    """A whole number from a widget value (sliders and number boxes give floats)."""
    message = f"{what} must be a whole number, got {value!r}."
    number = _finite(value, message)
    if number != int(number):
        raise SpecVizError(message)
    return int(number)


def _number(value: object, what: str) -> float:
    return _finite(value, f"{what} must be a number, got {value!r}.")


def _lookahead(value: object, what: str) -> int:
    k = _whole(value, what)
    if not 1 <= k <= MAX_LOOKAHEAD:
        raise SpecVizError(f"{what} must be between 1 and {MAX_LOOKAHEAD}, got {k}.")
    return k


def modes_string(static_k: object = 5, heuristic_k: object = 5, threshold: object = 0.4,
                 dynamic_max: object = 20, adaptive: object = None, entropy: object = None) -> str:
    """The `parse_modes` string for the columns, e.g. "static:5,heuristic:5,dynamic:0.4:20,oracle".

    `adaptive` (a start threshold) and `entropy` (a bound in nats) add the optional columns when
    not None: "…,oracle,adaptive:0.4,entropy:1".
    """
    static = _lookahead(static_k, "Static k")
    heuristic = _lookahead(heuristic_k, "Heuristic starting k")
    confidence = _number(threshold, "The dynamic threshold")
    if not 0.0 <= confidence <= 1.0:
        raise SpecVizError(f"The dynamic threshold must be between 0 and 1, got {confidence:g}.")
    most = _lookahead(dynamic_max, "Dynamic max tokens")
    text = f"static:{static},heuristic:{heuristic},dynamic:{confidence:g}:{most},oracle"
    if adaptive is not None:
        start = _number(adaptive, "The adaptive start threshold")
        if not 0.0 <= start <= 1.0:
            raise SpecVizError(f"The adaptive start threshold must be between 0 and 1, got {start:g}.")
        text += f",adaptive:{start:g}"
    if entropy is not None:
        bound = _number(entropy, "The entropy bound")
        if bound < 0:
            raise SpecVizError(f"The entropy bound must be 0 or more (nats), got {bound:g}.")
        text += f",entropy:{bound:g}"
    return text


def temperature_value(value: object, limit: float = 2.0) -> float:
    """The temperature box as a float: 0 (or empty) is greedy."""
    if value is None or value == "":
        return 0.0
    temperature = _number(value, "The temperature")
    if not 0.0 <= temperature <= limit:
        raise SpecVizError(f"The temperature must be between 0 (greedy) and {limit:g}, got {temperature:g}.")
    return temperature


def seed_value(value: object) -> int | None:
    """The seed box as an int, or None when empty."""
    if value is None or value == "":
        return None
    seed = _whole(value, "The seed")
    if seed < 0:
        raise SpecVizError(f"The seed must be 0 or more, got {seed}.")
    return seed


def active_columns(adaptive: bool = False, entropy: bool = False) -> list[str]:
    """The columns a run with these checkboxes fills."""
    return POLICY_COLUMNS + (["adaptive"] if adaptive else []) + (["entropy"] if entropy else [])


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


def _sampled(comparison: Comparison | None) -> bool:
    return comparison is not None and comparison.temperature > 0


def next_policy(comparison: Comparison | None, order: Sequence[str] = POLICY_COLUMNS) -> str | None:
    """The first column policy that has no trace yet (the one running now, during a run).

    The oracle is skipped for sampled runs: it is not run then."""
    for policy in order:
        if policy == "oracle" and _sampled(comparison):
            continue
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
        elif policy == "oracle" and _sampled(comparison):
            out.append(placeholder_html(policy, "skipped", ORACLE_SAMPLED_NOTE))
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
    if comparison.temperature > 0:
        check = (f"sampled at T={comparison.temperature:g}: every answer follows the target's distribution "
                 "(compared by distribution, not token identity); the oracle is greedy-only and was not run")
    base = comparison.baseline
    text = (f"Done: {len(traces)} policies, {comparison.max_new_tokens} max new tokens, "
            f"target-only baseline {base.target_passes} passes in {base.wall_s:.1f} s")
    return text + (f"; {check}." if check else ".")


def preset_info(presets: Mapping[str, object], name: str) -> str:
    """The description of a preset (plain text, for a widget's info line)."""
    preset = presets.get(name)
    return str(getattr(preset, "description", "")) if preset is not None else ""


# ---- round-by-round replay -----------------------------------------------------------------


class StopReason(NamedTuple):
    code: str  # "budget", "threshold", "entropy", "eos", "none"
    text: str


def _piece(texts: Sequence[str], ids: Sequence[int], i: int) -> str:
    return texts[i] if i < len(texts) else f"[{ids[i]}]"


def stop_reason(r: Round, trace: Trace, eos_ids: Collection[int] = ()) -> StopReason:
    """Why the draft stopped proposing in round `r`: budget, threshold, entropy bound or EOS.

    The engine stops after a token that is EOS or that the policy rejects (probability below the
    threshold in force, entropy above the bound), else when the round's budget is used up.
    Without `eos_ids` (an imported run) EOS is inferred when nothing else explains an early stop.
    """
    if r.lookahead == 0:
        return StopReason("budget", f"nothing drafted: the budget was {r.budget} (the answer was nearly complete)")
    last = r.lookahead - 1
    if r.draft_ids[last] in set(eos_ids):
        return StopReason("eos", "the draft proposed end of text (EOS)")
    if r.threshold is not None and last < len(r.draft_probs) and r.draft_probs[last] < r.threshold:
        return StopReason("threshold", f"probability {r.draft_probs[last]:.2f} fell below the threshold "
                                       f"{r.threshold:.2f}")
    bound = trace.params.get("max_entropy") if trace.policy == "entropy" else None
    if bound is not None and last < len(r.draft_entropies) and r.draft_entropies[last] > float(bound):
        return StopReason("entropy", f"entropy {r.draft_entropies[last]:.2f} nats rose above the bound "
                                     f"{float(bound):g} nats")
    if r.lookahead >= r.budget:
        return StopReason("budget", f"budget reached: {r.budget} token{'s' if r.budget != 1 else ''} allowed "
                                    "this round")
    if not eos_ids:
        return StopReason("eos", "the draft proposed end of text (EOS)")
    return StopReason("none", "stopped early (no reason recorded)")


@dataclass(frozen=True)
class DraftToken:
    text: str
    prob: float | None
    entropy: float | None
    verdict: str  # "accepted", "rejected" (the first wrong one), "discarded" (after it)


@dataclass(frozen=True)
class ReplayStep:
    """Everything the replay panel shows for one round of one trace."""

    label: str
    index: int  # 0-based round index
    rounds: int  # rounds in the trace
    context: str  # committed answer text before this round
    tokens: list[DraftToken]
    stop: StopReason
    added_text: str | None  # the target's own token
    added_kind: str | None  # "correction" or "bonus"
    budget: int
    threshold: float | None
    target_passes: int  # so far, this round included
    draft_passes: int  # so far, this round included


def replay_step(trace: Trace, index: int, eos_ids: Collection[int] = ()) -> ReplayStep:
    """The replay data of round `index` (clamped to the trace's rounds)."""
    if not trace.rounds:
        raise SpecVizError(f"{trace.label} has no rounds to replay.")
    index = max(0, min(int(index), len(trace.rounds) - 1))
    context = []
    for r in trace.rounds[:index]:
        context += [_piece(r.draft_texts, r.draft_ids, i) for i in range(r.accepted)]
        if r.target_id is not None:
            context.append(r.target_text if r.target_text is not None else f"[{r.target_id}]")
    r = trace.rounds[index]
    tokens = []
    for i in range(r.lookahead):
        verdict = "accepted" if i < r.accepted else "rejected" if i == r.accepted else "discarded"
        tokens.append(DraftToken(_piece(r.draft_texts, r.draft_ids, i),
                                 r.draft_probs[i] if i < len(r.draft_probs) else None,
                                 r.draft_entropies[i] if i < len(r.draft_entropies) else None, verdict))
    added = None if r.target_id is None else (r.target_text if r.target_text is not None else f"[{r.target_id}]")
    return ReplayStep(label=trace.label, index=index, rounds=len(trace.rounds), context="".join(context),
                      tokens=tokens, stop=stop_reason(r, trace, eos_ids), added_text=added, added_kind=r.target_kind,
                      budget=r.budget, threshold=r.threshold, target_passes=index + 1,
                      draft_passes=sum(x.lookahead for x in trace.rounds[: index + 1]))


def visible_whitespace(text: str) -> str:
    """A token with its spaces, newlines and tabs drawn (␣ ⏎ ⇥), ∅ for an empty one: for the replay table."""
    return text.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") if text else "∅"


_VERDICT_TEXT = {"accepted": "accepted", "rejected": "rejected: the target disagrees",
                 "discarded": "thrown away (after a rejection)"}


def replay_html(step: ReplayStep) -> str:
    """The replay panel for one round; every model or user text is escaped."""
    e = html.escape
    rows = []
    for i, t in enumerate(step.tokens):
        kind = "accepted" if t.verdict == "accepted" else "rejected"
        prob = "–" if t.prob is None else f"{t.prob:.2f}"
        entropy = "–" if t.entropy is None else f"{t.entropy:.2f}"
        rows.append(f'<tr data-verdict="{t.verdict}"><td>{i + 1}</td>'
                    f'<td><span class="tok tok-{kind}">{e(visible_whitespace(t.text))}</span></td>'
                    f"<td>{prob}</td><td>{entropy}</td><td>{e(_VERDICT_TEXT[t.verdict])}</td></tr>")
    table = ('<table class="replay-drafts"><thead><tr><th>#</th><th>draft token</th><th>probability</th>'
             '<th>entropy (nats)</th><th>target\'s verdict</th></tr></thead><tbody>'
             + ("".join(rows) or '<tr><td colspan="5">no draft tokens this round</td></tr>')
             + "</tbody></table>")
    if step.added_text is None:
        added = "none (the answer ended)"
    else:
        what = "correction, replacing the first rejected token" if step.added_kind == "correction" else \
            "bonus token, after every draft token was accepted"
        added = (f'<span class="tok tok-{e(step.added_kind or "correction")}">{e(visible_whitespace(step.added_text))}'
                 f"</span> ({what})")
    threshold = "" if step.threshold is None else f" · threshold in force {step.threshold:.2f}"
    return (
        f'<div class="specviz-replay" data-round="{step.index}" data-label="{e(step.label)}">'
        f'<div class="replay-head">Round <span data-replay="round">{step.index + 1}</span> of '
        f'<span data-replay="rounds">{step.rounds}</span> · {e(step.label)} · budget {step.budget}{threshold}</div>'
        f'<div class="replay-line"><b>Context so far:</b> <span class="replay-context">'
        f'{e(step.context) if step.context else "<i>(nothing yet: first round)</i>"}</span></div>'
        f'<div class="replay-line"><b>The draft proposes:</b></div>{table}'
        f'<div class="replay-line"><b>Drafting stopped:</b> <span data-replay="stop" data-code="{e(step.stop.code)}">'
        f"{e(step.stop.text)}</span></div>"
        f'<div class="replay-line"><b>The target adds:</b> {added}</div>'
        f'<div class="replay-line replay-counts">Target passes so far: <b data-replay="target_passes">'
        f'{step.target_passes}</b> · draft passes so far: <b data-replay="draft_passes">{step.draft_passes}</b></div>'
        "</div>"
    )


# ---- import --------------------------------------------------------------------------------

MAX_IMPORT_BYTES = 20 * 1024 * 1024


def load_comparison_file(path: str | os.PathLike | None, max_bytes: int = MAX_IMPORT_BYTES) -> Comparison:
    """A comparison from an uploaded JSON file (the CLI's --json / the app's export).

    Raises SpecVizError with a readable message for anything that is not such a file."""
    if not path:
        raise SpecVizError("No file was uploaded.")
    try:
        size = os.path.getsize(path)
    except OSError:
        raise SpecVizError("The uploaded file could not be read.") from None
    if size > max_bytes:
        raise SpecVizError(f"The file is too large ({size / 1e6:.1f} MB); the limit is {max_bytes / 1e6:.0f} MB.")
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise SpecVizError("The file is not UTF-8 text; export a comparison as JSON and upload that.") from None
    return comparison_from_text(text)


def comparison_from_text(text: str) -> Comparison:
    try:
        data = json.loads(text)
    except ValueError as error:
        line = getattr(error, "lineno", "?")
        raise SpecVizError(f"The file is not valid JSON ({type(error).__name__}: line {line}).") from None
    if not isinstance(data, dict) or "baseline" not in data or "modes" not in data:
        raise SpecVizError("This JSON is not a SpecViz comparison (it needs \"baseline\" and \"modes\"; "
                           "use a file from the Download button or the CLI's --json).")
    try:
        comparison = Comparison.from_dict(data)
        for t in comparison.traces:
            for r in t.rounds:
                if not 0 <= r.accepted <= r.lookahead or len(r.draft_probs) > r.lookahead:
                    raise ValueError("inconsistent round")
                if not isinstance(r.index, int) or not isinstance(r.position, int):
                    raise TypeError("bad round index")
        # Render once so that a malformed value fails here and not in the middle of the view.
        for t in comparison.traces:
            metrics_html(t, comparison)
            render_trace(t)
    except Exception as error:  # noqa: BLE001 - any malformed field: one clear message
        raise SpecVizError(f"This SpecViz comparison file is damaged or from an incompatible version "
                           f"({type(error).__name__}).") from None
    return comparison


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
