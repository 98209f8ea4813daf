"""Writing it down: a run's STUDY.md (`report_markdown`), its results.csv (`write_csv`) and the
page of record over every kept run (`page_of_record`: the verdicts of each pair's current run,
its speedups, which draft (each draft against the model draft), and the earlier runs).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...explain.costs import StudyPassCosts
from ...explain.hindsight import SavedRun
from ..records import PromptResult, pooled_costs
from .current import Run, model_draft_run, why_not_current
from .figures import SuiteFigures, modeled_time, preset_figures
from .sections import prefill_coverage_line, preset_sections
from .text import _f, _x, duration
from .verdicts import (
    CLAIMS,
    DRAFT_MARGIN,
    DRAFT_RULES,
    LOOKUP_MARK,
    PAIR_DRAFT_MARK,
    RULES,
    STUDY_MODES,
    Verdicts,
    best_practical,
    draft_name,
    model_preset,
    suited_policy,
    verdict_cell,
)


def verdict_table(columns: Sequence[str], verdicts: Mapping[str, Verdicts],
                  about: Sequence[tuple[str, Sequence[str]]] = ()) -> list[str]:
    """A claim a row, a column a preset; `about`: rows put first that say what each column ran
    (their first cell, then one per column)."""
    lines = ["| claim | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in about]
    for key, text in CLAIMS:
        if key == "costaware" and all(verdicts[p][key] is None for p in columns):
            continue  # no run had the rule
        lines.append(f"| {text} | " + " | ".join(verdict_cell(key, verdicts[p][key]) for p in columns) + " |")
    return lines


def report_markdown(records: Sequence[PromptResult], invocations: Sequence[dict[str, Any]],
                    results_link: str, report_command: str | None = None,
                    saved: Mapping[tuple[str, str, str, int], SavedRun] | None = None) -> str:
    """STUDY.md from the records. `invocations`: the runs that produced them (meta.json); `saved`:
    the prompts' whole comparisons where kept, for the what-if replays (section 5)."""
    done = [r for r in records if not r.partial]
    partial = len(records) - len(done)
    presets = list(dict.fromkeys(r.preset for r in done))
    suites_seen = list(dict.fromkeys(r.suite for r in done))
    lines = ["# The study's claims, checked on SpecViz's pairs", "",
             (f"Each claim of the Hugging Face / Intel Labs study of dynamic speculation lookahead (docs/DESIGN.md), "
              f"checked on the prompts below. Every figure is computed from [`{results_link}`]({results_link}) "
              f"(one record per prompt; the same figures per prompt and mode in `results.csv` beside it) by "
              f"`specviz/study/runner.py`; the verdicts follow the rules stated below, from those numbers."), ""]
    lines += ["## How these figures were made", ""]
    for inv in invocations:
        lines += [f"- `{inv.get('command', '?')}`",
                  (f"  - {inv.get('started', '?')} to {inv.get('finished') or 'interrupted'}; "
                   f"{duration(float(inv.get('wall_s') or 0.0))} wall time, {inv.get('prompts_run', 0)} prompts "
                   f"computed ({inv.get('prompts_skipped', 0)} already done)"),
                  (f"  - machine: {inv.get('cpu', '?')}, {inv.get('cores', '?')} cores; torch threads "
                   f"(`torch.get_num_threads()`) {inv.get('torch_threads', '?')}; "
                   + ", ".join(f"{k} {v}" for k, v in (inv.get('versions') or {}).items()))]
        lines += [f"  - {preset} ran as: {setup}" for preset, setup in (inv.get("setups") or {}).items()]
    if report_command:
        lines.append(f"- report regenerated with `{report_command}`")
    total = sum(r.seconds for r in done)
    per_preset_count = ", ".join(f"{p}: {sum(r.preset == p for r in done)}" for p in presets)
    budgets = ", ".join(sorted({str(r.max_new_tokens) for r in done}))
    lines += ["", (f"Prompts: {len(done)} records ({per_preset_count}), at most {budgets} new tokens, greedy, "
                   f"modes {', '.join(dict.fromkeys(m.label for r in done for m in r.modes)) or STUDY_MODES}, one prompt at a time. Compute time of these prompts: {duration(total)} "
                   f"(mean {total / len(done) if done else 0:.1f} s per prompt)."
                   + (f" Left out: {partial} partial records (time budget ran out)." if partial else "")), ""]
    if done:
        lines += [prefill_coverage_line(done), ""]
    if not done:
        return "\n".join(lines + ["No finished prompts yet.", ""])

    verdicts: dict[str, Verdicts] = {}
    bodies: list[str] = []
    for preset in presets:
        body, verdicts[preset] = preset_sections(preset, [r for r in done if r.preset == preset], suites_seen, saved)
        bodies += body
    lines += ["## Verdicts", ""] + verdict_table(presets, verdicts)
    lines += ["", "## The rules", "", RULES, ""]
    return "\n".join(lines + bodies) + "\n"


