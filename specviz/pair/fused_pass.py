"""A K-quant model's decoder layers in one C call (kquant_pass.h), for its one-token passes above all.

Why: the real pair's draft reads its weights once per drafted token, and on an AMD EPYC with
AVX-512 (2 cores) its one-token call took 16.5 ms, of which the kernel's products were 8.9 ms (at
the machine's read bandwidth) and the rest was Python and torch's dispatch around them: 24 layers of
thirty-odd small operations. Here the layers run in one call; forward.py keeps the embedding, the
rotary table, the final norm and the output layer.

The pass is row-exact (a call over n tokens gives each the bits of its own one-token call, which
the feeding protocol's catch-up in one call needs), but not the bits of torch's layers: a model
runs it for every call or for none, so its guesses stay a function of the text. That suits a draft,
whose numbers need equal nothing (the target decides every token); the target keeps torch's
layers, the same bits as transformers' (tests/test_forward.py).

`attach` gives a model the pass where every layer is Llama-shaped on the K-quant kernel (q/k/v and
gate/up joined, kquant.KQuantPart) and its cache grows in place (kvcache.GrowingLayer).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from . import kquant

ATTRIBUTE = "specviz_fused_layers"  # where a model keeps its pass (forward.logits looks for it)


class _Layer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in ("N", "K", "G", "block", "bits", "tiles_from_rows")] + [
        (name, ctypes.c_void_p) for name in ("codes", "sc", "mn", "d", "dmin", "bias")]


class _Block(ctypes.Structure):
    _fields_ = [("norm1", ctypes.c_void_p), ("norm2", ctypes.c_void_p), ("qkv", _Layer), ("o", _Layer),
                ("gate_up", _Layer), ("down", _Layer), ("keys", ctypes.c_void_p), ("values", ctypes.c_void_p),
                ("capacity", ctypes.c_int)]


def _layer(linear: kquant.KQuantLinear) -> _Layer:
    out, inputs, group, block, bits, *pointers = linear._layer
    return _Layer(out, inputs, group, block, bits, linear.tiles_from_rows, *pointers, linear._bias or None)


def _joint(parts: list[torch.nn.Module], widths: list[int]) -> kquant.KQuantLinear | None:
    """The one KQuantLinear behind `parts`, where they take its columns in this order and widths."""
    if not all(isinstance(part, kquant.KQuantPart) for part in parts):
        return None
    joint, start = parts[0].joint, 0
    for part, width in zip(parts, widths):
        if part.joint is not joint or (part.start, part.stop) != (start, start + width):
            return None
        start += width
    return joint if start == joint.out_features else None


class FusedLayers:
    """A model's decoder layers as one `kq_decoder_pass` call (see the module's docstring)."""

    def __init__(self, model: torch.nn.Module, library: Path, blocks: list[tuple], keep: list[torch.Tensor]):
        config, first = model.config, model.model.layers[0].self_attn
        self.call = kquant.load(library).kq_decoder_pass
        c_int, c_float, pointer = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
        self.call.argtypes = [c_int, c_int, c_int, ctypes.POINTER(_Block), *[c_int] * 5, c_float, c_float,
                              pointer, pointer, pointer, c_int]
        self.call.restype = c_int
        self.blocks = (_Block * len(blocks))(*(_Block(*block) for block in blocks))
        self.keep = keep  # the norms' float32 copies the blocks point into
        self.hidden, self.heads = config.hidden_size, config.num_attention_heads
        self.kv_heads, self.head_dim = config.num_key_value_heads, first.head_dim
        self.intermediate = model.model.layers[0].mlp.down_proj.in_features
        self.eps, self.scaling = float(model.model.layers[0].input_layernorm.variance_epsilon), float(first.scaling)

    def __call__(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: object) -> torch.Tensor:
        """The residual stream (1, rows, hidden) after every layer; the cache holds the rows' keys and values."""
        rows = hidden.shape[1]
        start = cache.get_seq_length()
        room = torch.empty((1, self.kv_heads, rows, self.head_dim), dtype=torch.float32)  # the C code's floats
        for block, layer in zip(self.blocks, cache.layers):  # kvcache.GrowingLayer's
            layer.reserve(start + rows, room, room)
            block.keys, block.values = layer.key_buffer.data_ptr(), layer.value_buffer.data_ptr()
            block.capacity = layer.key_buffer.shape[-2]
        x = hidden.to(torch.float32, copy=True).contiguous()  # the pass writes it in place
        cos, sin = cos.float().contiguous(), sin.float().contiguous()
        if self.call(rows, start, len(self.blocks), self.blocks, self.hidden, self.heads, self.kv_heads,
                     self.head_dim, self.intermediate, ctypes.c_float(self.eps), ctypes.c_float(self.scaling),
                     cos.data_ptr(), sin.data_ptr(), x.data_ptr(), torch.get_num_threads()):
            raise MemoryError(f"no memory for a pass over {rows} rows")
        for _, layer in zip(self.blocks, cache.layers):
            layer.end_at(start + rows)
        return x.to(hidden.dtype)


def attach(model: torch.nn.Module, library: Path) -> bool:
    """Give `model` the one-call pass where its layers allow it (see the module's docstring); whether it did."""
    config = model.config
    if getattr(config, "model_type", None) not in ("llama", "qwen2") or "sliding_attention" in (
            getattr(config, "layer_types", None) or ()):
        return False
    blocks, keep = [], []
    for layer in model.model.layers:
        attention, mlp = layer.self_attn, layer.mlp
        q_width = config.num_attention_heads * attention.head_dim
        kv_width = config.num_key_value_heads * attention.head_dim
        qkv = _joint([attention.q_proj, attention.k_proj, attention.v_proj], [q_width, kv_width, kv_width])
        gate_up = _joint([mlp.gate_proj, mlp.up_proj], [mlp.down_proj.in_features] * 2)
        if qkv is None or gate_up is None or not all(
                isinstance(linear, kquant.KQuantLinear) and linear.bias is None for linear in (attention.o_proj, mlp.down_proj)):
            return False
        norms = [norm.weight.detach().float().contiguous() for norm in (layer.input_layernorm, layer.post_attention_layernorm)]
        keep += norms
        blocks.append((norms[0].data_ptr(), norms[1].data_ptr(), _layer(qkv), _layer(attention.o_proj),
                       _layer(gate_up), _layer(mlp.down_proj), None, None, 0))
    setattr(model, ATTRIBUTE, FusedLayers(model, library, blocks, keep))
    return True


def layers_of(model: torch.nn.Module) -> FusedLayers | None:
    return getattr(model, ATTRIBUTE, None)

