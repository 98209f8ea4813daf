"""fp32 as loaded, and fp32 with its windows computed weight-first: the set-ups that keep the
model's own fp32 weights.

`fp32`, either model's, as loaded, torch's kernels: the last of every model's turns, taken wherever
nothing better was; its reason is why the others passed ("no native bf16 on this CPU"). Named in
a draft's setting, `fp32-window` and `fp32-packed` stand for it (pass-costs forces both models
alike; a draft's call reads one row).

`fp32-window`, the target's, without native bf16 (there torch's bf16 product costs in proportion to
its rows), where it times clearly faster: products over 2 to WINDOW_ROWS rows computed
weight-first, weight @ rows.T, the same sum, for which MKL streams the weight once instead of
repacking it (`WindowLinear`, on the same weights). Not row-exact: lossless stays what it was in
fp32. Timed on the model's widest Linear layer but its output layer, over 8 rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from .. import cpu
from ..cpu import DRAFT, TARGET, Ask, Choice, CpuSetup

# products over 2 to this many rows are computed weight-first (verification windows); more rows
# (a prompt's prefill) and one row keep torch's usual product.
WINDOW_ROWS = 32


class Fp32(CpuSetup):
    name = "fp32"
    models = frozenset({TARGET, DRAFT})
    summary = "as loaded, torch's kernels; where nothing else was taken"

    def choose(self, ask: Ask) -> Choice:
        return Choice(self.name, "")  # taken, for the reasons the set-ups before it passed

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice, packed: Mapping | None = None) -> str:
        dtype = cpu.dtype_name(model)
        return f"target {dtype} (torch's kernels)" if role == TARGET else f"draft {dtype}"


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


def to_window_products(model: torch.nn.Module) -> None:
    """In place: every Linear computes its windows weight-first, the output layer too (a
    verification pass asks for every row's logits)."""
    cpu.replace_linears(model, WindowLinear)


def window_products_pay(model: torch.nn.Module, rows: int = 8, repeats: int = 5) -> bool:
    """Whether weight-first products over a window are clearly faster than torch's usual ones on
    this machine, timed on the model's widest Linear layer but its output layer (a few ms)."""
    widest = cpu.widest_linear(model, but=model.get_output_embeddings())
    if widest is None:
        return False
    x = torch.randn(rows, widest.in_features, dtype=widest.weight.dtype)
    with torch.inference_mode():
        ms = cpu.timed_in_turns({"usual": lambda: F.linear(x, widest.weight),
                                 "weight first": lambda: widest.weight @ x.T}, repeats)
    return ms["weight first"] < 0.8 * ms["usual"]


class Fp32Window(CpuSetup):
    name = "fp32-window"
    models = frozenset({TARGET})
    summary = (f"fp32, products over 2-{WINDOW_ROWS} rows computed weight-first (not row-exact); without "
               "native bf16, where measured clearly faster")
    why = "weight-first window products measured faster"
    stand_in = "fp32"

    def applies(self, ask: Ask) -> bool:
        return not ask.found.native_bf16

    def pays(self, ask: Ask) -> bool:
        return window_products_pay(ask.model)

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice, packed: Mapping | None = None) -> str:
        to_window_products(model)
        return f"target fp32 (windows of 2-{WINDOW_ROWS} tokens computed weight-first)"


FP32, FP32_WINDOW = Fp32(), Fp32Window()
