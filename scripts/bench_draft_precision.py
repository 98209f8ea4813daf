"""Which precision should a pair's draft run in? Its fp32 weights against a bf16 copy of them, on
the same prompts and policies in one process.

The target stays fp32 (its numerics decide the lossless check); only the draft changes, so every
policy must stay lossless in both, and what differs is speed: how much cheaper a bf16 draft call
is, and how many more of its guesses the target rejects. Both drafts run each prompt back to back
(fp32, then bf16) so that machine noise falls on both alike; run it alone on a quiet machine.

    python scripts/bench_draft_precision.py [--preset qwen2.5-coder-1.5b] [--suite FILE]
                                            [--limit 3] [--max-new-tokens 96] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch

from specviz.decoding.pipeline import compare, make_request
from specviz.decoding.trace import Comparison
from specviz.explain.costs import StudyPassCosts
from specviz.pair.models import bf16_draft, get_pair, warm_up
from specviz.pair.presets import REAL_PAIR_PRESET
from specviz.study.bench import _bench_limits, peak_rss_mb, read_suite
from specviz.study.runner import DEFAULT_SUITES

MODES = "static:5,heuristic:5,dynamic:0.4,oracle"


def agreement(comparison: Comparison) -> float:
    """The share of the target's greedy answer the draft would have guessed, token by token."""
    reference = comparison.draft_along_reference
    answer = comparison.baseline.token_ids
    return sum(d == t for d, t in zip(reference.tokens, answer)) / len(answer)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default=REAL_PAIR_PRESET)
    parser.add_argument("--suite", default=DEFAULT_SUITES[0])
    parser.add_argument("--limit", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out")
    args = parser.parse_args()

    fp32 = get_pair(args.preset)
    if fp32.draft.dtype != torch.float32:
        raise SystemExit(f"{args.preset}'s draft loads in {fp32.draft.dtype}; this compares an fp32 draft with bf16")
    bf16 = replace(fp32, draft=bf16_draft(fp32.draft))
    warm_up(bf16)
    drafts = {"fp32": fp32, "bf16": bf16}
    limits = _bench_limits()
    rows: dict[str, list[dict]] = defaultdict(list)
    same_guess, positions = 0, 0  # where the two drafts guess the same token along the target's answer
    for item in read_suite(args.suite, args.limit):
        request = make_request(item.prompt, MODES, args.max_new_tokens, limits=limits)
        guesses = []
        for precision, pair in drafts.items():
            c = compare(pair, request, limits)
            guesses.append(c.draft_along_reference.tokens)
            costs = StudyPassCosts.from_comparison(c)
            rows[precision].append({
                "agreement": agreement(c),
                "draft_call_ms": costs.draft_call_s * 1000,
                "draft_to_token_pass": costs.draft_to_token_pass,
                "lossless": all(t.lossless for t in c.traces),
                "speedups": {t.label: c.speedup(t) for t in c.traces},
                "target_passes": {t.label: t.target_passes for t in c.traces},
            })
            print(f"{item.id} {precision}: agreement {rows[precision][-1]['agreement']:.3f}, draft call "
                  f"{rows[precision][-1]['draft_call_ms']:.0f} ms, "
                  + ", ".join(f"{label} {s:.2f}x" for label, s in rows[precision][-1]["speedups"].items()),
                  file=sys.stderr, flush=True)
        same_guess += sum(a == b for a, b in zip(*guesses))
        positions += min(len(g) for g in guesses)

    labels = list(rows["fp32"][0]["speedups"])
    lines = [(f"Preset {args.preset}, {len(rows['fp32'])} prompts of {args.suite}, {args.max_new_tokens} new "
              f"tokens, greedy; torch threads {torch.get_num_threads()}; peak RSS {peak_rss_mb():.0f} MB."), "",
             "| draft | agreement with the target | draft call | / target pass | lossless | "
             + " | ".join(f"{label}: speedup (median), target passes" for label in labels) + " |",
             "|---|---|---|---|---|" + "---|" * len(labels)]
    for precision, runs in rows.items():
        cells = [precision, f"{statistics.fmean(r['agreement'] for r in runs):.3f}",
                 f"{statistics.median(r['draft_call_ms'] for r in runs):.0f} ms",
                 f"{statistics.median(r['draft_to_token_pass'] for r in runs):.2f}",
                 f"{sum(r['lossless'] for r in runs)}/{len(runs)}"]
        cells += [f"{statistics.median(r['speedups'][label] for r in runs):.2f}x, "
                  f"{sum(r['target_passes'][label] for r in runs)}" for label in labels]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", (f"The bf16 draft guessed the fp32 draft's token at {same_guess} of {positions} positions of the "
                   f"target's answers ({same_guess / positions:.1%}).")]
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main()
