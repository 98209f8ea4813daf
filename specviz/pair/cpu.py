"""How a loaded model is set up for the CPU it runs on: what every set-up shares, and how one is chosen.

Speculative decoding pays because the target checks k draft tokens in one forward pass that
costs about as much as decoding one. torch's fp32 product over a few rows does not: it repacks
the whole weight matrix on every call (docs/BENCHMARKS.md, "What a pass costs"). Which set-up
runs instead is decided at load, by what the CPU has and by short timings on the model's shapes.

A set-up is a `CpuSetup`: the models it sets up (the target, the draft or both), whether it
applies here, whether it pays (a timing, `timed_in_turns`), how it prepares a model, how it
describes itself. Each lives in a module of its family in pair/setups/, and in the registry
`setups.SETUPS` by name, which the choice at load, the settings, `python -m specviz pass-costs`
and docs/SETUP.md's table of set-ups read. `choose` below takes a model's set-up: the one its
setting (SPECVIZ_TARGET_SETUP, SPECVIZ_DRAFT_SETUP) names, else the first of the model's turns,
best first, that takes it; pair/setups/__init__.py lists the turns.

Row-exact. A set-up is row-exact when a row's logits are the same bits in a verification pass of
any length as in a one-token pass: greedy speculative decoding is then lossless by construction,
not by rounding luck. Attention as loaded is not (transformers' sdpa path lays out one query row
differently from several, and the fused kernel's blocking depends on the row count), so a
row-exact set-up computes attention one query row at a time, each with exactly the call of a
one-token pass (`row_attention`). It is checked, never assumed: `forward.rows_exact` compares windows of
8 and 24 new tokens with one-token passes on a one-layer probe of the model's shapes (`probe_of`),
before the model is converted, and a set-up that fails is not used.

The draft's numbers need not equal anything: the engine feeds it so that its guess is a function
of the text alone (drafters.ModelDrafter). It has to be cheap and to guess as well; a one-token call
reads every weight once, so its price is its weights' bytes. `forward.draft_rows_exact` then says whether
the draft, as set up, may read a round's backlog in one call.

Each timing is the median of five calls, in turns, on the model's widest Linear layer that both
kernels fit (`widest_linear`); "clearly faster" is under 0.8 of the other's time.
"""

from __future__ import annotations

import copy
import ctypes
import gc
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from .kquant import Packed

ROW_ATTENTION = "specviz_rows"
# Every product of a packed Linear runs on one of these row counts (the rows padded with zeros, a
# longer input in blocks of the largest): oneDNN picks its kernel, and its order of summation, by
# the row count, so a fixed count gives a row the same bits in a one-token pass, a verification
# window or the prompt's prefill. Measured on an AMX Xeon (8960x1536 and the 151936-row output
# layer): 16 and 32 rows give every row the same bits, 48 and 64 do not, and up to 16 rows cost
# about what one row does. `exact_row_sizes` (setups/packing.py) checks the pair of sizes at load,
# and falls back to 16 alone (exact by construction) where they differ.
ROW_SIZES = (16, 32)
TARGET_SETUP_ENV = "SPECVIZ_TARGET_SETUP"
DRAFT_SETUP_ENV = "SPECVIZ_DRAFT_SETUP"
TARGET, DRAFT = "target", "draft"  # the models a set-up may set up
AUTO = "auto"  # what a setting that names no set-up asks for: each model's turns


@dataclass(frozen=True)
class Machine:
    """What the CPU can do, as far as the set-up cares."""

    name: str  # the CPU's model name, for every figure measured on it
    native_bf16: bool  # AMX or AVX512-BF16, and a torch whose oneDNN uses them
    flags: frozenset[str]

    def describe(self) -> str:
        found = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in self.flags]
        return f"{self.name} ({', '.join(found) or 'no AVX2'})"


@lru_cache(maxsize=1)
def machine() -> Machine:
    name, flags = "unknown CPU", frozenset()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name == "unknown CPU":
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = frozenset(value.split())
    except OSError:  # not Linux: no flags known, so nothing is assumed
        pass
    return Machine(name, _has_native_bf16(flags), flags)


