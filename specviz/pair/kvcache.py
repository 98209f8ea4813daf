"""The KV cache both models read and extend: transformers' DynamicCache with its full-attention layers
writing into a buffer with room to grow.

Why: DynamicCache appends a pass's keys and values with torch.cat, which copies the layer's whole
cache every pass (the real pair's target: 56 copies a token, 1-2 ms of a 55 ms pass at a few hundred
tokens), and a crop after a rejected draft keeps a view that the next pass copies again. Here a pass
writes its rows in place and a crop only moves the end. Attention reads the same values through a
view, so every result is the same bits as with DynamicCache (tests/test_kvcache.py checks it).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

ROOM = 256  # positions a buffer starts with; it doubles when full


class GrowingLayer(DynamicLayer):
    """One layer's keys and values, (batch, heads, positions, dim), in buffers longer than `length`."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.length = 0
        self.key_buffer = self.value_buffer = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args,
               **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2] if self.is_initialized else key_states.shape[-2]
        self.reserve(end, key_states, value_states)
        self.key_buffer[..., self.length:end, :] = key_states
        self.value_buffer[..., self.length:end, :] = value_states
        self.end_at(end)
        return self.keys, self.values

    def reserve(self, end: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Room for `end` positions in the buffers, shaped and typed as a pass's keys and values:
        `update` writes its rows there, as does a caller that writes them itself (a fused pass,
        which then moves the end with `end_at`)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.key_buffer is None or end > self.key_buffer.shape[-2]:
            self.key_buffer, self.value_buffer = (self._grown(buffer, states, end) for buffer, states in
                                                  ((self.key_buffer, key_states), (self.value_buffer, value_states)))

    def _grown(self, buffer: torch.Tensor | None, states: torch.Tensor, end: int) -> torch.Tensor:
        size = max(end, ROOM, 2 * (0 if buffer is None else buffer.shape[-2]))
        grown = states.new_empty((*states.shape[:-2], size, states.shape[-1]))
        if buffer is not None:
            grown[..., :self.length, :] = buffer[..., :self.length, :]
        return grown

    def end_at(self, length: int) -> None:
        """The cache holds the first `length` positions of its buffers."""
        self.length = length
        self.keys, self.values = self.key_buffer[..., :length, :], self.value_buffer[..., :length, :]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last `-tokens_to_remove` positions (transformers 5's convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of positions to remove")
        if tokens_to_remove and self.is_initialized:
            self.end_at(max(0, self.length + tokens_to_remove))


def new_cache(config: object) -> DynamicCache:
    """A DynamicCache for a model of this config whose full-attention layers grow in place (sliding
    window layers, where a model has them, stay transformers' own)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
