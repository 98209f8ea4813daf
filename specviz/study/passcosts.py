"""`python -m specviz pass-costs`: what a forward pass costs on this machine, per set-up of the pair.

For each set-up asked for (a name in the registry of set-ups, pair/setups/: e.g. fp32 as loaded; fp32
packed for oneDNN; fp32 with windows computed weight-first; bf16 with packed weights and row-exact
attention, or, on a CPU without native bf16, the target as chosen there and the draft cast to bf16)
the pair is loaded anew and its cost curve measured (decoding/costcurve.py): the target's pass over
1-20 new tokens after a KV cache, the draft's one-token call and its prefill, in milliseconds and in
one-token target passes. A set-up with `@SIZE` (`kquant@32k`) loads the draft with its output layer
over the SIZE most frequent tokens (SPECVIZ_DRAFT_VOCAB, pair/vocab.py), so `kquant,kquant@32k`
measures the draft's call with and without it in one sitting. Run it alone: every figure is a timing.
"""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager
from pathlib import Path

import torch

from .. import settings
from ..decoding.costcurve import WINDOWS, PassCostCurve, measure, table
from ..errors import SpecVizError
from ..pair import cpu, kquant, vocab
from ..pair.models import get_pair, release_pair
from ..pair.presets import DEFAULT_PRESET, get_preset
from ..pair.setups import names as setup_names


@contextmanager
def _forced(setup: str):
    """A pair loaded in `setup` (the settings the set-ups' choice reads, pair/setups/): both models alike, or
    TARGET/DRAFT (e.g. bf16/int4) for each its own; `@SIZE` after it, the draft's output layer over SIZE
    tokens (else as SPECVIZ_DRAFT_VOCAB says)."""
    models, _, size = setup.partition("@")
    target, _, draft = models.partition("/")
    values = {cpu.TARGET_SETUP_ENV: target, cpu.DRAFT_SETUP_ENV: draft or target}
    with settings.overriding({**values, vocab.VOCAB_ENV: size} if size else values):
        yield


def curves(preset: str, setups: list[str], context: int, repeats: int,
           windows: tuple[int, ...] = WINDOWS) -> list[PassCostCurve]:
    """One cost curve per set-up, each on the pair loaded anew (one pair in memory at a time)."""
    found = cpu.machine()
    out = []
    for setup in setups:
        release_pair(preset)
        with _forced(setup):
            pair = get_pair(preset)
        out.append(measure(pair, context=context, windows=windows, repeats=repeats, cpu_name=found.describe()))
        release_pair(preset)
    return out


def _setups(text: str, preset: str) -> list[str]:
    if get_preset(preset).target == "bundled":  # its drafts are made from its fp32 target, which stays fp32
        if text == "auto":
            return ["fp32", "fp32-packed"]
        setups = [s.strip() for s in text.split(",") if s.strip()]
        if not setups or any(_draft_vocabulary(s) not in ("fp32", "fp32-packed") for s in setups):
            raise SpecVizError(f"A bundled pair's target runs fp32 or fp32-packed, not {text!r}.")
        return setups
    if text == "auto":
        found = cpu.machine()
        setups = ["fp32", "bf16"] if found.native_bf16 else ["fp32", "fp32-window", "bf16"]
        return setups + (["kquant"] if kquant.cpu_can(found.flags) else [])
    setups = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in setups if not _known(s)]
    if unknown or not setups:
        raise SpecVizError(f"Unknown set-up {', '.join(unknown) or text!r}: choose from "
                           f"{', '.join(setup_names(cpu.TARGET))}, or TARGET/DRAFT with the draft one of "
                           f"{', '.join(setup_names(cpu.DRAFT))} (e.g. bf16/int4).")
    return setups


def _known(setup: str) -> bool:
    target, slash, draft = _draft_vocabulary(setup).partition("/")
    return target in setup_names(cpu.TARGET) and (not slash or draft in setup_names(cpu.DRAFT))


def _draft_vocabulary(setup: str) -> str:
    """The set-up without its `@SIZE`, whose SIZE must be a draft vocabulary (else a one-line error)."""
    models, at, size = setup.partition("@")
    if at:
        vocab.asked({vocab.VOCAB_ENV: size or "?"})
    return models


def cmd_pass_costs(args: argparse.Namespace) -> int:
    if args.context < 1 or args.repeats < 1:
        raise SpecVizError("--context and --repeats must be 1 or more.")
    setups = _setups(args.setups, args.preset)
    print(f"{args.preset}: {', '.join(setups)}; torch {torch.__version__}, {torch.get_num_threads()} threads",
          flush=True)
    measured = curves(args.preset, setups, args.context, args.repeats)
    for curve in measured:
        print("\n" + "\n".join(table(curve)), flush=True)
    if len(measured) > 1:
        base = measured[0]
        for curve in measured[1:]:
            print(f"\none-token target pass, {curve.setup.split(';')[0]} over {base.setup.split(';')[0]}: "
                  f"{curve.target_ms[0] / base.target_ms[0]:.2f}; the draft's one-token call "
                  f"{curve.draft_call_ms / base.draft_call_ms:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps([c.to_dict() for c in measured], indent=2) + "\n")
    return 0


def register_commands(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("pass-costs", help="what a forward pass costs on this machine, per set-up of the pair "
                                               "(run it alone: every figure is a timing)")
    p.add_argument("--preset", default=DEFAULT_PRESET, help=f"model pair (default {DEFAULT_PRESET})")
    p.add_argument("--setups", default="auto",
                   help=f"comma-separated set-ups to measure: {', '.join(setup_names(cpu.TARGET))} for both models, "
                        f"or TARGET/DRAFT with the draft one of {', '.join(setup_names(cpu.DRAFT))}, e.g. kquant/int4; "
                        "@SIZE after one, the draft's output layer over the SIZE most frequent tokens, e.g. kquant@32k "
                        "(default auto: fp32 and bf16 where the CPU has native bf16, else fp32, fp32-window and "
                        "bf16, and kquant where its kernel runs; a bundled pair's target: fp32 and fp32-packed)")
    p.add_argument("--context", type=int, default=200, help="tokens in the KV cache before each call (default 200)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per figure, median (default 5)")
    p.add_argument("--json", help="write the curves as JSON here")
    p.set_defaults(run=cmd_pass_costs)
