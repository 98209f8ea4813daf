"""Choosing the run of record: the kept result folders (study/folders.py names them) read as
runs, one per pair and folder (`Run`), and per pair the latest complete one (`current_runs`), in
the page's order (`page_order`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...pair.presets import PRESETS
from ..records import PromptResult
from .text import _n
from .verdicts import PAIR_DRAFT_MARK, model_preset


@dataclass
class Run:
    """One preset's records in one result folder: a run of the study, as the page of record sees it."""

    name: str  # the folder as the repository names it (results/study/<pair>-<draft>-<cpu>-<date>)
    folder: str  # the folder, relative to the page
    report: str | None  # the folder's own report, relative to the page, where it has one
    preset: str
    records: list[PromptResult]  # finished ones
    partial: int  # records cut short by the time budget
    invocations: list[dict[str, Any]]  # those of meta.json that wrote these records

    @property
    def newest(self) -> str:
        return max((r.finished for r in self.records), default="")

    @property
    def suites(self) -> list[str]:
        return list(dict.fromkeys(r.suite for r in self.records))

    @property
    def link(self) -> str:
        return f"[{self.name}]({self.report or self.folder + '/results.jsonl'})"

    def dates(self) -> str:
        first, last = min(r.finished for r in self.records)[:10], self.newest[:10]
        return first if first == last else f"{first} to {last}"

    def machine(self) -> str:
        seen = dict.fromkeys(f"{inv.get('cpu', '?')}, {inv.get('cores', '?')} cores, "
                             f"{inv.get('torch_threads', '?')} torch threads" for inv in self.invocations)
        return "; ".join(seen) or "not recorded"

    def setup(self) -> str:
        seen = dict.fromkeys((inv.get("setups") or {}).get(self.preset) for inv in self.invocations)
        return "; ".join(s or "not recorded" for s in seen) or "not recorded"

    def prompts(self) -> str:
        budgets = ", ".join(sorted({str(r.max_new_tokens) for r in self.records}))
        per_suite = ", ".join(f"{s} {sum(r.suite == s for r in self.records)}" for s in self.suites)
        return f"{len(self.records)} ({per_suite}), at most {budgets} new tokens"

    def policies(self) -> str:
        return ", ".join(dict.fromkeys(m.label for r in self.records for m in r.modes))


def _moment(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def invocations_of(records: Sequence[PromptResult], invocations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The invocations that wrote any of these records, by time: a record finished between an
    invocation's start and its end (an interrupted one's: the next one's start). Matched by time
    because the commands of older runs do not name every preset they ran (the default pairs)."""
    ordered = sorted(invocations, key=lambda inv: _moment(inv["started"]))
    windows = []
    for i, inv in enumerate(ordered):
        end = inv.get("finished") or (ordered[i + 1]["started"] if i + 1 < len(ordered) else None)
        windows.append((inv, _moment(inv["started"]), _moment(end) if end else None))
    return [inv for inv, start, end in windows
            if any(start <= _moment(r.finished) and (end is None or _moment(r.finished) <= end) for r in records)]


def runs_in_folder(name: str, folder: str, report: str | None, records: Sequence[PromptResult],
                   invocations: Sequence[dict[str, Any]]) -> list[Run]:
    """A folder's records as one run per preset (`Run` says what the arguments are)."""
    runs = []
    for preset in dict.fromkeys(r.preset for r in records):
        mine = [r for r in records if r.preset == preset]
        done = [r for r in mine if not r.partial]
        if done:
            runs.append(Run(name, folder, report, preset, done, len(mine) - len(done),
                            invocations_of(mine, invocations)))
    return runs


def why_not_current(run: Run, runs: Sequence[Run]) -> str | None:
    """Why a run cannot be the current one for its preset (None: it can): a complete run has no
    record cut short and every suite its preset was run on in any folder."""
    suites = dict.fromkeys(s for other in runs if other.preset == run.preset for s in other.suites)
    missing = [s for s in suites if s not in run.suites]
    if missing:
        return f"incomplete: no {', '.join(missing)}"
    if run.partial:
        return f"incomplete: {_n(run.partial, 'partial record')}"
    return None


def page_order(run: Run) -> tuple[bool, int, str, str]:
    """Where a run stands on the page of record: pairs with their draft model first, then those with
    another draft (lookup, hybrid, ...), each in the order of the presets (pair/presets.py; a pair not listed there after
    those that are, by name), the runs of one pair by folder. So the page is the same whatever the
    order its folders were given in."""
    listed = list(PRESETS)
    base = model_preset(run.preset)
    return PAIR_DRAFT_MARK in run.preset, listed.index(base) if base in listed else len(listed), run.preset, run.name


def current_runs(runs: Sequence[Run]) -> dict[str, Run]:
    """Per preset, the latest complete run: the newest last record among the complete runs, the
    one with more policies where two end at the same moment. A preset without a complete run
    gets its run over the most suites, the newest of those (the page says it is incomplete): a
    small run made for another question must not displace a broader one by its date alone."""
    current = {}
    for preset in dict.fromkeys(r.preset for r in runs):
        mine = [r for r in runs if r.preset == preset]
        complete = [r for r in mine if why_not_current(r, runs) is None]
        breadth = (lambda r: 0) if complete else (lambda r: len(r.suites))
        current[preset] = max(complete or mine, key=lambda r: (breadth(r), r.newest, len(r.policies().split(", "))))
    return current


def model_draft_run(lookup: Run, runs: Sequence[Run]) -> Run | None:
    """The model draft's run to set a lookup run beside: its pair's latest complete run on the
    lookup run's machine, or None."""
    preset = model_preset(lookup.preset)
    same_machine = [r for r in runs if r.preset == preset and r.machine() == lookup.machine()]
    return current_runs(same_machine)[preset] if same_machine else None
