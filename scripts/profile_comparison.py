"""Where a whole comparison's time goes, without the page: each model run against everything else.

Runs the first example prompt through `specviz.decoding.pipeline.compare` (the CLI's path) with the default
preset and policies, `--repeats` times, and prints per run: the engine's own time for target-only
decoding and for each policy, the oracle's preparation, and what is left (token text, records,
bookkeeping). Run it alone on a quiet machine.

    python scripts/profile_comparison.py [--max-new-tokens 128] [--repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.decoding.modes import DEFAULT_MODES
from specviz.decoding.pipeline import Limits, compare, make_request
from specviz.pair.models import get_pair
from specviz.pair.presets import DEFAULT_PRESET
from specviz.ui.files import load_examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    pair = get_pair(DEFAULT_PRESET)
    prompt = load_examples()[0].prompt
    request = make_request(prompt, DEFAULT_MODES, args.max_new_tokens)
    for repeat in range(1, args.repeats + 1):
        started = time.perf_counter()
        comparison = compare(pair, request, Limits(time_budget_s=float("inf")))
        total = time.perf_counter() - started
        parts = {t.label: t.wall_s for t in comparison.traces}
        parts["oracle preparation"] = comparison.oracle_s
        parts["target-only"] = comparison.baseline.wall_s
        policies = sum(t.wall_s for t in comparison.traces) + comparison.baseline.wall_s
        rest = total - comparison.model_s()
        print(f"run {repeat}: total {total:.1f} s = model runs {policies:.1f} s + oracle preparation "
              f"{comparison.oracle_s:.1f} s + everything else {rest:.2f} s "
              f"(total / model runs = {total / policies:.3f})")
        print("       " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in parts.items()))


if __name__ == "__main__":
    main()