CSV_COLUMNS = ["preset", "suite", "prompt_id", "max_new_tokens", "mode", "policy", "new_tokens", "target_passes",
               "draft_passes", "accepted", "acceptance_rate", "wall_s", "draft_s", "verify_s", "measured_speedup",
               "modeled_speedup", "lossless", "partial"]


def write_csv(path: Path, records: Sequence[PromptResult]) -> None:
    """One row per prompt and mode (target-only included); modeled speedups use the suite's costs."""
    costs: dict[tuple[str, str, int], StudyPassCosts] = {}
    for key in {(r.preset, r.suite, r.max_new_tokens) for r in records}:
        costs[key] = pooled_costs([r for r in records if (r.preset, r.suite, r.max_new_tokens) == key
                                             and not r.partial])
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in sorted(records, key=lambda r: (r.preset, r.suite, r.index)):
            c = costs[(r.preset, r.suite, r.max_new_tokens)]
            base = c.target_only_modeled_time(r.new_tokens)
            writer.writerow([r.preset, r.suite, r.prompt_id, r.max_new_tokens, "target-only", "target-only",
                             r.new_tokens, r.new_tokens, 0, 0, "", f"{r.target_only_wall_s:.4f}", "", "", "1.0000",
                             "1.0000", True, r.partial])
            for m in r.modes:
                modeled = modeled_time(c, r, m)
                writer.writerow([r.preset, r.suite, r.prompt_id, r.max_new_tokens, m.label, m.policy, m.new_tokens,
                                 m.target_passes, m.draft_passes, m.accepted,
                                 f"{m.accepted / m.drafted:.4f}" if m.drafted else "",
                                 f"{m.wall_s:.4f}", f"{m.draft_s:.4f}", f"{m.verify_s:.4f}",
                                 f"{r.target_only_wall_s / m.wall_s:.4f}" if m.wall_s else "",
                                 f"{base / modeled:.4f}" if modeled else "", m.lossless, r.partial])


def speedup_table(run: Run) -> list[str]:
    """Each suite's measured speedup per policy over target-only decoding (summed over the suite),
    modeled in parentheses: the figures a summary quotes."""
    figures = preset_figures(run.preset, run.records, run.suites)
    policies = list(dict.fromkeys(p for f in figures for p in f.totals))
    labels = {p: next(t.label for f in figures if (t := f.totals.get(p)) is not None) for p in policies}
    lines = [(f"**{run.preset}**, {run.link}: {run.machine()}; {run.setup()}. Measured speedup over target-only "
              f"decoding, each suite's wall times summed (modeled in parentheses; section 3 of the pair below)."), "",
             "| suite | " + " | ".join(labels[p] for p in policies) + " |", "|---" * (len(policies) + 1) + "|"]
    for f in figures:
        cells = [f"{_x(f.measured_speedup(p))} ({_x(f.modeled_speedup(p))})" if p in f.totals else "not run"
                 for p in policies]
        lines.append(f"| {f.suite} | " + " | ".join(cells) + " |")
    return lines + [""]


def _best_cell(figures: SuiteFigures | None, best: tuple[str, float] | None) -> str:
    return "not run" if figures is None or best is None else f"{figures.totals[best[0]].label} {_x(best[1])}"


def draft_section(current: Mapping[str, Run], runs: Sequence[Run] = ()) -> list[str]:
    """Which draft (DRAFT_RULES): per pair studied with another draft than its model (lookup,
    hybrid, a smaller output layer) and suite, the faster of it and the model draft, the policy that
    suits a lookup draft, and per pair and machine the fastest of all its drafts. Empty where no
    such pair was studied. `runs`: every run the page knows of (by default the current ones), where
    the model draft's run is found."""
    others = [name for name in current if PAIR_DRAFT_MARK in name]
    if not others:
        return []
    known = runs or list(current.values())
    lines = ["## Which draft: each draft against the model draft", "", DRAFT_RULES, ""]
    for name in others:
        run, draft = current[name], draft_name(name)
        model = model_draft_run(run, known)
        figures = preset_figures(name, run.records, run.suites)
        model_figures = _by_suite(model)
        lines += [(f"**{name}** ({run.link}) against **{model_preset(name)}**'s model draft "
                   f"({model.link if model else 'not studied on this machine'}), measured:"), "",
                  f"| suite | model draft: best practical | {draft}: best practical | {draft} / model | faster draft |",
                  "|---|---|---|---|---|"]
        for f in figures:
            other = model_figures.get(f.suite)
            ours, theirs = best_practical(f), best_practical(other) if other else None
            ratio = ours[1] / theirs[1] if ours and theirs and theirs[1] > 0 else None
            faster = "n/a" if ratio is None else (draft if ratio > 1 + DRAFT_MARGIN else "model draft"
                                                  if ratio < 1 / (1 + DRAFT_MARGIN) else "even")
            lines.append(f"| {f.suite} | {_best_cell(other, theirs)} | {_best_cell(f, ours)} | {_f(ratio)} "
                         f"| {faster} |")
        lines += [""]
        if LOOKUP_MARK in name:
            lines += [f"The policy that suits this lookup draft: {suited_policy(figures)[1]}.", ""]
    return lines + which_draft(current, known)


