"""Benchmarks: `python -m specviz bench` (prompt suites through the full comparison) and
`python -m specviz bench-hf` (the engine's overhead against transformers' assisted generation).

Both only drive the pipeline and write files; no model math lives here. Figures are summarised
the way the study (docs/DESIGN.md) reports them: speedup over target-only decoding, target and draft
forward passes, acceptance, and the oracle as the yardstick for every policy.

Timings on a shared CPU are noisy, so every ratio is measured within one run, and bench-hf
interleaves the two implementations pass by pass (A B A B ...) so that load changes hit both.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..decoding.drafters import TransformersDrafter
from ..decoding.engine import generate, target_only
from ..decoding.modes import DEFAULT_MODES, MAX_MODES, ModeSpec, make_policy, parse_modes
from ..decoding.pipeline import Limits, compare, make_request
from ..decoding.trace import Comparison
from ..errors import SpecVizError
from ..pair.models import ModelPair, encode_prompt, get_pair
from ..pair.presets import DEFAULT_PRESET, get_preset

HF_MODES = "static:5,heuristic:5,dynamic:0.4"  # the policies transformers has a counterpart for
SPEEDUP_POLICIES = ("static", "heuristic", "dynamic")  # the study reports speedups for these
PASS_POLICIES = ("static", "oracle")  # ... and the oracle-vs-static pass counts


# ---- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptItem:
    id: str
    suite: str
    prompt: str


def read_suite(path: str | Path, limit: int | None = None) -> list[PromptItem]:
    """The first `limit` prompts of a JSON Lines suite file (id, suite, prompt per line)."""
    path = Path(path)
    if not path.is_file():
        raise SpecVizError(f"Suite file not found: {path}")
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            items.append(PromptItem(str(data["id"]), str(data.get("suite") or path.stem), str(data["prompt"])))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise SpecVizError(f"{path}:{number}: expected a JSON object with id and prompt") from None
    return items[:limit] if limit else items


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def set_threads(threads: int | None) -> None:
    """Pin torch's intra-op threads. On a shared, oversubscribed CPU, OpenMP workers spin-wait
    for each other; one thread per process was about 6x faster than two in our measurements."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- bench: per-prompt records -----------------------------------------------------------


@dataclass
class ModeRow:
    """One mode's figures on one prompt: a row of results.csv."""

    prompt_id: str
    suite: str
    mode: str
    policy: str
    new_tokens: int
    target_passes: int
    draft_passes: int
    accepted: int
    acceptance_rate: float
    mean_accepted_length: float
    wall_s: float
    speedup: float
    lossless: bool | None
    drafted: int = 0  # tokens the draft proposed (draft passes also count its catch-up calls)


@dataclass
class PromptRun:
    """One prompt's comparison, kept whole for the plots (per-round lookahead, oracle ideal)."""

    item: PromptItem
    comparison: Comparison
    seconds: float  # the whole comparison, baseline and oracle included

    def rows(self) -> list[ModeRow]:
        c = self.comparison
        baseline = ModeRow(self.item.id, self.item.suite, "target-only", "target-only", len(c.baseline.token_ids),
                           c.baseline.target_passes, 0, 0, 0.0, 1.0, c.baseline.wall_s, 1.0, True)
        return [baseline] + [
            ModeRow(self.item.id, self.item.suite, t.label, t.policy, t.new_tokens, t.target_passes, t.draft_passes,
                    t.accepted, t.acceptance_rate, t.mean_accepted_length, t.wall_s, c.speedup(t), t.lossless,
                    drafted=t.drafted)
            for t in c.traces
        ]


