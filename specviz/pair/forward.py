"""A pass through a Llama-shaped model (Llama, Qwen2) without transformers' per-call machinery: the
same modules and the same operations in the same order, so the same bits (tests/test_forward.py),
but none of the decorators, keyword plumbing, output records and mask building that wrap every
call there. On the real pair's K-quant target that machinery cost about 4 ms of a 65 ms one-token
pass (AVX2 EPYC): the engine makes one such pass per token of target-only decoding.

Only for a model set up with SpecViz's row-exact attention (cpu.ROW_ATTENTION), which needs no
mask; any other model is called as transformers builds it (`supports`).
"""

from __future__ import annotations

import torch

from . import fused_pass
from .cpu import ROW_ATTENTION, row_attention
from .kvcache import new_cache

LLAMA_SHAPED = ("llama", "qwen2")


def supports(model: torch.nn.Module) -> bool:
    config = getattr(model, "config", None)
    return (getattr(config, "model_type", None) in LLAMA_SHAPED
            and getattr(config, "_attn_implementation", None) == ROW_ATTENTION
            and "sliding_attention" not in (getattr(config, "layer_types", None) or ()))


def logits(model: torch.nn.Module, input_ids: torch.Tensor, cache: object, keep: int) -> torch.Tensor | None:
    """The logits of the last `keep` of `input_ids` (batch of one) after the cached tokens, which
    `cache` then also holds; with keep=0 only the cache is filled and None returned."""
    inner = model.model
    hidden = inner.embed_tokens(input_ids)
    count = input_ids.shape[1]
    positions = (torch.arange(count, device=input_ids.device) + cache.get_seq_length()).unsqueeze(0)
    cos, sin = inner.rotary_emb(hidden, positions)
    fused = fused_pass.layers_of(model)
    if fused is not None:  # every layer in one C call (fused_pass.py)
        hidden = fused(hidden, cos, sin, cache)
    else:
        hidden = _layers(inner, hidden, cos.unsqueeze(1), sin.unsqueeze(1), cache)
    if keep == 0:
        return None
    return model.lm_head(_norm(inner.norm, hidden[:, -keep:, :]))


def _layers(inner: torch.nn.Module, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            cache: object) -> torch.Tensor:
    for index, layer in enumerate(inner.layers):
        hidden = hidden + _attention(layer.self_attn, _norm(layer.input_layernorm, hidden), cos, sin, cache, index)
        mlp = layer.mlp
        normed = _norm(layer.post_attention_layernorm, hidden)
        hidden = hidden + mlp.down_proj(mlp.act_fn(mlp.gate_proj(normed)) * mlp.up_proj(normed))
    return hidden


def _norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm as transformers computes it: in float32, the weight applied in the activations' dtype."""
    wide = x.to(torch.float32)
    variance = wide.pow(2).mean(-1, keepdim=True)
    return norm.weight * (wide * torch.rsqrt(variance + norm.variance_epsilon)).to(x.dtype)


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)


def _attention(attention: torch.nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: object,
               index: int) -> torch.Tensor:
    shape = (*x.shape[:-1], -1, attention.head_dim)
    query = attention.q_proj(x).view(shape).transpose(1, 2)
    key = attention.k_proj(x).view(shape).transpose(1, 2)
    value = attention.v_proj(x).view(shape).transpose(1, 2)
    key, value = cache.update(_rotated(key, cos, sin), value, index)
    out, _ = row_attention(attention, _rotated(query, cos, sin), key, value, None, scaling=attention.scaling)
    return attention.o_proj(out.reshape(*x.shape[:-1], -1).contiguous())


# ---- whether a model's rows are exact, as the engine calls it ----------------------------------


def rows_exact(model: torch.nn.Module, context: int = 40, window: int = 8, seed: int = 0) -> bool:
    """Whether the model's logits for a row are the same bits in a pass over `window` new tokens
    as in one-token passes, after `context` tokens: the property the lossless check rests on."""
    def call(ids: torch.Tensor, cache: object) -> torch.Tensor:  # as the engine calls it (CachedModel)
        if supports(model):
            return logits(model, ids, cache, ids.shape[1])[0]
        return model(input_ids=ids, cache=cache, use_cache=True).logits[0]

    generator = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (1, context + window), generator=generator)
    with torch.inference_mode():
        one_pass = new_cache(model.config)
        call(ids[:, :context], one_pass)
        together = call(ids[:, context:], one_pass)
        one_by_one = new_cache(model.config)
        call(ids[:, :context], one_by_one)
        apart = torch.cat([call(ids[:, context + i: context + i + 1], one_by_one) for i in range(window)])
    return torch.equal(together, apart)


def draft_rows_exact(draft: torch.nn.Module) -> bool:
    """Whether the draft, as set up, reads several tokens in a call with each row's logits the bits
    of a call of its own (windows of 8 and 24 after 16 tokens): then it may catch up on a round's
    backlog in one call (drafters.ModelDrafter). Checked on the draft itself: a second or two."""
    return rows_exact(draft, context=16, window=8) and rows_exact(draft, context=16, window=24)
