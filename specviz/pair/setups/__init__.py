"""The CPU set-ups, by name: `SETUPS`, the registry that the choice at load, the settings
SPECVIZ_TARGET_SETUP and SPECVIZ_DRAFT_SETUP, `python -m specviz pass-costs --setups` and
docs/SETUP.md's table of set-ups (checked by a test) read.

Each set-up is a cpu.CpuSetup in the module of its family, read in this order:

- fp32.py: `fp32`, as loaded, every model's last turn; `fp32-window`, windows computed weight-first;
- packing.py: weights packed once for oneDNN and the row counts at which that is row-exact;
  `fp32-packed`;
- bf16.py: `bf16`, packed, row-exact for the target; `bf16-fast`, only asked for; `bf16-cast`, a
  draft's bf16 where the CPU has no native bf16;
- int4.py: `int4`, a draft in 4 bits;
- kquant_codes.py: `kquant`, K-quant codes on SpecViz's kernel (kquant.py);
- int8.py: the bundled int8 draft made row-exact (models.int8_draft; never chosen: not in SETUPS).

A model gets the set-up its setting names, where that takes it, else the first of its turns that
takes it (cpu.choose). The target's turns, best first: its GGUF's own K-quant codes where kept,
faster and row-exact; bf16 where the CPU has native bf16 and it is row-exact; without native bf16,
fp32 packed where row-exact and faster, else with windows weight-first where faster; fp32 as
loaded. The draft's: SpecViz's own 4-bit codes where faster than torch's int4; int4 where faster
than bf16; bf16 packed where native; bf16 as cast where faster; fp32. The set-ups timed only to
choose (kquant, int4) take their turn only where nothing is asked for. The bundled pairs' targets
stay fp32 (`choose_fp32_target`: models.py derives their drafts from the target before it is
converted); a GPU keeps its own path (gpu.py).

Adding a set-up: its class in its family's module (or a module of its own here), one entry in
SETUPS and, to be chosen unasked, a place in TARGET_TURNS or DRAFT_TURNS; its row in docs/SETUP.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ... import settings
from ...errors import SpecVizError
from .. import cpu, kquant
from ..cpu import AUTO, DRAFT, DRAFT_SETUP_ENV, ROW_SIZES, TARGET, TARGET_SETUP_ENV, Choice, CpuSetup, Machine
from .bf16 import BF16, BF16_CAST, BF16_FAST
from .fp32 import FP32, FP32_WINDOW
from .int4 import INT4
from .kquant_codes import KQUANT
from .packing import FP32_PACKED

SETUPS: dict[str, CpuSetup] = {setup.name: setup for setup in (
    FP32, FP32_PACKED, FP32_WINDOW, BF16, BF16_FAST, BF16_CAST, INT4, KQUANT)}
TARGET_TURNS = ("kquant", "bf16", "fp32-packed", "fp32-window", "fp32")
DRAFT_TURNS = ("kquant", "int4", "bf16", "bf16-cast", "fp32")


def names(role: str) -> list[str]:
    """The set-ups that set up the `role` (cpu.TARGET or cpu.DRAFT), in the registry's order."""
    return [name for name, setup in SETUPS.items() if role in setup.models]


def asked(env: str, environ: Mapping[str, str] | None = None) -> str:
    """The set-up a setting (SPECVIZ_TARGET_SETUP or SPECVIZ_DRAFT_SETUP) asks for: a name in SETUPS,
    or auto where it is unset or says so. Anything else is a one-line SpecVizError naming them."""
    value = settings.read(env, environ).lower() or AUTO
    if value != AUTO and value not in SETUPS:
        raise SpecVizError(f"{env}={value!r} is not a CPU set-up: set it to auto, one of the target's "
                           f"({', '.join(names(TARGET))}) or one of the draft's ({', '.join(names(DRAFT))}).")
    return value


def choose_target(model: torch.nn.Module, environ: Mapping[str, str] | None = None, found: Machine | None = None,
                  packed: Mapping[str, kquant.Packed] | None = None, cache: Path | None = None) -> Choice:
    """The target's set-up on this machine (`found`), given its GGUF's K-quant codes where set-up kept
    them (`packed`) and where kernels are built (`cache`)."""
    ask = cpu.Ask(TARGET, asked(TARGET_SETUP_ENV, environ), model, found or cpu.machine(), packed or {}, cache)
    return cpu.choose(ask, SETUPS, TARGET_TURNS)


def choose_draft(environ: Mapping[str, str] | None = None, found: Machine | None = None,
                 draft: torch.nn.Module | None = None, cache: Path | None = None) -> Choice:
    """The draft's set-up on this machine; without the `draft` itself, nothing is timed."""
    ask = cpu.Ask(DRAFT, asked(DRAFT_SETUP_ENV, environ), draft, found or cpu.machine(), {}, cache)
    return cpu.choose(ask, SETUPS, DRAFT_TURNS)


def choose_fp32_target(model: torch.nn.Module, environ: Mapping[str, str] | None = None) -> Choice:
    """An fp32 target's set-up (the bundled pairs'): fp32 packed for oneDNN where that is row-exact
    and measures faster here, else fp32 as loaded. SPECVIZ_TARGET_SETUP=fp32 or fp32-packed forces one;
    another set-up asked for is not for it."""
    setup = asked(TARGET_SETUP_ENV, environ)
    if setup == "fp32":
        return Choice("fp32", f"{TARGET_SETUP_ENV}=fp32")
    forced = setup == "fp32-packed"
    why = f"{TARGET_SETUP_ENV}=fp32-packed" if forced else FP32_PACKED.why
    taken = FP32_PACKED.take(model, why, measured=not forced)
    return taken or Choice("fp32", "packed fp32 was not row-exact or not faster here")


def prepare_target(model: torch.nn.Module, setup: str, sizes: tuple[int, ...] | None = ROW_SIZES,
                   packed: Mapping[str, kquant.Packed] | None = None, kernel: Path | None = None) -> str:
    """Set the target up in place as a Choice says (its set-up, row sizes and kernel); returns what
    runs, for the model line."""
    return _for(setup, TARGET).prepare(model, TARGET, Choice(setup, "", sizes, kernel), packed)


def prepare_draft(model: torch.nn.Module, setup: str, kernel: Path | None = None) -> str:
    """Set the draft up in place as a Choice says; returns what runs, for the model line."""
    return _for(setup, DRAFT).prepare(model, DRAFT, Choice(setup, "", None, kernel))


def _for(name: str, role: str) -> CpuSetup:
    setup = SETUPS[name]
    if role not in setup.models:
        raise ValueError(f"the {name} set-up does not set up a {role}")
    return setup