def run_suites(pair: ModelPair, items: list[PromptItem], modes: list[ModeSpec], max_new_tokens: int,
               limits: Limits, say: Callable[[str], None] = _stderr,
               after_each: Callable[[list[PromptRun]], None] | None = None) -> list[PromptRun]:
    """Every prompt through the full comparison; `after_each` sees the runs so far (to save them)."""
    runs = []
    for number, item in enumerate(items, start=1):
        request = make_request(item.prompt, modes, max_new_tokens, limits=limits)
        started = time.perf_counter()
        comparison = compare(pair, request, limits)
        seconds = time.perf_counter() - started
        flag = " (partial: time budget ran out)" if comparison.partial else ""
        say(f"[{number}/{len(items)}] {item.suite} {item.id} … {seconds:.1f} s{flag}")
        runs.append(PromptRun(item, comparison, seconds))
        if after_each is not None:
            after_each(runs)
    return runs


# ---- bench: summary ----------------------------------------------------------------------


@dataclass
class ModeSummary:
    """One mode over one suite. Rates are pooled (totals over totals), speedups per prompt."""

    mode: str
    policy: str
    prompts: int
    speedup_median: float
    speedup_mean: float
    target_passes_total: int
    target_passes_mean: float
    draft_passes_total: int
    draft_passes_mean: float
    acceptance_rate: float
    mean_accepted_length: float
    lossless: str  # "n/N"


@dataclass
class SuiteSummary:
    suite: str
    prompts: int
    new_tokens_mean: float
    target_only_wall_s_mean: float
    comparison_s_median: float
    modes: list[ModeSummary] = field(default_factory=list)
    dynamic_over_oracle_target_passes: float | None = None  # 1.15 = dynamic needs 15% more passes


def summarize_mode(rows: list[ModeRow]) -> ModeSummary:
    speedups = [r.speedup for r in rows]
    target = sum(r.target_passes for r in rows)
    draft_calls = sum(r.draft_passes for r in rows)
    drafted = sum(r.drafted for r in rows)
    accepted = sum(r.accepted for r in rows)
    return ModeSummary(
        mode=rows[0].mode, policy=rows[0].policy, prompts=len(rows),
        speedup_median=statistics.median(speedups), speedup_mean=statistics.fmean(speedups),
        target_passes_total=target, target_passes_mean=target / len(rows),
        draft_passes_total=draft_calls, draft_passes_mean=draft_calls / len(rows),
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_accepted_length=1.0 + accepted / target if target else 0.0,
        lossless=f"{sum(r.lossless is True for r in rows)}/{len(rows)}",
    )


def summarize_suite(suite: str, runs: list[PromptRun]) -> SuiteSummary:
    rows = [row for run in runs for row in run.rows() if row.mode != "target-only"]
    by_mode: dict[str, list[ModeRow]] = {}
    for row in rows:
        by_mode.setdefault(row.mode, []).append(row)
    modes = [summarize_mode(group) for group in by_mode.values()]
    summary = SuiteSummary(
        suite=suite, prompts=len(runs),
        new_tokens_mean=statistics.fmean(len(r.comparison.baseline.token_ids) for r in runs),
        target_only_wall_s_mean=statistics.fmean(r.comparison.baseline.wall_s for r in runs),
        comparison_s_median=statistics.median(r.seconds for r in runs), modes=modes,
    )
    dynamic = next((m for m in modes if m.policy == "dynamic"), None)
    oracle = next((m for m in modes if m.policy == "oracle"), None)
    if dynamic and oracle and oracle.target_passes_total:
        summary.dynamic_over_oracle_target_passes = dynamic.target_passes_total / oracle.target_passes_total
    return summary


def summarize(runs: list[PromptRun]) -> list[SuiteSummary]:
    """One summary per suite (in the order suites were given), then one over all prompts."""
    suites: dict[str, list[PromptRun]] = {}
    for run in runs:
        suites.setdefault(run.item.suite, []).append(run)
    summaries = [summarize_suite(name, group) for name, group in suites.items()]
    if len(suites) > 1:
        summaries.append(summarize_suite("all", runs))
    return summaries


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0], "torch_threads": str(torch.get_num_threads())}


