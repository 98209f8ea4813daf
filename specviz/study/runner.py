"""`python -m specviz study`: each claim of the study (docs/DESIGN.md) checked on model pairs, over
whole prompt suites.

Every prompt of every suite goes through target-only decoding, static 5, heuristic from 5,
dynamic 0.4 and the oracle (`pipeline.compare`), one prompt at a time. Each finished prompt is
appended to `results.jsonl` as one record, so a run that is interrupted resumes with the prompts
not yet done (a record is keyed by preset, suite, prompt id and max new tokens). The report,
STUDY.md, is computed from those records alone by report/ (the package), and can be regenerated
with `--report-only` without loading any model. With `--ray`, Ray workers compute the prompts
side by side and this process records them the same way (cluster.py).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..decoding import drafts
from ..decoding.drafts import DEFAULT_DRAFT, DraftSpec, pair_setup
from ..decoding.modes import ModeSpec, parse_modes
from ..decoding.trace import Comparison
from ..errors import SpecVizError
from ..explain.hindsight import SavedRun
from ..pair import cpu, vocab
from .records import ModeResult, PromptResult, RoundRecord
from .report import (
    PAIR_DRAFT_MARK,
    STUDY_MODES,
    current_runs,
    duration,
    model_preset,
    page_of_record,
    page_order,
    report_markdown,
    runs_in_folder,
    write_csv,
)

STUDY_PRESETS = ("smollm2-135m-int8", "smollm2-135m-bf16")
REPO = Path(__file__).resolve().parents[2]  # the checkout: recorded commands name paths relative to it
PROMPTS_DIR = REPO / "assets" / "prompts"
DEFAULT_SUITES = tuple(str(PROMPTS_DIR / f"{name}.jsonl") for name in ("coding", "summarization", "questions"))


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- records on disk -----------------------------------------------------------------------


def result_from_comparison(preset: str, suite: str, prompt_id: str, index: int, comparison: Any, seconds: float,
                           torch_threads: int) -> PromptResult:
    """The figures of a `trace.Comparison` that the report needs."""
    modes = [ModeResult(t.label, t.policy, t.new_tokens, t.target_passes, t.draft_passes, t.accepted,
                        round(t.wall_s, 6), round(t.draft_s, 6), round(t.verify_s, 6), t.lossless,
                        [RoundRecord(r.lookahead, r.accepted, [round(p, 5) for p in r.draft_probs], r.oracle_ideal)
                         for r in t.rounds],
                        draft_prefill_s=round(t.draft_prefill_s, 6),
                        first_verify_s=round(t.rounds[0].verify_s, 6) if t.rounds else None)
             for t in comparison.traces]
    return PromptResult(preset, suite, prompt_id, index, comparison.max_new_tokens, comparison.prompt_tokens,
                        len(comparison.baseline.token_ids), round(comparison.baseline.wall_s, 6), round(seconds, 3),
                        comparison.partial, torch_threads, datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        modes, target_only_prefill_s=round(comparison.baseline.prefill_s, 6))


def comparison_path(out: Path, preset: str, suite: str, prompt_id: str, max_new_tokens: int) -> Path:
    """Where a prompt's whole comparison is kept beside its record: every round's tokens and the
    draft along the answer, what the what-if replay needs to try other policies on it later."""
    return out / "comparisons" / preset / f"{suite}-{prompt_id}-{max_new_tokens}.json.gz"


def save_comparison(path: Path, comparison: Comparison, eos_ids: Sequence[int]) -> None:
    """The comparison and the pair's end-of-text ids (a replay stops drafting at one), gzipped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")  # a kill mid-write leaves no torn file behind
    with gzip.open(partial, "wt", encoding="utf-8") as f:
        json.dump({"eos_ids": list(eos_ids), "comparison": comparison.to_dict()}, f, ensure_ascii=False)
    partial.replace(path)


