"""The lean pass (pair/forward.py): the same logits, bit for bit, as calling the transformers model,
for Llama and Qwen2 shapes, float32 and bfloat16, prompts, windows and single tokens; models it
cannot run are left to transformers."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from specviz.pair import cpu, forward, kvcache

SHAPE = {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
         "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def model_of(kind: str, dtype: torch.dtype):
    torch.manual_seed(0)
    model = (Qwen2ForCausalLM(Qwen2Config(**SHAPE)) if kind == "qwen2" else
             LlamaForCausalLM(LlamaConfig(**SHAPE, attention_bias=True))).eval().to(dtype)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:  # (they start at ones, which would hide a misplaced product)
                parameter.uniform_(0.5, 1.5)
    cpu.use_row_attention(model)
    return model


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_lean_pass_gives_the_models_own_bits(kind, dtype):
    model = model_of(kind, dtype)
    assert forward.supports(model)
    generator = torch.Generator().manual_seed(1)
    theirs, ours = kvcache.new_cache(model.config), kvcache.new_cache(model.config)
    with torch.inference_mode():
        for count, keep in [(30, 1), (1, 1), (8, 8), (1, 1), (16, 3), (5, 0), (1, 1)]:
            ids = torch.randint(0, 96, (1, count), generator=generator)
            if keep == 0:  # only the cache is filled
                model.get_decoder()(input_ids=ids, cache=theirs, use_cache=True)
                assert forward.logits(model, ids, ours, 0) is None
                continue
            expected = model(input_ids=ids, cache=theirs, use_cache=True, logits_to_keep=keep).logits
            assert torch.equal(forward.logits(model, ids, ours, keep), expected), (count, keep)
    assert ours.get_seq_length() == theirs.get_seq_length() == 62


def test_a_model_without_row_attention_is_left_to_transformers():
    model = model_of("llama", torch.float32)
    model.set_attn_implementation("sdpa")
    assert not forward.supports(model)
