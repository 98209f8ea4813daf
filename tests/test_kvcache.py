"""The KV cache that grows in place (pair/kvcache.py): the same logits, bit for bit, as transformers'
DynamicCache through a decoding's kind of feeds (a prompt, windows, single tokens, crops after
rejected drafts), past the buffer's first size."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from specviz.pair import kvcache


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(config).eval()


def test_a_growing_cache_gives_dynamic_caches_bits_through_windows_and_crops(model):
    generator = torch.Generator().manual_seed(1)
    ours, theirs = kvcache.new_cache(model.config), DynamicCache(config=model.config)
    assert all(isinstance(layer, kvcache.GrowingLayer) for layer in ours.layers)
    length, steps = 0, [("feed", 40)] + [("feed", 5), ("crop", 3), ("feed", 1), ("feed", 9), ("crop", 9)] * 100
    with torch.inference_mode():
        for kind, count in steps:
            if kind == "crop":
                ours.crop(-count)
                theirs.crop(-count)
                length -= count
                continue
            ids = torch.randint(0, 64, (1, count), generator=generator)
            mine = model(input_ids=ids, cache=ours, use_cache=True).logits
            reference = model(input_ids=ids, cache=theirs, use_cache=True).logits
            assert torch.equal(mine, reference), f"at {length} cached positions"
            length += count
            assert ours.get_seq_length() == theirs.get_seq_length() == length
    assert ours.layers[0].key_buffer.shape[-2] > kvcache.ROOM  # it grew past its first buffer
    for mine, reference in zip(ours.layers, theirs.layers):
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)


def test_a_crop_takes_transformers_negative_count_and_never_goes_below_zero(model):
    cache = kvcache.new_cache(model.config)
    with torch.inference_mode():
        model(input_ids=torch.arange(10)[None], cache=cache, use_cache=True)
    cache.crop(-4)
    assert cache.get_seq_length() == 6
    with pytest.raises(ValueError):
        cache.layers[0].crop(3)
    cache.crop(-50)
    assert cache.get_seq_length() == 0
