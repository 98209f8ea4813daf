"""Check the what-if sweep against real runs: replay policies that were NOT run, from one
default comparison, then run them for real and compare pass counts.

    python scripts/validate_sweep.py [--preset NAME] [--max-new-tokens N] [--out docs/SWEEP_VALIDATION.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from specviz.decoding.engine import generate
from specviz.decoding.pipeline import compare, make_request, prompt_ids_for
from specviz.decoding.policies import Dynamic, Static
from specviz.explain.sweep import replay
from specviz.pair.models import get_pair
from specviz.pair.presets import DEFAULT_PRESET

PROMPT = "Write a Python function that checks whether a string is a palindrome, ignoring case and spaces."


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--out")
    args = parser.parse_args()

    pair = get_pair(args.preset)
    request = make_request(args.prompt, "static:5,heuristic:5,dynamic:0.4,oracle", args.max_new_tokens)
    comparison = compare(pair, request)
    prompt_ids = prompt_ids_for(pair, request)
    rows = []
    for make in [lambda: Dynamic(0.2), lambda: Dynamic(0.6), lambda: Dynamic(0.8),
                 lambda: Static(3), lambda: Static(7), lambda: Static(12)]:
        started = time.perf_counter()
        predicted = replay(comparison, make(), eos_ids=pair.eos_token_ids)
        replay_s = time.perf_counter() - started
        real = generate(pair, prompt_ids, make(), args.max_new_tokens)
        assert real.token_ids == comparison.baseline.token_ids, "a greedy run left the reference"
        error = (predicted.draft_passes - real.draft_passes) / real.draft_passes
        rows.append(f"| {predicted.label} | {predicted.target_passes} | {real.target_passes} | "
                    f"{predicted.draft_passes} | {real.draft_passes} | {error:+.1%} | "
                    f"{predicted.estimated_s:.2f} | {real.wall_s:.2f} | {replay_s * 1000:.1f} |")
    table = "\n".join([
        (f"Preset `{args.preset}`, {args.max_new_tokens} new tokens, replayed from one run of "
        "static:5, heuristic:5, dynamic:0.4 and the oracle; each row then run for real."),
        "",
        ("| policy | replay target passes | real target passes | replay draft passes | real draft passes "
        "| draft error | estimated s | real s | replay ms |"),
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ])
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