def summary_markdown(summaries: list[SuiteSummary], meta: dict[str, Any]) -> str:
    lines = [f"# Benchmark: preset {meta['preset']}", "",
             (f"{meta['max_new_tokens']} new tokens at most, greedy, first {meta['limit'] or 'all'} prompts per suite; "
             f"modes {meta['modes']}; peak RSS {meta['peak_rss_mb']:.0f} MB; "
             f"torch {meta['versions']['torch']}, transformers {meta['versions']['transformers']}."), ""]
    for s in summaries:
        lines += [f"## {s.suite} ({s.prompts} prompts)", "",
                  (f"Target-only: {s.new_tokens_mean:.1f} new tokens and {s.target_only_wall_s_mean:.2f} s per prompt "
                  f"(mean); one full comparison took {s.comparison_s_median:.1f} s (median)."), "",
                  ("| mode | speedup median | speedup mean | target passes (total / mean) "
                  "| draft passes (total / mean) | acceptance | mean accepted length | lossless |"),
                  "|---|---|---|---|---|---|---|---|"]
        for m in s.modes:
            lines.append(f"| {m.mode} | {m.speedup_median:.2f}x | {m.speedup_mean:.2f}x "
                         f"| {m.target_passes_total} / {m.target_passes_mean:.1f} "
                         f"| {m.draft_passes_total} / {m.draft_passes_mean:.1f} "
                         f"| {m.acceptance_rate:.2f} | {m.mean_accepted_length:.2f} | {m.lossless} |")
        if s.dynamic_over_oracle_target_passes is not None:
            lines += ["", (f"Dynamic's target passes relative to the oracle's: "
                          f"{s.dynamic_over_oracle_target_passes:.2f} "
                          f"({(s.dynamic_over_oracle_target_passes - 1) * 100:+.0f}%).")]
        lines.append("")
    return "\n".join(lines)


def write_rows(path: Path, rows: Iterable[ModeRow]) -> None:
    rows = list(rows)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(list(asdict(rows[0])))
        for row in rows:
            writer.writerow([f"{v:.4f}" if isinstance(v, float) else v for v in asdict(row).values()])


# ---- bench: plots ------------------------------------------------------------------------


def oracle_lookaheads(runs: list[PromptRun]) -> list[int]:
    """The oracle policy's lookahead in every round of every prompt."""
    return [r.lookahead for run in runs for t in run.comparison.traces if t.policy == "oracle" for r in t.rounds]


