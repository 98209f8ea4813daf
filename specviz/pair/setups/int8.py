"""The bundled int8 draft made row-exact: not a set-up chosen at load (no entry in SETUPS), but
what `models.int8_draft` does to the target's dynamic int8 copy, the default preset's draft.

torch's dynamic int8 product picks one scale for a call's activations, so a row's bits depend on
the rows that came with it. Computed one row at a time for calls of up to rows.CATCH_UP_ROWS rows
(`RowInt8Linear`), with attention one query row at a time, the draft is row-exact for the calls a
round's catch-up makes (drafters.ModelDrafter).
"""

from __future__ import annotations

import torch

from .. import cpu


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
    cpu.use_row_attention(model)