def _fastest(ranked: Sequence[tuple[float, str]]) -> str:
    """The fastest draft of (speedup, draft) best first, or those even with it (DRAFT_RULES)."""
    if not ranked:
        return "n/a"
    even = [name for speed, name in ranked if speed * (1 + DRAFT_MARGIN) >= ranked[0][0]]
    return ranked[0][1] if len(even) == 1 else f"even: {', '.join(even)}"


def _by_suite(run: Run | None) -> dict[str, SuiteFigures]:
    return {f.suite: f for f in preset_figures(run.preset, run.records, run.suites)} if run else {}


def which_draft(current: Mapping[str, Run], runs: Sequence[Run]) -> list[str]:
    """Per model pair and machine, a suite a row and a draft a column: each draft's best practical
    policy, and the fastest draft (DRAFT_RULES)."""
    lines: list[str] = []
    others = [current[name] for name in current if PAIR_DRAFT_MARK in name]
    for base, machine in dict.fromkeys((model_preset(r.preset), r.machine()) for r in others):
        model = model_draft_run(next(r for r in others if (model_preset(r.preset), r.machine()) == (base, machine)),
                                runs)
        drafts = ([model] if model else []) + [r for r in others
                                               if (model_preset(r.preset), r.machine()) == (base, machine)]
        figures = [_by_suite(r) for r in drafts]
        names = [draft_name(r.preset) for r in drafts]
        suites = list(dict.fromkeys(s for f in figures for s in f))
        lines += [f"**Which draft for {base}** ({machine}), measured:", "",
                  "| suite | " + " | ".join(names) + " | fastest draft |", "|---" * (len(names) + 2) + "|"]
        for suite in suites:
            bests = [best_practical(f[suite]) if suite in f else None for f in figures]
            cells = [_best_cell(f.get(suite), b) for f, b in zip(figures, bests)]
            ranked = sorted(((b[1], n) for b, n in zip(bests, names) if b is not None), reverse=True)
            lines.append(f"| {suite} | " + " | ".join(cells) + f" | {_fastest(ranked)} |")
        lines += [""]
    return lines


def page_of_record(runs: Sequence[Run], current: Mapping[str, Run],
                   saved: Mapping[tuple[str, str, str, int], SavedRun], report_command: str) -> str:
    """docs/STUDY.md: per preset, the verdicts of its current run (`current_runs`) with the machine
    and set-up it ran on, its figures, and the earlier runs linked. Made by `report_command`."""
    presets = list(current)
    lines = ["# The study's claims, checked on SpecViz's pairs: the page of record", "",
             (f"Each claim of the Hugging Face / Intel Labs study of dynamic speculation lookahead (docs/DESIGN.md), "
              f"checked on SpecViz's pairs. This page is made from the kept records by `{report_command}`, without "
              f"any model; it is never edited by hand. For each pair it shows the latest complete run among those "
              f"folders: of the runs with no record cut short and every suite the pair was run on, the one whose "
              f"last record is the newest. The other runs are listed under [Earlier runs](#earlier-runs); each "
              f"folder's own `STUDY.md` is its full report, with the commands that made it. The verdicts follow the "
              f"rules below, from the recorded numbers."), "",
             "## Verdicts", ""]
    verdicts: dict[str, Verdicts] = {}
    bodies: list[str] = []
    for preset in presets:
        run = current[preset]
        intro = [(f"Current run: {run.link}, {run.dates()}; machine: {run.machine()}; set-up: {run.setup()}; "
                  f"policies: {run.policies()}."), ""]
        suites = list(dict.fromkeys(r.suite for r in run.records))
        body, verdicts[preset] = preset_sections(preset, run.records, suites, saved, intro)
        bodies += body
    about = [("run", [f"{current[p].link}, {current[p].dates()}" for p in presets]),
             ("machine", [current[p].machine() for p in presets]),
             ("set-up", [current[p].setup() for p in presets]),
             ("prompts", [current[p].prompts() for p in presets]),
             ("policies", [current[p].policies() for p in presets])]
    incomplete = [f"{p} ({why})" for p in presets if (why := why_not_current(current[p], runs))]
    lines += verdict_table(presets, verdicts, about) + [""]
    if incomplete:
        lines += [f"No complete run yet for {', '.join(incomplete)}: its newest run is shown.", ""]
    lines += ["## Speedups", ""]
    for preset in presets:
        lines += speedup_table(current[preset])
    lines += draft_section(current, runs)
    lines += ["## Earlier runs", ""]
    for preset in presets:
        for run in sorted((r for r in runs if r.preset == preset and r is not current[preset]),
                          key=lambda r: r.newest, reverse=True):
            why = why_not_current(run, runs)
            lines.append(f"- {preset}: {run.link}, {run.dates()} ({why or 'superseded by a newer run'}); "
                         f"{run.machine()}; set-up: {run.setup()}; {run.prompts()}; policies: {run.policies()}")
    lines += ["", "## The rules", "", RULES, ""]
    return "\n".join(lines + bodies) + "\n"