def write_plots(runs: list[PromptRun], out: Path, example: PromptRun | None = None) -> list[Path]:
    """Histogram of the oracle's per-round lookahead, and per-round lookahead of one prompt.

    PNGs come from matplotlib (no headless browser needed, unlike plotly's image export);
    the same figures are written as interactive plotly HTML.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt
    import plotly.graph_objects as go

    from ..colors import policy_color

    written = []
    values = oracle_lookaheads(runs)
    if values:
        top = max(values)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.hist(values, bins=range(top + 2), align="left", color=policy_color("oracle"), edgecolor="white")
        ax.set(title=f"Oracle's lookahead per round ({len(values)} rounds, {len(runs)} prompts)",
               xlabel="oracle's lookahead (tokens drafted in the round)", ylabel="rounds")
        fig.tight_layout()
        fig.savefig(out / "oracle_lookahead_hist.png", dpi=110)
        plt.close(fig)
        hist = go.Figure(go.Histogram(x=values, xbins={"start": -0.5, "end": top + 0.5, "size": 1},
                                      marker_color=policy_color("oracle")))
        hist.update_layout(title="Oracle's lookahead per round", xaxis_title="ideal lookahead", yaxis_title="rounds",
                           template="plotly_white")
        hist.write_html(out / "oracle_lookahead_hist.html", include_plotlyjs="cdn")
        written += [out / "oracle_lookahead_hist.png", out / "oracle_lookahead_hist.html"]

    example = example or (runs[0] if runs else None)
    if example is not None and example.comparison.traces:
        traces = example.comparison.traces
        fig, ax = plt.subplots(figsize=(9, 4))
        lines = go.Figure()
        for t in traces:
            xs = [r.index for r in t.rounds]
            ys = [r.lookahead for r in t.rounds]
            ax.step(xs, ys, where="mid", label=t.label, color=policy_color(t.policy),
                    linewidth=2.4 if t.policy == "oracle" else 1.4)
            lines.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=t.label, line_shape="hvh",
                                       line_color=policy_color(t.policy)))
        title = f"Lookahead per round, {example.item.suite} {example.item.id}"
        ax.set(title=title, xlabel="round (= target forward pass)", ylabel="tokens drafted")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "lookahead_per_round.png", dpi=110)
        plt.close(fig)
        lines.update_layout(title=title, xaxis_title="round", yaxis_title="tokens drafted", template="plotly_white")
        lines.write_html(out / "lookahead_per_round.html", include_plotlyjs="cdn")
        written += [out / "lookahead_per_round.png", out / "lookahead_per_round.html"]
    return written


# ---- bench: command ----------------------------------------------------------------------


def _bench_limits() -> Limits:
    # A loaded shared machine can be several times slower than the UI's budget assumes; a
    # benchmark cut short by the per-request budget would report partial runs, so widen it.
    base = Limits.from_env()
    return Limits(base.max_new_tokens, base.max_prompt_tokens, max(base.time_budget_s, 3600.0))


def cmd_bench(args: argparse.Namespace) -> int:
    items = [item for path in args.suite for item in read_suite(path, args.limit)]
    if not items:
        raise SpecVizError("The suites hold no prompts.")
    modes = parse_modes(args.modes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    get_preset(args.preset)
    set_threads(args.threads)
    pair = get_pair(args.preset, progress=_stderr)
    meta = {"preset": args.preset, "max_new_tokens": args.max_new_tokens, "limit": args.limit,
            "modes": args.modes, "suites": list(args.suite), "versions": _versions()}
    # Results are rewritten after every prompt, so a run stopped early still leaves its figures.
    runs = run_suites(pair, items, modes, args.max_new_tokens, _bench_limits(),
                      after_each=lambda done: write_bench(done, meta, out))
    for path in write_plots(runs, out):
        _stderr(f"wrote {path}")
    print((out / "summary.md").read_text(encoding="utf-8"))
    return 0


def write_bench(runs: list[PromptRun], meta: dict[str, Any], out: Path) -> None:
    """results.csv, summary.json and summary.md for the runs so far, and the newest comparison
    whole (comparisons/<id>.json, loadable with Comparison.from_json for re-plotting)."""
    (out / "comparisons").mkdir(exist_ok=True)
    latest = runs[-1]
    (out / "comparisons" / f"{latest.item.id}.json").write_text(latest.comparison.to_json(), encoding="utf-8")
    write_rows(out / "results.csv", [row for run in runs for row in run.rows()])
    summaries = summarize(runs)
    meta = {**meta, "prompts_done": len(runs), "peak_rss_mb": peak_rss_mb(), "total_s": sum(r.seconds for r in runs)}
    (out / "summary.json").write_text(json.dumps({**meta, "summaries": [asdict(s) for s in summaries]}, indent=1),
                                      encoding="utf-8")
    (out / "summary.md").write_text(summary_markdown(summaries, meta), encoding="utf-8")


# ---- bench-hf: SpecViz's engine against transformers -------------------------------------


@dataclass
class Pairing:
    """One mode on one prompt: interleaved runs of SpecViz and transformers."""

    prompt_id: str
    mode: str
    specviz_s: list[float]
    hf_s: list[float]
    specviz_target: int
    specviz_draft: int
    hf_target: int
    hf_draft: int
    tokens_match: bool
    first_difference: int | None

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.specviz_s, self.hf_s) if b > 0]

    @property
    def ratio_median(self) -> float:
        return statistics.median(self.ratios)


def _first_difference(a: list[int], b: list[int]) -> int | None:
    from ..decoding.trace import first_difference

    return first_difference(a, b)


def pair_mode(pair: ModelPair, prompt_ids: list[int], spec: ModeSpec | None, max_new_tokens: int,
              repeats: int) -> tuple[list[float], list[float], tuple[int, int, list[int]], tuple[int, int, list[int]]]:
    """Warm up once each, then alternate SpecViz and transformers `repeats` times.

    `spec=None` means target-only decoding. Returns both timing lists and, from the last run of
    each side, (target passes, draft passes, tokens). SpecViz feeds its draft as transformers
    does here (`TransformersDrafter`), so that both sides do the same work and the ratio measures
    the engine alone; scripts/bench_feeding.py measures what SpecViz's exact feeding costs.
    """
    from .hf_reference import hf_assisted, hf_greedy

    def ours() -> tuple[float, tuple[int, int, list[int]]]:
        if spec is None:
            b = target_only(pair, prompt_ids, max_new_tokens)
            return b.wall_s, (b.target_passes, 0, b.token_ids)
        t = generate(pair, prompt_ids, make_policy(spec), max_new_tokens, make_drafter=TransformersDrafter.for_pair)
        return t.wall_s, (t.target_passes, t.draft_passes, t.token_ids)

    def theirs() -> tuple[float, tuple[int, int, list[int]]]:
        run = hf_greedy(pair, prompt_ids, max_new_tokens) if spec is None else \
            hf_assisted(pair, prompt_ids, spec, max_new_tokens)
        return run.wall_s, (run.target_calls, run.draft_calls, run.token_ids)

    ours(), theirs()  # warm-up: first calls pay for allocator growth and lazy init
    ours_s, theirs_s = [], []
    for _ in range(repeats):
        a, ours_counts = ours()
        b, theirs_counts = theirs()
        ours_s.append(a)
        theirs_s.append(b)
    return ours_s, theirs_s, ours_counts, theirs_counts


def hf_markdown(pairings: list[Pairing], meta: dict[str, Any]) -> str:
    lines = [f"# SpecViz engine vs transformers assisted generation: preset {meta['preset']}", "",
             (f"{meta['max_new_tokens']} new tokens, greedy, {meta['repeats']} interleaved pairs per mode after one "
             f"warm-up each; prompts {', '.join(meta['prompts'])}. Ratio = SpecViz wall time / transformers wall "
             f"time, median over pairs (below 1 = SpecViz faster)."), "",
             ("| mode | ratio median (all prompts) | per prompt | SpecViz target / draft passes "
             "| transformers target / draft calls | tokens match |"), "|---|---|---|---|---|---|"]
    by_mode: dict[str, list[Pairing]] = {}
    for p in pairings:
        by_mode.setdefault(p.mode, []).append(p)
    for mode, group in by_mode.items():
        all_ratios = [r for p in group for r in p.ratios]
        lines.append(f"| {mode} | {statistics.median(all_ratios):.2f} "
                     f"| {', '.join(f'{p.prompt_id} {p.ratio_median:.2f}' for p in group)} "
                     f"| {', '.join(f'{p.specviz_target}/{p.specviz_draft}' for p in group)} "
                     f"| {', '.join(f'{p.hf_target}/{p.hf_draft}' for p in group)} "
                     f"| {', '.join('yes' if p.tokens_match else f'no (at {p.first_difference})' for p in group)} |")
    lines += ["", (f"Peak RSS after one full comparison ({meta['comparison_s']:.1f} s, modes {DEFAULT_MODES}): "
                  f"{meta['comparison_peak_rss_mb']:.0f} MB; at the end: {meta['peak_rss_mb']:.0f} MB."), ""]
    return "\n".join(lines)


def cmd_bench_hf(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        raise SpecVizError("--repeats must be at least 1.")
    items = [item for path in args.suite for item in read_suite(path, args.limit)]
    if not items:
        raise SpecVizError("The suites hold no prompts.")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    get_preset(args.preset)
    set_threads(args.threads)
    pair = get_pair(args.preset, progress=_stderr)

    # Memory first, so that the figure is one comparison's peak and not the timing loop's.
    started = time.perf_counter()
    compare(pair, make_request(items[0].prompt, DEFAULT_MODES, args.max_new_tokens), _bench_limits())
    comparison_s = time.perf_counter() - started
    comparison_rss = peak_rss_mb()
    _stderr(f"one full comparison: {comparison_s:.1f} s, peak RSS {comparison_rss:.0f} MB")

    specs: list[tuple[str, ModeSpec | None]] = [("target-only", None)]
    specs += [(make_policy(s).label, s) for s in parse_modes(HF_MODES)]
    meta = {"preset": args.preset, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
            "comparison_s": comparison_s, "comparison_peak_rss_mb": comparison_rss, "versions": _versions()}
    pairings: list[Pairing] = []
    for item in items:
        prompt_ids = encode_prompt(pair, item.prompt)
        for label, spec in specs:
            t0 = time.perf_counter()
            ours_s, theirs_s, ours_counts, theirs_counts = pair_mode(pair, prompt_ids, spec, args.max_new_tokens,
                                                                     args.repeats)
            pairing = Pairing(item.id, label, ours_s, theirs_s, ours_counts[0], ours_counts[1], theirs_counts[0],
                              theirs_counts[1], ours_counts[2] == theirs_counts[2],
                              _first_difference(ours_counts[2], theirs_counts[2]))
            pairings.append(pairing)
            _stderr(f"{item.id} {label}: ratio {pairing.ratio_median:.2f} "
                    f"({', '.join(f'{r:.2f}' for r in pairing.ratios)}); passes SpecViz "
                    f"{pairing.specviz_target}/{pairing.specviz_draft}, transformers {pairing.hf_target}/"
                    f"{pairing.hf_draft}; tokens match: {pairing.tokens_match} ({time.perf_counter() - t0:.0f} s)")
            write_hf(pairings, meta, out)  # after every mode, so a run stopped early leaves its figures
    print((out / "hf_compare.md").read_text(encoding="utf-8"))
    return 0


def write_hf(pairings: list[Pairing], meta: dict[str, Any], out: Path) -> None:
    meta = {**meta, "prompts": sorted({p.prompt_id for p in pairings}), "peak_rss_mb": peak_rss_mb()}
    records = [{**asdict(p), "ratios": p.ratios, "ratio_median": p.ratio_median} for p in pairings]
    (out / "hf_compare.json").write_text(json.dumps({**meta, "pairings": records}, indent=1), encoding="utf-8")
    (out / "hf_compare.md").write_text(hf_markdown(pairings, meta), encoding="utf-8")


# ---- registration ------------------------------------------------------------------------


def register_commands(commands: argparse._SubParsersAction) -> None:
    """Add `bench` and `bench-hf` to the CLI (called by cli.build_parser)."""
    b = commands.add_parser("bench", help="run prompt suites through every mode; write CSV, summary and plots")
    b.add_argument("--suite", action="append", required=True, help="JSON Lines prompt suite (repeatable)")
    b.add_argument("--preset", default=DEFAULT_PRESET, help=f"model pair (default {DEFAULT_PRESET})")
    b.add_argument("--modes", default=DEFAULT_MODES, help=f"comma-separated modes, at most {MAX_MODES}, each once (default {DEFAULT_MODES})")
    b.add_argument("--max-new-tokens", type=int, default=128)
    b.add_argument("--limit", type=int, default=None, help="first N prompts of each suite")
    b.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    b.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    b.set_defaults(run=cmd_bench)

    h = commands.add_parser("bench-hf", help="engine overhead against transformers' assisted generation")
    h.add_argument("--suite", action="append", required=True, help="JSON Lines prompt suite (repeatable)")
    h.add_argument("--preset", default=DEFAULT_PRESET, help=f"model pair (default {DEFAULT_PRESET})")
    h.add_argument("--max-new-tokens", type=int, default=128)
    h.add_argument("--limit", type=int, default=None, help="first N prompts of each suite")
    h.add_argument("--repeats", type=int, default=5, help="interleaved pairs per mode after a warm-up (default 5)")
    h.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    h.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    h.set_defaults(run=cmd_bench_hf)
