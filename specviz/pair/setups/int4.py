"""int4: a draft's weights in 4 bits (`Int4Linear`), on torch's int4 weight-only kernel.

A draft's one-token call reads every weight once, so its price is its weights' bytes. Taken in its
turn only where nothing is asked for, and where a one-row int4 product times clearly faster than
the bf16 the draft would otherwise get (`int4_one_row_pays`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .. import cpu
from ..cpu import DRAFT, Ask, Choice, CpuSetup
from .bf16 import CastLinear
from .packing import PackedLinear

INT4_GROUP = 32  # weights per scale and offset in the draft's int4 layers


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
    widest = cpu.widest_linear(model, fits=Int4Linear.fits)
    if widest is None:
        return False
    x = torch.randn(1, widest.in_features)
    int4, bf16 = Int4Linear(widest), PackedLinear(widest, None) if native_bf16 else CastLinear(widest)
    with torch.inference_mode():
        ms = cpu.timed_in_turns({"int4": lambda: int4(x), "bf16": lambda: bf16(x)}, repeats)
    return ms["int4"] < 0.8 * ms["bf16"]


class Int4(CpuSetup):
    name = "int4"
    models = frozenset({DRAFT})
    summary = (f"weights in 4 bits, groups of {INT4_GROUP} with a bf16 scale and offset, bf16 activations; "
               "where a one-row product measures clearly faster than the bf16 it would otherwise get")
    why = "a one-row int4 product measured faster than bf16 on this CPU"
    unasked_only = True

    def applies(self, ask: Ask) -> bool:
        return ask.model is not None

    def pays(self, ask: Ask) -> bool:
        return int4_one_row_pays(ask.model, ask.found.native_bf16)

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice, packed: Mapping | None = None) -> str:
        cpu.replace_linears(model, lambda linear: Int4Linear(linear) if Int4Linear.fits(linear) else linear)
        model.to(torch.bfloat16)  # what int4 does not fit, and the embeddings and norms
        cpu.give_back_memory()
        return f"draft int4 (weights in groups of {INT4_GROUP}, bf16 activations)"


INT4 = Int4()
