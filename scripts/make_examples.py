"""Compute the example prompts' comparisons ahead, so the app shows them the moment one is clicked.

Runs the prompts of assets/examples.json that belong to one preset (an example names its
preset, else it is the default one) through the app's default policies with 128 new tokens (the
app's defaults) and writes each comparison, with where and when it was computed, to the file the
example names (assets/examples/*.json). Run it alone on a quiet machine: the stored wall times
are shown in the app as measured.

    python scripts/make_examples.py [--preset smollm2-135m-int8] [--max-new-tokens 128]
    python scripts/make_examples.py --preset qwen2.5-coder-1.5b   # after scripts/setup.sh --real-pair
    python scripts/make_examples.py --only "Editing (lookup)"   # one example

An example with `"draft": "lookup"` is computed with that draft (decoding/drafts.py) at its
defaults (transformers' settings, for the lookup draft).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import transformers

from specviz.decoding.drafts import pair_setup, parse_draft
from specviz.decoding.modes import DEFAULT_MODES
from specviz.decoding.pipeline import Limits, compare, make_request
from specviz.pair.models import get_pair
from specviz.pair.presets import DEFAULT_PRESET
from specviz.ui.files import load_examples


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=DEFAULT_PRESET, help="the preset whose examples to recompute")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--only", metavar="NAME", help="recompute only this example (its own preset)")
    args = parser.parse_args()
    examples = [e for e in load_examples() if e.comparison_path is not None
                and (e.name == args.only if args.only else e.preset == args.preset)]
    if args.only and examples:
        args.preset = examples[0].preset
    if not examples:
        raise SystemExit(f"no example of assets/examples.json belongs to {args.preset}")
    pair = get_pair(args.preset, progress=print)
    for example in examples:
        draft = parse_draft(example.draft)
        request = make_request(example.prompt, DEFAULT_MODES, args.max_new_tokens, draft=draft)
        comparison = compare(pair, request, Limits(time_budget_s=float("inf")))
        comparison.provenance = {
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "setup": pair_setup(pair.setup, draft),
            "versions": f"transformers {transformers.__version__}, python {platform.python_version()}",
            "command": (f"python scripts/make_examples.py --only {example.name!r}" if args.only
                        else f"python scripts/make_examples.py --preset {args.preset}"),
        }
        lossless = all(t.lossless for t in comparison.traces)
        example.comparison_path.parent.mkdir(parents=True, exist_ok=True)
        example.comparison_path.write_text(comparison.to_json() + "\n", encoding="utf-8")
        print(f"{example.name}: {len(comparison.traces)} policies, lossless {lossless}, "
              f"wrote {example.comparison_path}")


if __name__ == "__main__":
    main()
