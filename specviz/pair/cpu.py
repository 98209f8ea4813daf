"""How a loaded model is set up for the CPU it runs on: the target so that it checks a window of
draft tokens at about the price of one token and stays lossless, the draft at its cheapest.

Speculative decoding pays because the target checks k draft tokens in one forward pass that
costs about as much as decoding one. torch's fp32 product over a few rows does not: it repacks
the whole weight matrix on every call (docs/BENCHMARKS.md, "What a pass costs"). Which set-up
runs instead is decided at load, by what the CPU has and by short timings on the model's shapes.

Row-exact. A set-up is row-exact when a row's logits are the same bits in a verification pass of
any length as in a one-token pass: greedy speculative decoding is then lossless by construction,
not by rounding luck. Attention as loaded is not (transformers' sdpa path lays out one query row
differently from several, and the fused kernel's blocking depends on the row count), so a
row-exact set-up computes attention one query row at a time, each with exactly the call of a
one-token pass (`row_attention`). It is checked, never assumed: `rows_exact` compares windows of
8 and 24 new tokens with one-token passes on a one-layer probe of the model's shapes, before the
model is converted, and a set-up that fails is not used.

The target (`choose_target`), the first that applies:

* kquant: the GGUF's own K-quant codes on SpecViz's kernel (kquant.py), where the codes were kept
  at set-up, the kernel builds for this CPU (AVX512-VNNI, else AVX2), the set-up is
  row-exact here, and it times faster than the next set-up would, for one row and for 8;
* bf16, where the CPU has native bf16 (AMX or AVX512-BF16, and a torch whose oneDNN uses them):
  each Linear packed once, at load, for oneDNN (`PackedLinear`, what torch's inductor does when it
  freezes a model), about as cheap for 20 rows as for one. oneDNN picks its kernel, and so its
  order of summation, by the row count, so every product runs on one of ROW_SIZES rows (padded
  with zeros): ROW_SIZES where that is row-exact, else its smallest alone, else fp32;
* fp32-packed, without native bf16: each Linear packed once for oneDNN in fp32 (`PackedLinear`),
  where that is row-exact (checked as for bf16, first with products of any row count) and its
  products over one row and over 8 time faster than torch's together. On an AVX2 EPYC this made a
  pass over 8 new tokens cost 1.42 one-token passes instead of 1.92, and the one-token pass
  itself faster (docs/BENCHMARKS.md);
* fp32-window, without native bf16 (there torch's bf16 product costs in proportion to its rows),
  where it times clearly faster: products over 2 to WINDOW_ROWS rows computed weight-first,
  weight @ rows.T, the same sum, for which MKL streams the weight once instead of repacking it
  (`WindowLinear`, on the same weights). Not row-exact: lossless stays what it was in fp32;
* fp32, as loaded. ("bf16-fast", bf16 packed with transformers' attention, is only ever forced.)

The draft's numbers need not equal anything: the engine feeds it so that its guess is a function
of the text alone (drafters.ModelDrafter). It has to be cheap and to guess as well; a one-token call
reads every weight once, so its price is its weights' bytes. The draft (`choose_draft`), the first
that applies: kquant, SpecViz's own 4-bit codes on the same kernel, where it builds and a one-row
product times faster than torch's int4; int4 (`Int4Linear`, a quarter of bf16's bytes) where a
one-row product times clearly faster than the bf16 below; bf16 packed where the CPU has native
bf16; elsewhere bf16 as cast (`CastLinear`, its prompt prefill in fp32) where a one-row product
times clearly faster than fp32's; else fp32. `draft_rows_exact` then says whether the draft may
read a round's backlog in one call (drafters.ModelDrafter).

Each timing is the median of five calls on the model's widest Linear layer that both kernels fit
(for fp32-window the widest but the output layer, over 8 rows); "clearly faster" is under 0.8 of
the other's time. SPECVIZ_TARGET_SETUP (fp32, fp32-packed, fp32-window, bf16, bf16-fast, kquant or auto) and
SPECVIZ_DRAFT_SETUP (fp32, bf16, int4, kquant or auto) force a choice. The bundled pairs' targets
stay fp32: `choose_fp32_target` picks fp32-packed or fp32 for them (models.py derives their drafts
from the target before it is converted); a GPU keeps its own path (gpu.py).
"""

from __future__ import annotations

import copy
import ctypes
import gc
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .. import settings
from . import kquant

