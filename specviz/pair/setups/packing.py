"""Weights packed once for oneDNN, and `fp32-packed`.

A packed Linear (`PackedLinear`, what torch's inductor does when it freezes a model) is about as
cheap for 20 rows as for one. oneDNN picks its kernel, and so its order of summation, by the row
count, so every product runs on one of cpu.ROW_SIZES rows (padded with zeros): `exact_row_sizes`
finds the row counts at which that is row-exact for a model's shapes on this machine (ROW_SIZES,
else its smallest alone; for fp32 first any count), on a one-layer probe. bf16.py packs in bf16.

`fp32-packed`, the target's, without native bf16: each Linear packed once for oneDNN in fp32, where
that is row-exact and its products over one row and over 8 time faster than torch's together
(`fp32_packing_pays`, on the model's widest Linear layer but its output layer). On an AVX2 EPYC
this made a pass over 8 new tokens cost 1.42 one-token passes instead of 1.92, and the one-token
pass itself faster (docs/BENCHMARKS.md). The bundled pairs' fp32 targets get it the same way
(`setups.choose_fp32_target`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from .. import cpu, forward
from ..cpu import ROW_SIZES, TARGET, Ask, Choice, CpuSetup


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


def to_bf16_packed(model: torch.nn.Module, sizes: tuple[int, ...] | None = ROW_SIZES) -> None:
    """In place: every Linear packed in bf16, everything else (embeddings, norms) cast to bf16.
    One layer at a time, giving the freed memory back as it goes: the real pair's target peaked
    at 12.9 GB of RSS converted at once (its fp32 weights, the packed copies and about 3 GB of
    freed bf16 copies the C allocator kept), against the 16 GB of a free CPU Space."""
    cpu.replace_linears(model, lambda linear: PackedLinear(linear, sizes))
    model.to(torch.bfloat16)
    cpu.give_back_memory()


def to_fp32_packed(model: torch.nn.Module, sizes: tuple[int, ...] | None = ()) -> None:
    """In place: every Linear packed in fp32 for oneDNN (the output layer too: a verification pass
    asks for every row's logits); the rest of the model as it is."""
    cpu.replace_linears(model, lambda linear: PackedLinear(linear, sizes, torch.float32))


def exact_row_sizes(model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> tuple[int, ...] | None:
    """The row counts with which the packed set-up in `dtype` is row-exact for this model's shapes
    on this machine: for fp32 first any count (`()`, no padding), then ROW_SIZES, else its smallest
    alone, else None. Checked on a one-layer probe, a window of 8 (one product of 16 rows) and one
    of 24 (32 rows) against one-token passes (16 rows)."""
    candidates = ((), ROW_SIZES, ROW_SIZES[:1]) if dtype == torch.float32 else (ROW_SIZES, ROW_SIZES[:1])
    for sizes in candidates:
        probe = cpu.probe_of(model)
        if dtype == torch.float32:
            to_fp32_packed(probe, sizes)
        else:
            to_bf16_packed(probe, sizes)
        cpu.use_row_attention(probe)
        exact = forward.rows_exact(probe, window=8) and forward.rows_exact(probe, window=24)
        del probe
        cpu.give_back_memory()
        if exact:
            return sizes
    return None


def fp32_packing_pays(model: torch.nn.Module, rows: int = 8, repeats: int = 5) -> bool:
    """Whether oneDNN's packed fp32 product over one row and over `rows` takes less time, the two
    together, than torch's usual product on this machine, timed on the model's widest Linear layer
    but its output layer (a few ms). Both rows count: a round checks a window, then target-only and
    the plain rounds pass one token."""
    widest = cpu.widest_linear(model, but=model.get_output_embeddings())
    if widest is None:
        return False
    packed = PackedLinear(widest, (), torch.float32)
    one, window = torch.randn(1, widest.in_features), torch.randn(rows, widest.in_features)
    with torch.inference_mode():
        ms = cpu.timed_in_turns({"usual one": lambda: F.linear(one, widest.weight),
                                 "usual window": lambda: F.linear(window, widest.weight),
                                 "packed one": lambda: packed(one), "packed window": lambda: packed(window)},
                                repeats)
    return ms["packed one"] + ms["packed window"] < ms["usual one"] + ms["usual window"]


class Fp32Packed(CpuSetup):
    name = "fp32-packed"
    models = frozenset({TARGET})
    summary = ("fp32, every Linear packed once for oneDNN, attention one query row at a time (row-exact); "
               "without native bf16, where row-exact and measured faster")
    why = "packed fp32 row-exact, measured faster"
    stand_in = "fp32"

    def applies(self, ask: Ask) -> bool:
        return not ask.found.native_bf16

    def pays(self, ask: Ask) -> bool:
        return fp32_packing_pays(ask.model)

    def force(self, ask: Ask) -> Choice | None:
        return self.take(ask.model, ask.forced_why, measured=False)

    def choose(self, ask: Ask) -> Choice | None:
        return self.take(ask.model, self.why) if self.applies(ask) else None

    def take(self, model: torch.nn.Module, why: str, measured: bool = True) -> Choice | None:
        """It, where it is row-exact for the model here and (`measured`) measures faster; else None."""
        if measured and not fp32_packing_pays(model):
            return None
        sizes = exact_row_sizes(model, torch.float32)
        return None if sizes is None else Choice(self.name, why, sizes)

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice, packed: Mapping | None = None) -> str:
        to_fp32_packed(model, choice.sizes)
        cpu.use_row_attention(model)
        products = (f"products of {' or '.join(map(str, choice.sizes))} rows" if choice.sizes
                    else "products of any row count")
        return f"target fp32 (oneDNN-packed weights, {products}, row-exact attention)"


FP32_PACKED = Fp32Packed()
