"""The HTML of the app's policy columns and status line (no gradio import, testable without a browser).

Every piece of text that may come from a user or a model goes through `html.escape` here or in
`render.py` before it becomes HTML.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from ..decoding.modes import POLICIES
from ..decoding.trace import Comparison, Trace, drafting_view
from .render import metrics_html, render_trace
from .turns import expected_seconds

if TYPE_CHECKING:
    from ..pair.models import LoadState

# One column per policy, in the registry's order; the optional ones only when their checkbox is
# ticked (or an imported run has them).
POLICY_COLUMNS: list[str] = [name for name, kind in POLICIES.items() if not kind.optional]
EXTRA_COLUMNS: list[str] = [name for name, kind in POLICIES.items() if kind.optional]
ALL_COLUMNS: list[str] = POLICY_COLUMNS + EXTRA_COLUMNS
POLICY_TITLES: dict[str, str] = {name: kind.title for name, kind in POLICIES.items()}
POLICY_BLURBS: dict[str, str] = {name: kind.blurb for name, kind in POLICIES.items()}

ORACLE_SAMPLED_NOTE = ("not run: the oracle is a greedy idea (it drafts exactly until the draft disagrees with "
                       "the target's greedy answer), and with temperature > 0 there is no single answer to "
                       "agree with.")


# ---- columns and status --------------------------------------------------------------------


def active_columns(ticked: Collection[str] = ()) -> list[str]:
    """The columns a run fills: every policy's but the optional ones not `ticked`."""
    return POLICY_COLUMNS + [policy for policy in EXTRA_COLUMNS if policy in ticked]


def column_title_html(policy: str, label: str | None = None) -> str:
    """The heading of a policy column: its name, and the run's label (with settings) once known."""
    title = POLICY_TITLES.get(policy, policy)
    if label:
        # "static k=5" under the title "Static": show only the settings part ("cost-aware" has none).
        named = next((name for name in (policy, title) if label.lower().startswith(name.lower())), None)
        detail = label[len(named):].strip() if named else label
        detail = detail or POLICY_BLURBS.get(policy, "")
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


def live_html(trace: Trace, state: str = "running") -> str:
    """A column whose policy is running (or `state="replaying"`: a finished run played back): the
    rounds decided so far, the pending draft if any, and the live pass counters."""
    return (
        f'<div class="specviz-column" data-policy="{html.escape(trace.policy)}" data-state="{html.escape(state)}">'
        + column_title_html(trace.policy, trace.label)
        + render_trace(trace)
        + f'<div class="specviz-live">{html.escape(state)}: round <b data-live="rounds">'
        + f'{len(trace.rounds)}</b> · target passes <b data-live="target_passes">{trace.target_passes}</b>'
        + f' · draft passes <b data-live="draft_passes">{trace.draft_passes}</b>'
        + f' · tokens <b data-live="new_tokens">{trace.new_tokens}</b></div></div>'
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



ORACLE_WAITING_NOTE = "waiting for the first policy's answer (the target's greedy answer) to find the ideal…"


def column_htmls(comparison: Comparison | None, *, running: bool = True, note: str | None = None,
                 order: Sequence[str] = POLICY_COLUMNS, live: Trace | None = None) -> list[str]:
    """One HTML string per column.

    Columns with a finished trace show it; the `live` trace (a policy under way) shows its
    rounds so far. While `running`, the other columns say "waiting…"; when not running
    (finished, stopped, failed) the columns without a trace say `note` (or "not run").
    """
    out = []
    for policy in order:
        trace = trace_for(comparison, policy)
        if trace is not None:
            out.append(result_html(trace, comparison))  # type: ignore[arg-type]
        elif live is not None and live.policy == policy:
            out.append(live_html(live))
        elif policy == "oracle" and _sampled(comparison):
            out.append(placeholder_html(policy, "skipped", ORACLE_SAMPLED_NOTE))
        elif running:
            oracle_waits = policy == "oracle" and (comparison is None or comparison.oracle_ideal is None)
            out.append(placeholder_html(policy, "waiting", ORACLE_WAITING_NOTE if oracle_waits else None))
        else:
            out.append(placeholder_html(policy, "skipped", note))
    return out


def playback_htmls(comparison: Comparison, order: Sequence[str], frames: int) -> Iterator[list[str]]:
    """A finished comparison played back as it streamed, in `frames` steps (each made when asked
    for, so the first is on its way at once): step j shows every column's first j/frames of its
    rounds, judged, and the next round's draft pending. The finished view is not among them
    (`column_htmls(..., running=False)`)."""
    for step in range(frames):
        htmls = []
        for policy in order:
            trace = trace_for(comparison, policy)
            if trace is None:
                htmls.append(placeholder_html(policy, "skipped", ORACLE_SAMPLED_NOTE if policy == "oracle"
                                              and _sampled(comparison) else None))
                continue
            shown = drafting_view(trace, len(trace.rounds) * step // frames)
            htmls.append(live_html(shown, state="replaying"))
        yield htmls


def load_status_html(state: LoadState, preset: str) -> str:
    """The model-pair line above the status: loading (which step, for how long), ready or failed."""
    if state.phase == "loading":
        return status_html(f"Loading the model pair {preset}: {state.step} ({state.elapsed_s():.0f} s)…", "running")
    if state.phase == "failed":
        # The message names the cause and the fix, and says to run again (the next Run retries).
        return status_html(f"The model pair {preset} could not be loaded. {state.step}", "error")
    if state.phase == "ready":
        from ..pair.models import pair_setup

        setup = pair_setup(preset)
        return status_html(f"Model pair {preset} ready (loaded in {state.elapsed_s():.1f} s)"
                           + (f": {setup}." if setup else "."), "done")
    return status_html(f"The model pair {preset} loads on the first Run.", "idle")


def expected_duration(preset: str, max_new_tokens: int, runs: int) -> str:
    """" (about N in all)" for a comparison of `runs` decoding runs (the policies and target-only) on
    a preset whose cost per token was measured; "" otherwise. An estimate: answers that end early
    take less."""
    seconds = expected_seconds(preset, max_new_tokens, runs)
    if seconds is None:
        return ""
    return f" (about {seconds:.0f} s in all)" if seconds < 120 else f" (about {seconds / 60:.0f} min in all)"


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
    if base is None:
        return f"Done: {len(traces)} policies; target-only decoding did not run, so nothing was checked."
    drafted_by = ""
    kind = comparison.draft.kind
    if not kind.counts_passes:  # no draft model ran: say what proposed the tokens
        drafted_by = f"drafts by {kind.title} ({kind.described(comparison.draft.params)}, no draft model), "
    text = (f"Done: {len(traces)} policies, {drafted_by}{comparison.max_new_tokens} max new tokens, "
            f"target-only baseline {base.target_passes} passes in {base.wall_s:.1f} s"
            + (f" ({len(base.token_ids) / base.wall_s:.1f} tokens/s)" if base.wall_s > 0 else ""))
    reference = comparison.oracle_reference
    if reference and comparison.trace(reference).lossless is False:
        check += (f"; the oracle was computed along {reference}'s answer, which is not the target's greedy "
                  "answer, so its figures are approximate")
    return text + (f"; {check}." if check else ".")


def preset_info(presets: Mapping[str, object], name: str) -> str:
    """The description of a preset (plain text, for a widget's info line)."""
    preset = presets.get(name)
    return str(getattr(preset, "description", "")) if preset is not None else ""