ROW_ATTENTION = "specviz_rows"
# Every product of a packed Linear runs on one of these row counts (the rows padded with zeros, a
# longer input in blocks of the largest): oneDNN picks its kernel, and its order of summation, by
# the row count, so a fixed count gives a row the same bits in a one-token pass, a verification
# window or the prompt's prefill. Measured on an AMX Xeon (8960x1536 and the 151936-row output
# layer): 16 and 32 rows give every row the same bits, 48 and 64 do not, and up to 16 rows cost
# about what one row does. `bf16_rows_exact` checks the pair of sizes at load, and falls back to
# 16 alone (exact by construction) where they differ.
ROW_SIZES = (16, 32)
SETUPS = ("fp32", "fp32-packed", "fp32-window", "bf16", "bf16-fast", "kquant")
DRAFT_SETUPS = ("fp32", "bf16", "int4", "kquant")
INT4_GROUP = 32  # weights per scale and offset in the draft's int4 layers
# fp32-window: products over 2 to this many rows are computed weight-first (verification windows);
# more rows (a prompt's prefill) and one row keep torch's usual product.
WINDOW_ROWS = 32
TARGET_SETUP_ENV = "SPECVIZ_TARGET_SETUP"
DRAFT_SETUP_ENV = "SPECVIZ_DRAFT_SETUP"


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


# ---- the pieces of the bf16 set-up ---------------------------------------------------------


