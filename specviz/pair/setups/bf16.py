"""bf16: `bf16` packed for oneDNN where the CPU has native bf16, `bf16-fast` for measuring, and
`bf16-cast`, a draft's bf16 where the CPU lacks it.

`bf16`, where the CPU has native bf16 (AMX or AVX512-BF16, and a torch whose oneDNN uses them):
each Linear packed once, at load, for oneDNN (packing.PackedLinear), about as cheap for 20 rows as
for one. The target's products run on cpu.ROW_SIZES rows where that is row-exact here, else on its
smallest alone (packing.exact_row_sizes), with attention one query row at a time; where neither
is row-exact, bf16 passes and the target stays fp32. The draft is fed one token a call
(drafters.ModelDrafter): its products are not padded. Without native bf16 it passes ("no native bf16
on this CPU"), and asked for a draft there it is `bf16-cast`.

`bf16-fast`, the target's, bf16 packed with transformers' attention: the fastest one-token pass,
but not row-exact, so lossless only by luck of rounding. Only ever asked for, for measuring.

`bf16-cast`, a draft's, without native bf16 where a one-row bf16 product times clearly faster than
fp32's (`bf16_one_row_pays`): bf16 as cast (`CastLinear`), its prompt prefill in fp32.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from .. import cpu
from ..cpu import DRAFT, TARGET, Ask, Choice, CpuSetup
from . import packing

NO_NATIVE_BF16 = "no native bf16 on this CPU"


class Bf16(CpuSetup):
    name = "bf16"
    models = frozenset({TARGET, DRAFT})
    summary = ("every Linear packed once for oneDNN in bf16, the target's products on "
               f"{' or '.join(map(str, cpu.ROW_SIZES))} rows and its attention one query row at a time "
               "(row-exact); where the CPU has native bf16 and, for the target, that is row-exact")

    def applies(self, ask: Ask) -> bool:
        return ask.found.native_bf16

    def force(self, ask: Ask) -> Choice | str:
        if ask.role == DRAFT:
            return (Choice(self.name, ask.forced_why) if self.applies(ask)
                    else Choice(BF16_CAST.name, f"{ask.forced_why}, no native bf16"))
        return self._row_exact(ask, ask.forced_why) if self.applies(ask) else NO_NATIVE_BF16

    def choose(self, ask: Ask) -> Choice | str:
        if not self.applies(ask):
            return NO_NATIVE_BF16
        return Choice(self.name, "native bf16") if ask.role == DRAFT else self._row_exact(ask, "native bf16, row-exact")

    def _row_exact(self, ask: Ask, why: str) -> Choice | str:
        sizes = packing.exact_row_sizes(ask.model)
        return "bf16 was not row-exact on this CPU" if sizes is None else Choice(self.name, why, sizes)

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice, packed: Mapping | None = None) -> str:
        if role == DRAFT:
            packing.to_bf16_packed(model, sizes=None)  # fed one token per call (drafters.ModelDrafter): nothing to pad
            return "draft bf16 (oneDNN-packed weights)"
        packing.to_bf16_packed(model, choice.sizes)
        cpu.use_row_attention(model)
        return (f"target bf16 (oneDNN-packed weights, products of {' or '.join(map(str, choice.sizes))} rows, "
                "row-exact attention)")


class Bf16Fast(CpuSetup):
    name = "bf16-fast"
    models = frozenset({TARGET})
    summary = ("every Linear packed once for oneDNN in bf16, transformers' attention: the fastest one-token "
               "pass, not row-exact; only when asked for, where the CPU has native bf16")

    def applies(self, ask: Ask) -> bool:
        return ask.found.native_bf16

    def force(self, ask: Ask) -> Choice | None:
        return Choice(self.name, f"{ask.forced_why}, not row-exact", None) if self.applies(ask) else None

    def choose(self, ask: Ask) -> None:
        return None  # only ever asked for, for measuring

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice, packed: Mapping | None = None) -> str:
        packing.to_bf16_packed(model, None)
        return "target bf16 (oneDNN-packed weights, not row-exact)"


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


def bf16_one_row_pays(model: torch.nn.Module, repeats: int = 5) -> bool:
    """Whether a one-row product in bf16 is clearly faster than in fp32 here (the draft's every call
    is one row), timed on the model's widest Linear layer."""
    widest = cpu.widest_linear(model)
    if widest is None or widest.weight.dtype != torch.float32:
        return False
    x, half = torch.randn(1, widest.in_features), widest.weight.to(torch.bfloat16)
    with torch.inference_mode():
        ms = cpu.timed_in_turns({"fp32": lambda: F.linear(x, widest.weight),
                                 "bf16": lambda: F.linear(x.to(torch.bfloat16), half)}, repeats)
    return ms["bf16"] < 0.8 * ms["fp32"]


class Bf16Cast(CpuSetup):
    name = "bf16-cast"
    models = frozenset({DRAFT})
    summary = ("bf16 as cast, torch's kernels, the prompt's prefill in fp32; without native bf16, where a "
               "one-row product measures clearly faster than fp32's")
    why = "a one-row bf16 product measured faster"

    def applies(self, ask: Ask) -> bool:
        return ask.model is not None and not ask.found.native_bf16

    def pays(self, ask: Ask) -> bool:
        return bf16_one_row_pays(ask.model)

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice, packed: Mapping | None = None) -> str:
        cpu.replace_linears(model, CastLinear)
        model.to(torch.bfloat16)
        cpu.give_back_memory()
        return "draft bf16 (torch's kernels; its prompt prefill in fp32)"


BF16, BF16_FAST, BF16_CAST = Bf16(), Bf16Fast(), Bf16Cast()
