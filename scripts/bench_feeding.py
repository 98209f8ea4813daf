"""What exact draft feeding costs: SpecViz's one-token-per-call drafter against transformers'
way of feeding the draft (the last two committed tokens in one call per round), on one suite.

Both feedings run the same prompts and policies in one process, interleaved prompt by prompt so
that machine noise falls on both alike; run it alone on a quiet machine.

    python scripts/bench_feeding.py [--preset NAME] [--suite assets/prompts/coding.jsonl]
                                    [--limit N] [--max-new-tokens 128] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from specviz.decoding.drafters import ModelDrafter, TransformersDrafter
from specviz.decoding.engine import generate
from specviz.decoding.modes import make_policy, parse_modes
from specviz.decoding.oracle import make_oracle
from specviz.pair.models import encode_prompt, get_pair
from specviz.pair.presets import DEFAULT_PRESET
from specviz.study.bench import read_suite
from specviz.study.runner import DEFAULT_SUITES

MODES = "static:5,heuristic:5,dynamic:0.4,oracle"
FEEDINGS = {"exact (SpecViz)": ModelDrafter, "transformers": TransformersDrafter}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--suite", default=DEFAULT_SUITES[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out")
    args = parser.parse_args()

    pair = get_pair(args.preset)
    items = read_suite(args.suite, args.limit)
    # totals[(label, feeding)] = [drafted tokens, draft calls, draft seconds, target passes]
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0])
    for number, item in enumerate(items, start=1):
        ids = encode_prompt(pair, item.prompt)
        first = None
        for spec in parse_modes(MODES):
            for feeding_name, feeding in FEEDINGS.items():
                if spec.policy == "oracle":
                    # The oracle of the exact feeding; fed the transformers way it may see other guesses.
                    oracle = make_oracle(pair, ids, first.token_ids)[0]
                    policy = make_policy(spec, oracle)
                else:
                    policy = make_policy(spec)
                trace = generate(pair, ids, policy, args.max_new_tokens, make_drafter=feeding.for_pair)
                first = first or trace
                row = totals[(trace.label, feeding_name)]
                row[0] += trace.drafted
                row[1] += trace.draft_passes
                row[2] += trace.draft_s
                row[3] += trace.target_passes
        print(f"{number}/{len(items)} {item.id}", file=sys.stderr, flush=True)

    lines = [(f"Preset `{args.preset}`, suite `{Path(args.suite).name}` ({len(items)} prompts), "
              f"{args.max_new_tokens} new tokens, greedy; summed over the prompts."), "",
             ("| policy | feeding | target passes | draft tokens | draft calls | draft s | calls vs transformers "
              "| draft time vs transformers |"),
             "|---|---|---|---|---|---|---|---|"]
    labels = list(dict.fromkeys(label for label, _ in totals))
    for label in labels:
        base = totals[(label, "transformers")]
        for feeding_name in FEEDINGS:
            drafted, calls, seconds, target = totals[(label, feeding_name)]
            lines.append(f"| {label} | {feeding_name} | {target} | {drafted} | {calls} | {seconds:.2f} "
                         f"| {calls / base[1] - 1:+.1%} | {seconds / base[2] - 1:+.1%} |")
    all_exact = [sum(totals[(label, "exact (SpecViz)")][i] for label in labels) for i in (1, 2)]
    all_hf = [sum(totals[(label, "transformers")][i] for label in labels) for i in (1, 2)]
    lines += ["", (f"All policies together: {all_exact[0]} draft calls in {all_exact[1]:.2f} s (exact) against "
                   f"{all_hf[0]} in {all_hf[1]:.2f} s (transformers): calls {all_exact[0] / all_hf[0] - 1:+.1%}, "
                   f"draft time {all_exact[1] / all_hf[1] - 1:+.1%}.")]
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