def load_comparison(path: Path) -> SavedRun:
    """What `save_comparison` wrote."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        saved = json.load(f)
    return SavedRun(Comparison.from_dict(saved["comparison"]), tuple(saved["eos_ids"]))


def saved_runs(out: Path, records: Iterable[PromptResult]) -> dict[tuple[str, str, str, int], SavedRun]:
    """The saved comparisons of these records, by record key (records from before they were kept
    have none)."""
    runs = {}
    for r in records:
        path = comparison_path(out, r.preset, r.suite, r.prompt_id, r.max_new_tokens)
        if path.is_file():
            runs[r.key] = load_comparison(path)
    return runs


class ResultStore:
    """results.jsonl: one finished prompt per line, appended as it finishes; the last record of a
    key wins. A line cut short by a kill is skipped (and its prompt redone)."""

    def __init__(self, path: Path):
        self.path = path
        self.records: dict[tuple[str, str, str, int], PromptResult] = {}
        self.skipped_lines = 0
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                try:
                    record = PromptResult.from_dict(json.loads(line))
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.skipped_lines += 1
                    continue
                self.records[record.key] = record

    def done(self, key: tuple[str, str, str, int]) -> bool:
        record = self.records.get(key)
        return record is not None and not record.partial

    def append(self, record: PromptResult) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(record.to_json() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.records[record.key] = record

    def drop(self, keys: Iterable[tuple[str, str, str, int]]) -> int:
        """Forget these records (for --force) and rewrite the file without them."""
        gone = [k for k in keys if self.records.pop(k, None) is not None]
        if gone:
            staging = self.path.with_suffix(".jsonl.tmp")
            staging.write_text("".join(r.to_json() + "\n" for r in self.records.values()), encoding="utf-8")
            staging.replace(self.path)
        return len(gone)


def record_prompt(store: ResultStore, preset: str, item: Any, index: int, comparison: Comparison, seconds: float,
                  eos_ids: Sequence[int], torch_threads: int) -> PromptResult:
    """Keep one finished prompt (`item`: a suite's PromptItem): its whole comparison beside
    results.jsonl, then its record, in that order so that every record has its comparison. Only
    the process that owns the folder calls this: the one process of a run, or a Ray run's driver."""
    save_comparison(comparison_path(store.path.parent, preset, item.suite, item.id, comparison.max_new_tokens),
                    comparison, eos_ids)
    record = result_from_comparison(preset, item.suite, item.id, index, comparison, seconds, torch_threads)
    store.append(record)
    return record


# ---- the command -------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Which records a run computes, or a report covers. None = anything (report-only)."""

    presets: tuple[str, ...] | None
    suites: tuple[str, ...] | None  # suite names
    max_new_tokens: int | None
    limit: int | None

    def covers(self, r: PromptResult) -> bool:
        return ((self.presets is None or r.preset in self.presets) and (self.suites is None or r.suite in self.suites)
                and (self.max_new_tokens is None or r.max_new_tokens == self.max_new_tokens)
                and (self.limit is None or r.index < self.limit))


def machine() -> dict[str, Any]:
    """The CPU by name and by what it can do (AMX, AVX512-BF16, AVX2: machines of one name differ)."""
    return {"cpu": cpu.machine().describe(), "cores": os.cpu_count()}


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__}


class Meta:
    """meta.json: every invocation that wrote to this folder (command, machine, threads, time)."""

    def __init__(self, path: Path):
        self.path = path
        self.invocations: list[dict[str, Any]] = []
        if path.is_file():
            try:
                self.invocations = list(json.loads(path.read_text(encoding="utf-8")).get("invocations", []))
            except (json.JSONDecodeError, AttributeError):
                self.invocations = []

    def save(self) -> None:
        staging = self.path.with_suffix(".json.tmp")
        staging.write_text(json.dumps({"invocations": self.invocations}, indent=1), encoding="utf-8")
        staging.replace(self.path)


def start_invocation(meta: Meta, invocation: dict[str, Any], torch_threads: int) -> None:
    """List this run in meta.json before its first prompt, so that an interrupted run is listed too."""
    invocation.update(torch_threads=torch_threads, versions=_versions())
    meta.invocations.append(invocation)
    meta.save()