class PackedLinear(torch.nn.Module):
    """A Linear layer (bf16, or fp32) whose weight is packed once for oneDNN's matrix product:
    about as fast for 20 rows as for one, and each row's result the same bits whatever the row
    count, where `sizes` is what `exact_row_sizes` found for this machine."""

    def __init__(self, linear: torch.nn.Linear, sizes: tuple[int, ...] | None = ROW_SIZES,
                 dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.in_features, self.out_features, self.dtype = linear.in_features, linear.out_features, dtype
        # row counts a product may have; None or (): as many as come (a draft need not be exact;
        # an fp32 product may be exact at any count)
        self.sizes = sizes
        weight = linear.weight.detach().to(dtype)
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        self.bias = None if linear.bias is None else linear.bias.detach().to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(self.dtype)
        if not self.sizes:
            return self._product(rows).reshape(*x.shape[:-1], self.out_features)
        count, largest = rows.shape[0], self.sizes[-1]
        size = next((s for s in self.sizes if s >= count), largest)
        padded = size if count <= largest else -(-count // largest) * largest
        if padded != count:
            rows = torch.cat([rows, rows.new_zeros(padded - count, self.in_features)])
        out = torch.cat([self._product(block) for block in rows.split(largest)])[:count]
        return out.reshape(*x.shape[:-1], self.out_features)

    def _product(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        kind = "bf16" if self.dtype == torch.bfloat16 else "fp32"
        return f"in_features={self.in_features}, out_features={self.out_features}, {kind} packed for oneDNN"


class WindowLinear(torch.nn.Module):
    """An fp32 Linear layer whose product over a few rows is computed weight-first, weight @ rows.T:
    the same sum, without the repacking of the whole weight that torch's few-row product pays on
    every call on some CPUs. It holds the layer's own weight and bias: no copy."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if not 1 < rows.shape[0] <= WINDOW_ROWS:
            return F.linear(x, self.weight, self.bias)
        if self.bias is None:
            out = (self.weight @ rows.T).T
        else:
            out = torch.addmm(self.bias[:, None], self.weight, rows.T).T
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, windows weight-first"


class CastLinear(torch.nn.Module):
    """A Linear layer kept in bf16 for a CPU without native bf16: one row (a draft's every call) in
    bf16, which reads half the bytes of fp32; more rows (the prompt's prefill) in fp32 on a copy made
    for the call, since torch's bf16 product there costs in proportion to its rows (a 200-token
    prefill of the real pair's draft: 7.9 s in bf16, 2.0 s in fp32)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = torch.nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)
        self.bias = None if linear.bias is None else torch.nn.Parameter(
            linear.bias.detach().to(torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.reshape(-1, self.in_features).shape[0] == 1:
            return F.linear(x.to(torch.bfloat16), self.weight, self.bias)
        bias = None if self.bias is None else self.bias.float()
        return F.linear(x.float(), self.weight.float(), bias).to(torch.bfloat16)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bf16, prefill in fp32"


class RowInt8Linear(torch.nn.Module):
    """torch's dynamic int8 Linear with a row's bits independent of the call: a call of up to
    `rows` rows is computed one row at a time, so each row's activations get the scale that a
    one-token call gives them (the dynamic product picks one scale per call). A longer call (only
    the prompt's prefill, drafters.ModelDrafter) is one product, as before: it is the same call in every run."""

    def __init__(self, quantized: torch.nn.Module, rows: int = 32):
        super().__init__()
        self.quantized = quantized
        self.rows = rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if flat.shape[0] == 1 or flat.shape[0] > self.rows:
            return self.quantized(x)
        out = torch.cat([self.quantized(row) for row in flat.split(1)])
        return out.reshape(*x.shape[:-1], out.shape[-1])


def to_row_int8(model: torch.nn.Module, rows: int = 32) -> None:
    """In place: every dynamic int8 Linear computes calls of up to `rows` rows row by row, and
    attention runs one query row at a time: the model is then row-exact for such calls."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, DynamicInt8Linear):
                setattr(module, name, RowInt8Linear(child, rows))
    use_row_attention(model)


def draft_rows_exact(draft: torch.nn.Module) -> bool:
    """Whether the draft, as set up, reads several tokens in a call with each row's logits the bits
    of a call of its own (windows of 8 and 24 after 16 tokens): then it may catch up on a round's
    backlog in one call (drafters.ModelDrafter). Checked on the draft itself: a second or two."""
    return rows_exact(draft, context=16, window=8) and rows_exact(draft, context=16, window=24)


class Int4Linear(torch.nn.Module):
    """A Linear layer stored in 4 bits for a draft: each group of INT4_GROUP weights of a row as
    0..15 with a bf16 scale and offset (w = (q - 8) x scale + offset, the layout of torch's int4
    weight-only kernel), products in bf16. A quarter of bf16's bytes, so a one-row product, which
    reads every weight once, costs about half of bf16's. Lossy, which a draft may be: only its
    guesses' agreement with the target matters, checked on the study's answers."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach().float()
        groups = weight.reshape(self.out_features, self.in_features // INT4_GROUP, INT4_GROUP)
        low, high = groups.amin(-1), groups.amax(-1)
        scale = ((high - low) / 15).clamp(min=torch.finfo(torch.bfloat16).tiny)
        q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32)
        self.packed = torch._convert_weight_to_int4pack_for_cpu(q.reshape(self.out_features, self.in_features), 1)
        self.scales_and_offsets = torch.stack([scale, low + 8 * scale], -1).transpose(0, 1).contiguous().to(
            torch.bfloat16)  # (groups, out, 2), as the kernel reads them
        self.bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)

    @staticmethod
    def fits(linear: torch.nn.Linear) -> bool:
        """The kernel's shapes: whole groups along a row, and rows in multiples of 16."""
        return linear.in_features % INT4_GROUP == 0 and linear.out_features % 16 == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        out = torch._weight_int4pack_mm_for_cpu(rows, self.packed, INT4_GROUP, self.scales_and_offsets)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 in groups of {INT4_GROUP}"


def window_products_pay(model: torch.nn.Module, rows: int = 8, repeats: int = 5) -> bool:
    """Whether weight-first products over a window are clearly faster than torch's usual ones on
    this machine, timed on the model's widest Linear layer but its output layer (a few ms)."""
    widest = _widest_linear(model, but=model.get_output_embeddings())
    if widest is None:
        return False
    x = torch.randn(rows, widest.in_features, dtype=widest.weight.dtype)
    with torch.inference_mode():
        ms = timed_in_turns({"usual": lambda: F.linear(x, widest.weight),
                             "weight first": lambda: widest.weight @ x.T}, repeats)
    return ms["weight first"] < 0.8 * ms["usual"]


def fp32_packing_pays(model: torch.nn.Module, rows: int = 8, repeats: int = 5) -> bool:
    """Whether oneDNN's packed fp32 product over one row and over `rows` takes less time, the two
    together, than torch's usual product on this machine, timed on the model's widest Linear layer
    but its output layer (a few ms). Both rows count: a round checks a window, then target-only and
    the plain rounds pass one token."""
    widest = _widest_linear(model, but=model.get_output_embeddings())
    if widest is None:
        return False
    packed = PackedLinear(widest, (), torch.float32)
    one, window = torch.randn(1, widest.in_features), torch.randn(rows, widest.in_features)
    with torch.inference_mode():
        ms = timed_in_turns({"usual one": lambda: F.linear(one, widest.weight),
                             "usual window": lambda: F.linear(window, widest.weight),
                             "packed one": lambda: packed(one), "packed window": lambda: packed(window)}, repeats)
    return ms["packed one"] + ms["packed window"] < ms["usual one"] + ms["usual window"]


def bf16_one_row_pays(model: torch.nn.Module, repeats: int = 5) -> bool:
    """Whether a one-row product in bf16 is clearly faster than in fp32 here (the draft's every call
    is one row), timed on the model's widest Linear layer."""
    widest = _widest_linear(model)
    if widest is None or widest.weight.dtype != torch.float32:
        return False
    x, half = torch.randn(1, widest.in_features), widest.weight.to(torch.bfloat16)
    with torch.inference_mode():
        ms = timed_in_turns({"fp32": lambda: F.linear(x, widest.weight),
                             "bf16": lambda: F.linear(x.to(torch.bfloat16), half)}, repeats)
    return ms["bf16"] < 0.8 * ms["fp32"]


def int4_one_row_pays(model: torch.nn.Module, native_bf16: bool, repeats: int = 5) -> bool:
    """Whether a one-row product in int4 is clearly faster here than in the bf16 the draft would
    otherwise get (packed for oneDNN where the CPU has native bf16, torch's plain kernel elsewhere),
    timed on the model's widest Linear layer that int4 fits (a second or two). The widest, because
    a layer that fits in the CPU's cache times as compute, and the whole draft, far larger than
    any cache, runs as memory traffic: the real draft's 4864x896 projection timed int4 and bf16
    alike (0.15 vs 0.16-0.22 ms), its 151936x896 output layer 4.6 vs 14-15 ms, its whole call
    30-35 vs 70-76 ms (an AVX512-BF16 EPYC)."""
    if not hasattr(torch, "_weight_int4pack_mm_for_cpu"):
        return False
    widest = _widest_linear(model, fits=Int4Linear.fits)
    if widest is None:
        return False
    x = torch.randn(1, widest.in_features)
    int4, bf16 = Int4Linear(widest), PackedLinear(widest, None) if native_bf16 else CastLinear(widest)
    with torch.inference_mode():
        ms = timed_in_turns({"int4": lambda: int4(x), "bf16": lambda: bf16(x)}, repeats)
    return ms["int4"] < 0.8 * ms["bf16"]


def _widest_linear(model: torch.nn.Module, but: torch.nn.Module | None = None,
                   fits: Callable[[torch.nn.Linear], bool] = lambda m: True) -> torch.nn.Linear | None:
    """The model's Linear layer with the most weights (`but` left out, only those a kernel `fits`):
    where a kernel's cost shows."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not but and fits(m)]
    return max(layers, key=lambda m: m.weight.numel(), default=None)


def timed_in_turns(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each call's median milliseconds after one untimed warm-up (the first call at a new shape sets up
    its kernels), timed in turns: every repeat runs every call once, in alternating order. A shared
    machine has busy seconds; timed one call's repeats after another's, such a second falls on one
    call alone (seen in the cost curve, decoding/costcurve.py: a pass over 2 tokens priced at 1.55
    one-token passes, over 4 at 1.54, where runs then paid 1.1-1.3, which kept the cost-aware rule
    plain for a whole run). In turns it falls on all of them alike, and their ratios hold: the set-up
    checks here compare kernels by them, the cost curve prices windows."""
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


def to_window_products(model: torch.nn.Module) -> None:
    """In place: every Linear computes its windows weight-first, the output layer too (a
    verification pass asks for every row's logits)."""
    _replace_linears(model, WindowLinear)


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


def to_bf16_packed(model: torch.nn.Module, sizes: tuple[int, ...] | None = ROW_SIZES) -> None:
    """In place: every Linear packed in bf16, everything else (embeddings, norms) cast to bf16.
    One layer at a time, giving the freed memory back as it goes: the real pair's target peaked
    at 12.9 GB of RSS converted at once (its fp32 weights, the packed copies and about 3 GB of
    freed bf16 copies the C allocator kept), against the 16 GB of a free CPU Space."""
    _replace_linears(model, lambda linear: PackedLinear(linear, sizes))
    model.to(torch.bfloat16)
    _give_back_memory()


def to_fp32_packed(model: torch.nn.Module, sizes: tuple[int, ...] | None = ()) -> None:
    """In place: every Linear packed in fp32 for oneDNN (the output layer too: a verification pass
    asks for every row's logits); the rest of the model as it is."""
    _replace_linears(model, lambda linear: PackedLinear(linear, sizes, torch.float32))


def _replace_linears(model: torch.nn.Module, make) -> None:
    parents = [module for module in model.modules() if any(
        isinstance(child, torch.nn.Linear) for child in module.children())]
    for module in parents:
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, make(child))
        del child
        _give_back_memory(collect=False)  # a replaced layer's weights go with its last reference
    del parents
    _give_back_memory()


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
    _give_back_memory()


def _give_back_memory(collect: bool = True) -> None:
    """Return the C heap's freed memory to the system (glibc keeps it otherwise); no-op elsewhere.
    `collect` first frees what only reference cycles hold: a full collection takes 0.2 s with a
    model loaded, so a loop over layers asks for it once at its end (55 of them took 11 s at load)."""
    if collect:
        gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def use_row_attention(model: torch.nn.Module) -> None:
    _register_row_attention()
    model.set_attn_implementation(ROW_ATTENTION)


# ---- choosing ------------------------------------------------------------------------------


def wanted(env: str, environ: Mapping[str, str] | None = None) -> str:
    """The set-up an environment variable asks for: one of SETUPS (the target's) or DRAFT_SETUPS, or
    auto (unset or anything else)."""
    value = settings.read(env, environ).lower()
    return value if value in (*SETUPS, *DRAFT_SETUPS) else "auto"


def rows_exact(model: torch.nn.Module, context: int = 40, window: int = 8, seed: int = 0) -> bool:
    """Whether the model's logits for a row are the same bits in a pass over `window` new tokens
    as in one-token passes, after `context` tokens: the property the lossless check rests on."""
    from .kvcache import new_cache

    generator = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (1, context + window), generator=generator)
    with torch.inference_mode():
        one_pass = new_cache(model.config)
        model(input_ids=ids[:, :context], cache=one_pass, use_cache=True)
        together = model(input_ids=ids[:, context:], cache=one_pass, use_cache=True).logits[0]
        one_by_one = new_cache(model.config)
        model(input_ids=ids[:, :context], cache=one_by_one, use_cache=True)
        apart = torch.cat([model(input_ids=ids[:, context + i: context + i + 1], cache=one_by_one,
                                 use_cache=True).logits[0] for i in range(window)])
    return torch.equal(together, apart)


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


def exact_row_sizes(model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> tuple[int, ...] | None:
    """The row counts with which the packed set-up in `dtype` is row-exact for this model's shapes
    on this machine: for fp32 first any count (`()`, no padding), then ROW_SIZES, else its smallest
    alone, else None. Checked on a one-layer probe, a window of 8 (one product of 16 rows) and one
    of 24 (32 rows) against one-token passes (16 rows)."""
    candidates = ((), ROW_SIZES, ROW_SIZES[:1]) if dtype == torch.float32 else (ROW_SIZES, ROW_SIZES[:1])
    for sizes in candidates:
        probe = probe_of(model)
        if dtype == torch.float32:
            to_fp32_packed(probe, sizes)
        else:
            to_bf16_packed(probe, sizes)
        use_row_attention(probe)
        exact = rows_exact(probe, window=8) and rows_exact(probe, window=24)
        del probe
        _give_back_memory()
        if exact:
            return sizes
    return None


@dataclass(frozen=True)
class Choice:
    setup: str  # target: fp32, fp32-packed, fp32-window, bf16, bf16-fast or kquant; draft: fp32, bf16 or bf16-cast
    why: str  # one clause for the model line and the logs
    sizes: tuple[int, ...] | None = ROW_SIZES  # packed: the row counts of every product (see ROW_SIZES; (): any)
    kernel: Path | None = None  # kquant: the compiled kernel


# ---- the K-quant set-up: the GGUF's own codes (kquant.py) ------------------------------------


def kquant_kernel(found: Machine, cache: Path) -> tuple[Path | None, str]:
    """The K-quant kernel built for this machine, or None and why not."""
    if not kquant.cpu_can(found.flags):
        return None, f"need {' or '.join(kquant.NEEDS)}, which this CPU lacks"
    try:
        return kquant.build(cache, found.flags), ""
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        return None, f"need their kernel, which did not build ({str(error)[:120]})"


PROBE_VOCAB = 512


def kquant_rows_exact(model: torch.nn.Module, kernel: Path) -> bool:
    """Whether the K-quant set-up gives a row the same bits in a window as alone, on this machine:
    checked on a one-layer probe whose Linear layers get random Q4_K codes of the same shapes (but
    for a vocabulary of PROBE_VOCAB: each tile of 16 output channels runs the same operations
    however many there are, and threads split tiles, never a sum)."""
    probe = probe_of(model, vocab=PROBE_VOCAB)
    generator = np.random.default_rng(0)

    def random_codes(linear: torch.nn.Linear) -> torch.nn.Module:
        if not kquant.fits(linear.out_features, linear.in_features):
            return linear
        raw = kquant.random_blocks(kquant.Q4_K, linear.out_features, linear.in_features, generator)
        return kquant.KQuantLinear(kquant.pack(kquant.Q4_K, raw, linear.out_features, linear.in_features),
                                   linear.bias, kernel)

    _replace_linears(probe, random_codes)
    use_row_attention(probe)
    return rows_exact(probe, window=8) and rows_exact(probe, window=24)


def kquant_pays(model: torch.nn.Module, packed: Mapping[str, kquant.Packed], kernel: Path, native_bf16: bool,
                repeats: int = 5) -> bool:
    """Whether the K-quant kernel is faster here than the set-up the target would otherwise get,
    timed on the model's widest packed layer for one row and for a window of 8 (a second or two)."""
    linears = [name for name in packed if kquant.JOIN not in name
               and isinstance(model.get_submodule(name), torch.nn.Linear)]
    if not linears:
        return True
    name = max(linears, key=lambda n: packed[n].out_features * packed[n].in_features)
    linear = model.get_submodule(name)
    quant = kquant.KQuantLinear(packed[name], linear.bias, kernel)
    other = PackedLinear(linear) if native_bf16 else WindowLinear(linear)
    one, window = torch.randn(1, linear.in_features), torch.randn(8, linear.in_features)
    with torch.inference_mode():
        ms = timed_in_turns({"mine one": lambda: quant(one), "mine window": lambda: quant(window),
                             "theirs one": lambda: other(one), "theirs window": lambda: other(window)}, repeats)
    return ms["mine one"] + ms["mine window"] < ms["theirs one"] + ms["theirs window"]


def kquant_draft_pays(draft: torch.nn.Module, kernel: Path, repeats: int = 5) -> bool:
    """Whether SpecViz's own 4-bit codes on the K-quant kernel beat torch's int4 kernel for one row
    here (a draft's every call), timed on the draft's widest Linear layer that both fit."""
    block = kquant.BLOCK[kquant.Q4]
    widest = _widest_linear(draft, fits=lambda m: kquant.fits(m.out_features, m.in_features, block)
                            and Int4Linear.fits(m))
    if widest is None:
        return False
    x = torch.randn(1, widest.in_features)
    mine = kquant.KQuantLinear(kquant.quantize(widest.weight), widest.bias, kernel)
    if not hasattr(torch, "_weight_int4pack_mm_for_cpu"):
        return True
    theirs = Int4Linear(widest)
    with torch.inference_mode():
        ms = timed_in_turns({"mine": lambda: mine(x), "theirs": lambda: theirs(x)}, repeats)
    return ms["mine"] < ms["theirs"]


def to_kquant(model: torch.nn.Module, packed: Mapping[str, kquant.Packed], kernel: Path) -> int:
    """In place: every Linear layer the GGUF stored in K-quants runs on its codes (layers stored
    joined, which read one input, as one call: kquant.KQuantPart), and the token embeddings, where
    the GGUF stored them so, are looked up from theirs; the rest (norms, biases, attention) stays as
    loaded. One table at a time, giving the fp32 weights back as it goes. Returns how many tables."""
    def put(name: str, module: torch.nn.Module) -> None:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, module)

    for name, layer in packed.items():
        olds = [model.get_submodule(part) for part in name.split(kquant.JOIN)]
        if isinstance(olds[0], torch.nn.Embedding):
            put(name, kquant.KQuantEmbedding(layer))
        elif len(olds) == 1:
            put(name, kquant.KQuantLinear(layer, olds[0].bias, kernel))
        else:
            biases = [old.bias if old.bias is not None else torch.zeros(old.out_features) for old in olds]
            bias = None if all(old.bias is None for old in olds) else torch.cat(biases)
            joint, start = kquant.KQuantLinear(layer, bias, kernel), 0
            for part, old in zip(name.split(kquant.JOIN), olds):
                put(part, kquant.KQuantPart(joint, start, start + old.out_features, len(olds)))
                start += old.out_features
        del olds
    _give_back_memory()
    return len(packed)


def choose_target(model: torch.nn.Module, environ: Mapping[str, str] | None = None,
                  found: Machine | None = None, packed: Mapping[str, kquant.Packed] | None = None,
                  cache: Path | None = None) -> Choice:
    """The target's set-up: its GGUF's K-quant codes where they were kept at set-up (`packed`), the
    CPU has the kernel's instructions, and the set-up is row-exact and faster here; else bf16 where
    the CPU has native bf16 and the set-up is row-exact here; else fp32, weight-first where that pays."""
    asked, found = wanted(TARGET_SETUP_ENV, environ), found or machine()
    why_not = ""
    if asked in ("auto", "kquant"):
        choice, why_not = _choose_kquant(model, asked, found, packed or {}, cache)
        if choice is not None:
            return choice
    choice = _choose_unquantized(model, "auto" if asked == "kquant" else asked, found)
    return replace(choice, why=f"K-quant codes {why_not}; {choice.why}") if why_not else choice


def _choose_kquant(model: torch.nn.Module, asked: str, found: Machine, packed: Mapping[str, kquant.Packed],
                   cache: Path | None) -> tuple[Choice | None, str]:
    """The K-quant set-up where it is possible, exact and (unless forced) faster; else None and why not
    ("" where the model has no packed codes and nobody asked for them: nothing to say then)."""
    if not packed:
        return None, "not kept at set-up" if asked == "kquant" else ""
    kernel, why_not = kquant_kernel(found, cache or Path(tempfile.gettempdir()) / "specviz-kernels")
    if kernel is None:
        return None, why_not
    if not kquant_rows_exact(model, kernel):
        return None, "not row-exact on this CPU"
    if asked == "kquant":
        return Choice("kquant", f"{TARGET_SETUP_ENV}=kquant", None, kernel), ""
    if not kquant_pays(model, packed, kernel, found.native_bf16):
        return None, "measured slower here"
    return Choice("kquant", "the GGUF's own codes, row-exact, measured fastest here", None, kernel), ""


def choose_fp32_target(model: torch.nn.Module, environ: Mapping[str, str] | None = None) -> Choice:
    """An fp32 target's set-up (the bundled pairs'): fp32 packed for oneDNN where that is row-exact
    and measures faster here, else fp32 as loaded. SPECVIZ_TARGET_SETUP=fp32 or fp32-packed forces one."""
    asked = wanted(TARGET_SETUP_ENV, environ)
    if asked == "fp32":
        return Choice("fp32", f"{TARGET_SETUP_ENV}=fp32")
    return _fp32_packed(model, asked) or Choice("fp32", "packed fp32 was not row-exact or not faster here")


def _fp32_packed(model: torch.nn.Module, asked: str) -> Choice | None:
    """fp32 packed for oneDNN where it is row-exact and (unless forced) measures faster; else None."""
    if asked != "fp32-packed" and not fp32_packing_pays(model):
        return None
    sizes = exact_row_sizes(model, torch.float32)
    if sizes is None:
        return None
    why = f"{TARGET_SETUP_ENV}=fp32-packed" if asked == "fp32-packed" else "packed fp32 row-exact, measured faster"
    return Choice("fp32-packed", why, sizes)


def _choose_unquantized(model: torch.nn.Module, asked: str, found: Machine) -> Choice:
    if asked == "fp32":
        return Choice("fp32", f"{TARGET_SETUP_ENV}=fp32")
    if asked == "fp32-window":
        return Choice("fp32-window", f"{TARGET_SETUP_ENV}=fp32-window")
    if asked == "fp32-packed" or not found.native_bf16:
        packed = _fp32_packed(model, asked)
        if packed is not None:
            return replace(packed, why=f"no native bf16 on this CPU; {packed.why}") if asked == "auto" else packed
    if not found.native_bf16:
        if window_products_pay(model):
            return Choice("fp32-window", "no native bf16 on this CPU; weight-first window products measured faster")
        return Choice("fp32", "no native bf16 on this CPU")
    if asked == "bf16-fast":
        return Choice("bf16-fast", f"{TARGET_SETUP_ENV}=bf16-fast, not row-exact", None)
    sizes = exact_row_sizes(model)
    if sizes is None:
        return Choice("fp32", "bf16 was not row-exact on this CPU")
    return Choice("bf16", f"{TARGET_SETUP_ENV}=bf16" if asked == "bf16" else "native bf16, row-exact", sizes)


def choose_draft(environ: Mapping[str, str] | None = None, found: Machine | None = None,
                 draft: torch.nn.Module | None = None, cache: Path | None = None) -> Choice:
    """The draft's set-up: SpecViz's own 4-bit codes on the K-quant kernel where the CPU has its
    instructions and a one-row product measures faster than torch's int4 (row-exact too, so the
    draft may be fed several tokens in one call); else int4 where a one-row int4 product measures
    clearly faster on `draft`'s widths than the bf16 it would otherwise get; else bf16 packed where
    the CPU has native bf16; elsewhere bf16 as cast where a one-row bf16 product measures faster; else fp32."""
    asked, found = wanted(DRAFT_SETUP_ENV, environ), found or machine()
    if asked.startswith("fp32"):  # fp32-window too (pass-costs forces both models alike): a draft reads one row
        return Choice("fp32", f"{DRAFT_SETUP_ENV}={asked}")
    if asked in ("auto", "kquant") and draft is not None and kquant.cpu_can(found.flags):
        kernel, _ = kquant_kernel(found, cache or Path(tempfile.gettempdir()) / "specviz-kernels")
        if kernel is not None and (asked == "kquant" or kquant_draft_pays(draft, kernel)):
            why = f"{DRAFT_SETUP_ENV}=kquant" if asked == "kquant" else "a one-row product measured fastest here"
            return Choice("kquant", why, None, kernel)
    if asked == "int4":
        return Choice("int4", f"{DRAFT_SETUP_ENV}=int4")
    if asked == "auto" and draft is not None and int4_one_row_pays(draft, found.native_bf16):
        return Choice("int4", "a one-row int4 product measured faster than bf16 on this CPU")
    if found.native_bf16:
        return Choice("bf16", f"{DRAFT_SETUP_ENV}=bf16" if asked == "bf16" else "native bf16")
    if asked == "bf16":
        return Choice("bf16-cast", f"{DRAFT_SETUP_ENV}=bf16, no native bf16")
    if draft is not None and bf16_one_row_pays(draft):
        return Choice("bf16-cast", "no native bf16 on this CPU; a one-row bf16 product measured faster")
    return Choice("fp32", "no native bf16 on this CPU")


def prepare_target(model: torch.nn.Module, setup: str, sizes: tuple[int, ...] | None = ROW_SIZES,
                   packed: Mapping[str, kquant.Packed] | None = None, kernel: Path | None = None) -> str:
    """Set the target up in place; returns what runs, for the model line. "bf16-fast" (only when
    forced, for measuring) is bf16 with packed weights and transformers' attention: the fastest
    one-token pass, but not row-exact, so lossless only by luck of rounding."""
    if setup == "kquant":
        to_kquant(model, packed or {}, kernel)
        own_memory(model)
        use_row_attention(model)
        kinds = "/".join(sorted({layer.kind for layer in (packed or {}).values()}))
        return (f"target {kinds} weights of its GGUF (int8-dot kernel, activations int8 per 256, row-exact "
                "attention)")
    if setup == "bf16":
        to_bf16_packed(model, sizes)
        use_row_attention(model)
        return f"target bf16 (oneDNN-packed weights, products of {' or '.join(map(str, sizes))} rows, row-exact attention)"
    if setup == "bf16-fast":
        to_bf16_packed(model, None)
        return "target bf16 (oneDNN-packed weights, not row-exact)"
    if setup == "fp32-packed":
        to_fp32_packed(model, sizes)
        use_row_attention(model)
        products = f"products of {' or '.join(map(str, sizes))} rows" if sizes else "products of any row count"
        return f"target fp32 (oneDNN-packed weights, {products}, row-exact attention)"
    if setup == "fp32-window":
        to_window_products(model)
        return f"target fp32 (windows of 2-{WINDOW_ROWS} tokens computed weight-first)"
    return f"target {_dtype_name(model)} (torch's kernels)"


def prepare_draft(model: torch.nn.Module, setup: str, kernel: Path | None = None) -> str:
    if setup == "kquant":
        block = kquant.BLOCK[kquant.Q4]
        codes = {name: kquant.quantize(module.weight) for name, module in model.named_modules()
                 if isinstance(module, torch.nn.Linear) and kquant.fits(module.out_features, module.in_features, block)}
        # joined as the target's are (one call for q/k/v, one for gate/up): a draft call is 24 layers
        # of small products, where each call's own cost (quantizing the rows, ctypes) shows
        to_kquant(model, kquant.with_shared_inputs_joined(codes), kernel)
        del codes
        own_memory(model)
        use_row_attention(model)  # one call over several tokens then gives each the bits of its own call
        return (f"draft 4-bit (SpecViz's own codes in groups of {kquant.GROUP[kquant.Q4]}, the K-quant kernel, "
                "row-exact)")
    if setup == "bf16":
        to_bf16_packed(model, sizes=None)  # fed one token per call (drafters.ModelDrafter): nothing to pad
        return "draft bf16 (oneDNN-packed weights)"
    if setup == "bf16-cast":
        _replace_linears(model, CastLinear)
        model.to(torch.bfloat16)
        _give_back_memory()
        return "draft bf16 (torch's kernels; its prompt prefill in fp32)"
    if setup == "int4":
        _replace_linears(model, lambda linear: Int4Linear(linear) if Int4Linear.fits(linear) else linear)
        model.to(torch.bfloat16)  # what int4 does not fit, and the embeddings and norms
        _give_back_memory()
        return f"draft int4 (weights in groups of {INT4_GROUP}, bf16 activations)"
    return f"draft {_dtype_name(model)}"


def _dtype_name(model: torch.nn.Module) -> str:
    dtype = next(model.parameters()).dtype
    return {torch.float32: "fp32", torch.bfloat16: "bf16"}.get(dtype, str(dtype).removeprefix("torch."))