def _has_native_bf16(flags: frozenset[str]) -> bool:
    if not ({"amx_bf16", "avx512_bf16"} & flags) or not torch.backends.mkldnn.is_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def timed_in_turns(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each call's median milliseconds after one untimed warm-up (the first call at a new shape sets up
    its kernels), timed in turns: every repeat runs every call once, in alternating order. A shared
    machine has busy seconds; timed one call's repeats after another's, such a second falls on one
    call alone (seen in the cost curve, decoding/costcurve.py: a pass over 2 tokens priced at 1.55
    one-token passes, over 4 at 1.54, where runs then paid 1.1-1.3, which kept the cost-aware rule
    plain for a whole run). In turns it falls on all of them alike, and their ratios hold: the set-up
    checks compare kernels by them, the cost curve prices windows."""
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            calls[name]()
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(ms) for name, ms in times.items()}


# ---- a set-up, and how one is chosen ---------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    setup: str  # a name in setups.SETUPS
    why: str  # one clause for the model line and the logs
    sizes: tuple[int, ...] | None = ROW_SIZES  # packed: the row counts of every product (see ROW_SIZES; (): any)
    kernel: Path | None = None  # kquant: the compiled kernel


@dataclass(frozen=True)
class Ask:
    """What `choose` hands each set-up: which model, the model itself (a draft's may be None: nothing
    loaded to time), what its setting asks for (a set-up's name, or AUTO) and the machine; for a
    target, its GGUF's K-quant codes where set-up kept them; where kernels are built."""

    role: str  # TARGET or DRAFT
    asked: str
    model: torch.nn.Module | None
    found: Machine
    packed: Mapping[str, Packed] = field(default_factory=dict)
    cache: Path | None = None

    @property
    def forced_why(self) -> str:
        """The reason a set-up taken because it was asked for gives: the setting, e.g. SPECVIZ_DRAFT_SETUP=int4."""
        return f"{TARGET_SETUP_ENV if self.role == TARGET else DRAFT_SETUP_ENV}={self.asked}"


class CpuSetup:
    """One way to set a model up for the CPU: a class in a module of pair/setups/, one instance in
    `setups.SETUPS`. `choose` asks the set-up a setting names to `force` itself, and each set-up in
    its turn to `choose` itself. Both answer a Choice (taken), a reason (passed, saying why: the
    reason leads the one of the set-up taken) or None (passed, nothing to say)."""

    name = ""
    models: frozenset[str] = frozenset()  # which it sets up: TARGET, DRAFT or both
    summary = ""  # what runs and where, in a clause (docs/SETUP.md's table of set-ups quotes it)
    why = ""  # the reason it gives when taken in its turn
    unasked_only = False  # takes its turn only where its setting asks for nothing (AUTO)
    stand_in = ""  # named in the setting of a model it does not set up: the set-up that stands in there

    def describe(self) -> str:
        """One line: its name, the models it sets up, what runs."""
        return f"{self.name} ({' and '.join(m for m in (TARGET, DRAFT) if m in self.models)}): {self.summary}"

    def applies(self, ask: Ask) -> bool:
        """Whether it may take the model here in its turn: what the CPU has, what is loaded."""
        return True

    def pays(self, ask: Ask) -> bool:
        """Whether it measures faster here than what the model would otherwise get (`timed_in_turns`)."""
        return True

    def force(self, ask: Ask) -> Choice | str | None:
        """It, where the model's setting names it: by default taken as it is."""
        return Choice(self.name, ask.forced_why)

    def choose(self, ask: Ask) -> Choice | str | None:
        """It, in its turn: by default taken where it applies and pays."""
        return Choice(self.name, self.why) if self.applies(ask) and self.pays(ask) else None

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice,
                packed: Mapping[str, Packed] | None = None) -> str:
        """Set `model` up in place as the `role`, as `choice` says (its row sizes, its kernel; a
        target's K-quant codes in `packed`); returns what runs, for the model line."""
        raise NotImplementedError


def choose(ask: Ask, setups: Mapping[str, CpuSetup], turns: Sequence[str]) -> Choice:
    """A model's set-up: the one its setting names (`force`; one that does not set up this model
    stands for its `stand_in`), else the first of `turns`, the model's set-ups best first, that takes
    it (`choose`; an `unasked_only` set-up only where nothing is asked). The reasons of those that
    passed lead the reason of the one taken: "no native bf16 on this CPU; weight-first window
    products measured faster"."""
    named = setups.get(ask.asked)
    if named is not None and ask.role not in named.models:
        named = setups.get(named.stand_in)
    tries = [named.force] if named is not None else []
    tries += [setups[name].choose for name in turns
              if setups[name] is not named and (ask.asked == AUTO or not setups[name].unasked_only)]
    reasons: list[str] = []
    for attempt in tries:
        taken = attempt(ask)
        if isinstance(taken, Choice):
            return replace(taken, why="; ".join(r for r in (*reasons, taken.why) if r)) if reasons else taken
        if taken:
            reasons.append(taken)
    raise LookupError(f"no CPU set-up took the {ask.role}")  # fp32, every model's last turn, takes any


