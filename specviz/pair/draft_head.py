"""The draft's smaller output layer itself: a Linear over the kept rows that gives full-vocabulary
logits, -inf outside them. Which rows, and why that helps: pair/vocab.py.

Put in before the draft's precision set-up (models._load_preset), which then converts `linear`
like any other Linear layer, the kept rows as it would have converted them in the full layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..errors import SpecVizError
from .vocab import FULL, VOCAB_ENV


class KeptVocabHead(torch.nn.Module):
    """An output layer over some of the vocabulary's rows (`kept`, ascending): logits for those from
    a Linear of their weights (`linear`), -inf for every other id, in a tensor as wide as the full
    layer's. Whatever reads the logits is unchanged: the softmax over them is the softmax over the
    kept rows, and a dropped id's probability is 0."""

    def __init__(self, full: torch.nn.Linear, kept: Sequence[int] | np.ndarray | torch.Tensor):
        super().__init__()
        weight = full.weight.detach()
        kept = torch.as_tensor(np.asarray(kept), dtype=torch.long, device=weight.device)
        self.in_features, self.out_features = full.in_features, full.out_features
        self.register_buffer("kept", kept, persistent=False)
        self.linear = torch.nn.Linear(full.in_features, len(kept), bias=full.bias is not None,
                                      device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            self.linear.weight.copy_(weight[kept])  # a copy: the full layer (tied to the embeddings) stays
            if full.bias is not None:
                self.linear.bias.copy_(full.bias.detach()[kept])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        some = self.linear(x)
        out = some.new_full((*some.shape[:-1], self.out_features), float("-inf"))
        return out.index_copy_(-1, self.kept, some)

    def extra_repr(self) -> str:
        return f"kept {len(self.kept)} of {self.out_features} rows"


def keep_rows(model: torch.nn.Module, kept: Sequence[int] | np.ndarray | torch.Tensor) -> KeptVocabHead:
    """In place: the model's output layer (a Linear) replaced by one over the `kept` rows."""
    full = model.get_output_embeddings()
    if not isinstance(full, torch.nn.Linear):
        raise SpecVizError(f"The draft's output layer is a {type(full).__name__}, not a Linear: set "
                           f"{VOCAB_ENV}={FULL}.")
    head = KeptVocabHead(full, kept)
    model.set_output_embeddings(head)
    return head


def output_rows(model: torch.nn.Module) -> int:
    """How many rows (token ids) the model's output layer has."""
    output = model.get_output_embeddings()
    return int(getattr(output, "out_features", None) or output.weight.shape[0])