def _parse_presets(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    from ..pair.presets import get_preset

    names = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
    if not names:
        raise SpecVizError("--preset names no preset.")
    for name in names:
        get_preset(model_preset(name))  # unknown names fail here, before any work
    return names


def study_name(preset: str, draft: DraftSpec, draft_vocab: int | None = None) -> str:
    """The name a pair is studied under with `draft`: the preset's own with its draft model, else
    "PRESET+DRAFT" at the draft's defaults ("smollm2-135m-int8+lookup"), or with its settings by
    their tags ("...+lookup-n3-k16"): a pair of its own in the records and the report. A draft that
    runs the draft model with a smaller output layer (`draft_vocab` tokens, SPECVIZ_DRAFT_VOCAB) says
    so last ("...+model-v32k", "...+hybrid-v32k")."""
    size_tag = vocab.tag(draft_vocab) if draft.kind.counts_passes else ""
    if draft.name == DEFAULT_DRAFT.name and not size_tag:
        return preset
    kind = draft.kind
    tags = "" if draft.params == kind.defaults() else "".join(
        f"-{s.tag}{draft.params[s.key]:g}" for s in kind.settings)
    return f"{preset}{PAIR_DRAFT_MARK}{draft.name}{tags}" + (f"-{size_tag}" if size_tag else "")


# ---- commands as anyone could type them -----------------------------------------------------

PATH_OPTIONS = frozenset({"--out", "--report", "--suites"})  # the options whose values are paths
ELSEWHERE = "ELSEWHERE"  # stands for a folder outside the repository and OUT: a machine's own scratch place


def portable_path(path: Path, root: Path, out: Path | None) -> str:
    """An absolute path as a reader of the report can use it: relative to the repository `root`
    where it is inside it, OUT/... where it is inside the study's folder `out` (the report's own
    folder, wherever it is), else ELSEWHERE/<its name>."""
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    if out is not None and path.is_relative_to(out):
        rest = path.relative_to(out).as_posix()
        return "OUT" if rest == "." else f"OUT/{rest}"
    return f"{ELSEWHERE}/{path.name}"


def _rewrite_args(argv: Sequence[str], rewrite: Callable[[str], str]) -> list[str]:
    """`argv` with `rewrite` applied to the values of PATH_OPTIONS and to any other absolute path."""
    words, in_path = [], False
    for word in argv:
        option, eq, value = word.partition("=")
        if word.startswith("--"):
            in_path = option in PATH_OPTIONS and not eq
            words.append(f"{option}={rewrite(value)}" if eq and option in PATH_OPTIONS else word)
        elif in_path or word.startswith("/"):
            words.append(rewrite(word))
        else:
            words.append(word)
    return words


def _command_line(argv: Sequence[str] | None, out: Path) -> str:
    """The command as typed, its paths relative to the repository (or OUT): a report names no
    machine's own folders, and its commands run in any checkout."""
    cwd, out = Path.cwd(), Path(os.path.abspath(out))

    def rewrite(value: str) -> str:
        return portable_path(Path(os.path.abspath(cwd / value)), REPO, out)

    words = _rewrite_args(argv if argv is not None else sys.argv[1:], rewrite)
    # the one setting that changes what a run computes (not how fast): typed before the command
    size = vocab.asked()
    setting = f"{vocab.VOCAB_ENV}={size} " if size is not None else ""
    return setting + "python -m specviz " + " ".join(shlex.quote(w) for w in words)


def recorded_command(command: str, out: Path) -> str:
    """A command recorded in meta.json, its absolute paths (recorded as typed before commands were
    made portable) rewritten as `_command_line` writes them now. The machine's repository is found
    from the recorded OUT: it held this folder at the same place in the repository as here."""
    words = shlex.split(command)
    out = Path(os.path.abspath(out))
    here = out.relative_to(REPO).parts if out.is_relative_to(REPO) else None
    outs = [w for opt, w in itertools.pairwise(words) if opt == "--out"] + [
        w.partition("=")[2] for w in words if w.startswith("--out=")]
    recorded = next((Path(w) for w in outs if w.startswith("/")), None)
    root = REPO
    if recorded is not None and here and recorded.parts[-len(here):] == here:
        root = Path(*recorded.parts[:-len(here)])
    # a relative path was typed in that machine's repository, as here: kept as typed
    rewritten = _rewrite_args(words, lambda w: portable_path(Path(w), root, recorded or out) if w.startswith("/")
                              else w)
    return " ".join(shlex.quote(w) for w in rewritten)


def _portable_invocations(meta: Meta, out: Path) -> list[dict[str, Any]]:
    return [{**inv, "command": recorded_command(inv["command"], out)} if "command" in inv else inv
            for inv in meta.invocations]


def write_report(out: Path, report: Path, store: ResultStore, selection: Selection, meta: Meta,
                 report_command: str | None = None) -> Path:
    records = [r for r in store.records.values() if selection.covers(r)]
    write_csv(out / "results.csv", records)
    link = os.path.relpath(store.path, report.parent)
    report.parent.mkdir(parents=True, exist_ok=True)
    saved = saved_runs(out, records)
    report.write_text(report_markdown(records, _portable_invocations(meta, out), link, report_command, saved),
                      encoding="utf-8")
    return report


def page_of_record_text(outs: Sequence[Path], report: Path, selection: Selection, report_command: str) -> str:
    """The page of record (docs/STUDY.md) from several result folders, to be written at `report`:
    per preset, the latest complete run's verdicts, the others linked (report.write.page_of_record)."""
    runs = []
    for out in outs:
        records = [r for r in ResultStore(out / "results.jsonl").records.values() if selection.covers(r)]
        own = out / "STUDY.md"
        runs += runs_in_folder(portable_path(Path(os.path.abspath(out)), REPO, None),
                               os.path.relpath(out, report.parent),
                               os.path.relpath(own, report.parent) if own.is_file() and own != report else None,
                               records, _portable_invocations(Meta(out / "meta.json"), out))
    runs.sort(key=page_order)
    current = current_runs(runs)
    folder_of = {os.path.relpath(out, report.parent): out for out in outs}
    saved: dict[tuple[str, str, str, int], SavedRun] = {}
    for run in current.values():  # only the current runs are replayed (section 5)
        saved.update(saved_runs(folder_of[run.folder], run.records))
    return page_of_record(runs, current, saved, report_command)


def write_page_of_record(outs: Sequence[Path], report: Path, selection: Selection, report_command: str) -> Path:
    """`page_of_record_text` written at `report`; nothing else is written (results.csv stay as they are)."""
    text = page_of_record_text(outs, report, selection, report_command)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text, encoding="utf-8")
    return report