# ---- what the set-ups share: row-exact attention, the exactness check, converting in place --------


def row_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  **kwargs) -> tuple[torch.Tensor, None]:
    """Causal attention one query row at a time (transformers' attention interface): row i of a
    pass over n new tokens attends to the keys up to its own position with the very call that a
    one-token pass at that position makes, so its result is the same bits. A batch of one
    sequence without padding, as the engine runs; the mask is not needed then."""
    batch, heads, rows, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    group = heads // kv_heads  # grouped-query attention: `group` query heads share a key/value head
    out = []
    for row in range(rows):
        seen = length - rows + row + 1
        q = query[:, :, row, :].reshape(batch, kv_heads, group, dim)
        o = F.scaled_dot_product_attention(q, key[:, :, :seen], value[:, :, :seen], scale=scaling)
        out.append(o.reshape(batch, heads, 1, dim))
    together = out[0] if rows == 1 else torch.cat(out, dim=2)  # (a one-token pass: nothing to join)
    return together.transpose(1, 2).contiguous(), None


def _register_row_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ROW_ATTENTION, row_attention)


def use_row_attention(model: torch.nn.Module) -> None:
    _register_row_attention()
    model.set_attn_implementation(ROW_ATTENTION)


def probe_of(model: torch.nn.Module, vocab: int | None = None) -> torch.nn.Module:
    """A one-layer model of the same architecture and widths, random weights: the same kernels on
    the same shapes as the model, for checking exactness before the model itself is converted.
    `vocab` replaces the vocabulary's size where the kernel's rows do not depend on its widths:
    drawing a 150k-token model's random output layer takes seconds."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    config.num_hidden_layers = 1
    if vocab is not None:
        config.vocab_size = vocab
        for special in ("pad_token_id", "bos_token_id", "eos_token_id"):  # ids past the smaller vocabulary
            setattr(config, special, None)
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:1]
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def widest_linear(model: torch.nn.Module, but: torch.nn.Module | None = None,
                  fits: Callable[[torch.nn.Linear], bool] = lambda m: True) -> torch.nn.Linear | None:
    """The model's Linear layer with the most weights (`but` left out, only those a kernel `fits`):
    where a kernel's cost shows."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not but and fits(m)]
    return max(layers, key=lambda m: m.weight.numel(), default=None)


def replace_linears(model: torch.nn.Module, make: Callable[[torch.nn.Linear], torch.nn.Module]) -> None:
    """In place: every Linear layer replaced by what `make` makes of it, one parent at a time."""
    parents = [module for module in model.modules() if any(
        isinstance(child, torch.nn.Linear) for child in module.children())]
    for module in parents:
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, make(child))
        del child
        give_back_memory(collect=False)  # a replaced layer's weights go with its last reference
    del parents
    give_back_memory()


def own_memory(model: torch.nn.Module) -> None:
    """In place: what the model still holds of its loaded weights (norms, biases, embeddings) copied
    into memory of its own. A safetensors file is mapped whole, and every page a load read stays
    resident while any tensor of it lives: after the K-quant set-ups replace the big tables, a few
    norms kept 0.9 GB of the real pair's target file and 1.9 GB of its draft's in memory."""
    with torch.no_grad():
        for module in model.modules():
            for param in module.parameters(recurse=False):
                param.data = param.data.clone()
            for name, buffer in module.named_buffers(recurse=False):
                module._buffers[name] = buffer.clone()
    give_back_memory()


def give_back_memory(collect: bool = True) -> None:
    """Return the C heap's freed memory to the system (glibc keeps it otherwise); no-op elsewhere.
    `collect` first frees what only reference cycles hold: a full collection takes 0.2 s with a
    model loaded, so a loop over layers asks for it once at its end (55 of them took 11 s at load)."""
    if collect:
        gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def dtype_name(model: torch.nn.Module) -> str:
    dtype = next(model.parameters()).dtype
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))