def cmd_study(args: argparse.Namespace, say: Callable[[str], None] = _stderr) -> int:
    outs = [Path(o) for o in ([args.out] if isinstance(args.out, str) else args.out)]
    out = outs[0]
    report = Path(args.report) if args.report else out / "STUDY.md"
    _check_arguments(args, outs)
    from .cluster import ray_options  # Ray itself is imported only for --ray

    on_ray = None if args.report_only else ray_options(args)  # a missing Ray is one line now, before any work
    modes = parse_modes(args.modes or STUDY_MODES)  # a mistake is refused now, not after the models load
    suite_items = _read_suites(args.suites or ([] if args.report_only else DEFAULT_SUITES), args.limit)
    suite_names = tuple(dict.fromkeys(items[0].suite for items in suite_items if items)) or None
    if args.report_only:
        return _report_only(args, outs, report, suite_names, say)

    draft = drafts.from_arguments(args)
    if draft != DEFAULT_DRAFT and on_ray is not None:
        raise SpecVizError(f"--draft {draft.name} runs in this process only: leave out --ray.")
    draft_vocab = vocab.asked()  # the pairs load in this process with it: their names say so
    if draft_vocab is not None and on_ray is not None:
        raise SpecVizError(f"{vocab.VOCAB_ENV} applies in this process only: leave out --ray.")
    presets = tuple(study_name(p, draft, draft_vocab) for p in (_parse_presets(args.preset) or STUDY_PRESETS))
    max_new_tokens = args.max_new_tokens or 128
    out.mkdir(parents=True, exist_ok=True)
    store = ResultStore(out / "results.jsonl")
    if store.skipped_lines:
        say(f"{store.skipped_lines} unreadable line(s) in results.jsonl skipped; those prompts are redone")
    selection = Selection(presets, suite_names, max_new_tokens, args.limit)
    jobs = [(preset, item, index) for preset in presets for items in suite_items
            for index, item in enumerate(items)]
    if args.force:
        dropped = store.drop((p, i.suite, i.id, max_new_tokens) for p, i, _ in jobs)
        say(f"--force: {dropped} earlier record(s) of this selection discarded")
    todo = [job for job in jobs if not store.done((job[0], job[1].suite, job[1].id, max_new_tokens))]
    say(f"{len(jobs) - len(todo)} of {len(jobs)} prompts already done in {store.path}; {len(todo)} to run")

    meta = Meta(out / "meta.json")
    started = time.perf_counter()
    invocation: dict[str, Any] = {"command": _command_line(getattr(args, "argv", None), out),
                                  "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  "finished": None, "wall_s": 0.0, "prompts_run": 0,
                                  "prompts_skipped": len(jobs) - len(todo), **machine()}
    left: list[Any] = []  # prompts a run on Ray gave up on, for the next run
    if todo and on_ray is not None:
        left = _run_on_ray(todo, modes, max_new_tokens, on_ray, store, meta, invocation, started, say)
    elif todo:
        _run(todo, modes, max_new_tokens, args.threads, store, meta, invocation, started, say, draft)
    invocation["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    invocation["wall_s"] = round(time.perf_counter() - started, 1)
    if todo:
        meta.save()
    path = write_report(out, report, store, selection, meta)
    say(f"wrote {path}, {out / 'results.csv'} and {store.path}")
    return 1 if left else 0


def _check_arguments(args: argparse.Namespace, outs: list[Path]) -> None:
    if len(outs) > 1 and not (args.report_only and args.report):
        raise SpecVizError("Several --out folders make the page of record: give --report-only and --report "
                           "(e.g. --report docs/STUDY.md).")
    if args.limit is not None and args.limit < 1:
        raise SpecVizError("--limit must be at least 1.")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise SpecVizError("--max-new-tokens must be at least 1.")


def _read_suites(paths: list[str], limit: int | None) -> list[list[Any]]:
    if not paths:
        return []
    from .bench import read_suite  # imports torch: only when suites are read

    return [read_suite(path, limit) for path in paths]


def _report_only(args: argparse.Namespace, outs: list[Path], report: Path, suite_names: tuple[str, ...] | None,
                 say: Callable[[str], None]) -> int:
    """The report from kept records, no model run: one folder's page, or the page of record."""
    out = outs[0]
    for folder in outs:
        if not (folder / "results.jsonl").is_file():
            raise SpecVizError(f"No results in {folder}: run `python -m specviz study --out {folder}` first.")
    selection = Selection(_parse_presets(args.preset), suite_names, args.max_new_tokens, args.limit)
    command = _command_line(getattr(args, "argv", None), out)
    if len(outs) > 1:
        path = write_page_of_record(outs, report, selection, command)
        say(f"wrote {path}")
        return 0
    store = ResultStore(out / "results.jsonl")
    path = write_report(out, report, store, selection, Meta(out / "meta.json"), command)
    say(f"wrote {path} and {out / 'results.csv'}")
    return 0


def _run(todo: list[tuple[str, Any, int]], modes: list[ModeSpec], max_new_tokens: int, threads: int | None,
         store: ResultStore, meta: Meta, invocation: dict[str, Any], started: float, say: Callable[[str], None],
         draft: DraftSpec = DEFAULT_DRAFT) -> None:
    """Compute the prompts not done yet, one at a time, saving each as it finishes."""
    import torch

    from ..decoding.pipeline import compare_preset, make_request
    from ..pair.models import get_pair, release_pair
    from .bench import _bench_limits, set_threads

    set_threads(threads)
    start_invocation(meta, invocation, torch.get_num_threads())
    limits = _bench_limits()
    spent: list[float] = []
    for name in dict.fromkeys(job[0] for job in todo):
        # One pair at a time, let go before the next: two pairs at once would double the memory.
        # What runs (precision, kernels) is chosen per machine at load: the records' figures need it.
        preset = model_preset(name)
        pair = get_pair(preset, progress=say)
        invocation.setdefault("setups", {})[name], eos_ids = pair_setup(pair.setup, draft), list(pair.eos_token_ids)
        del pair  # held here, release_pair below could not let it go
        meta.save()
        for preset_, item, index in [job for job in todo if job[0] == name]:
            t0 = time.perf_counter()
            # Through the door of model work (a GPU slot on a ZeroGPU Space), by the preset's name.
            request = make_request(item.prompt, modes, max_new_tokens, limits=limits, draft=draft)
            comparison = compare_preset(preset, request, limits)
            seconds = time.perf_counter() - t0
            record_prompt(store, preset_, item, index, comparison, seconds, eos_ids, torch.get_num_threads())
            spent.append(seconds)
            invocation["prompts_run"] = len(spent)
            invocation["wall_s"] = round(time.perf_counter() - started, 1)
            meta.save()
            left = len(todo) - len(spent)
            flag = " (partial: time budget ran out; redone next run)" if comparison.partial else ""
            say(f"[{len(spent)}/{len(todo)}] {name} {item.suite} {item.id}: {seconds:.1f} s{flag}; "
                f"mean {statistics.fmean(spent):.1f} s/prompt, about {duration(statistics.fmean(spent) * left)} left")
        release_pair(preset)


def _run_on_ray(todo: list[tuple[str, Any, int]], modes: list[ModeSpec], max_new_tokens: int, options: Any,
                store: ResultStore, meta: Meta, invocation: dict[str, Any], started: float,
                say: Callable[[str], None]) -> list[Any]:
    """`_run` on Ray workers (cluster.py), which compute the prompts side by side; this process
    records each one as it comes back, as `_run` does. Returns the prompts given up on."""
    from .bench import _bench_limits
    from .cluster import ray_cluster

    with ray_cluster(options, say) as cluster:
        invocation["ray"] = cluster.summary
        start_invocation(meta, invocation, options.threads)
        computing = time.perf_counter()
        # closing(): on Ctrl-C while a prompt is recorded, the workers stop all the same
        with contextlib.closing(cluster.compute(todo, modes, max_new_tokens, _bench_limits())) as finished:
            for number, done in enumerate(finished, start=1):
                job = done.job
                record_prompt(store, job.preset, job.item, job.index, done.comparison, done.seconds, done.eos_ids,
                              done.torch_threads)
                invocation.setdefault("setups", {})[job.preset] = done.setup
                invocation["prompts_run"] = number
                invocation["wall_s"] = round(time.perf_counter() - started, 1)
                meta.save()
                pace = (time.perf_counter() - computing) / number  # wall time a prompt, the workers side by side
                flag = " (partial: time budget ran out; redone next run)" if done.comparison.partial else ""
                say(f"[{number}/{len(todo)}] {job}: {done.seconds:.1f} s{flag}; "
                    f"about {duration(pace * (len(todo) - number))} left")
        return cluster.left


def register_commands(commands: argparse._SubParsersAction) -> None:
    """Add `study` to the CLI (called by cli.build_parser)."""
    s = commands.add_parser("study", help="check each claim of the study on whole prompt suites; write STUDY.md")
    s.add_argument("--preset", default=None,
                   help=f"comma-separated model pairs (default {','.join(STUDY_PRESETS)})")
    s.add_argument("--suites", nargs="+", default=None, metavar="SUITE",
                   help="JSON Lines prompt suites (default: coding, summarization and questions in assets/prompts)")
    s.add_argument("--max-new-tokens", type=int, default=None, help="at most this many new tokens (default 128)")
    s.add_argument("--out", nargs="+", default=["study-out"], metavar="OUT",
                   help="folder for results.jsonl, results.csv, meta.json (default study-out); with --report-only "
                        "and --report, several folders make the page of record: per pair, the latest complete "
                        "run's verdicts, the others linked")
    s.add_argument("--report", default=None, help="where to write the report (default OUT/STUDY.md)")
    s.add_argument("--limit", type=int, default=None, help="first N prompts of each suite (for tests)")
    drafts.add_arguments(s)
    s.add_argument("--modes", default=None,
                   help=f"the policies run on every prompt, as in compare (default {STUDY_MODES}); a prompt "
                        "already in results.jsonl is not redone for another mode list (--force does)")
    s.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's choice; on Ray, see --ray-threads)")
    s.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="compute the prompts on Ray workers, each holding the pair once: started on this machine "
                        "(no ADDRESS), or on the running cluster at ADDRESS (e.g. auto, or HEAD:6379); needs "
                        "requirements-study.txt")
    s.add_argument("--ray-threads", type=int, default=None,
                   help="torch threads of each Ray worker, and the CPUs it asks Ray for (default 1)")
    s.add_argument("--ray-actors", type=int, default=None,
                   help="Ray workers per preset (default and most: as many as the nodes' CPUs hold, or one per GPU)")
    s.add_argument("--force", action="store_true", help="recompute prompts already in results.jsonl")
    s.add_argument("--report-only", action="store_true",
                   help="rewrite the report and results.csv from results.jsonl, without models; options given "
                        "narrow what it covers")
    s.set_defaults(run=cmd_study)
