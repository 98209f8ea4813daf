"""Shared fixtures: tiny random models for fast tests, the real bundled pair for slow ones."""

from __future__ import annotations

import copy

import pytest
import torch


def tiny_llama(seed: int, vocab: int = 8, sharpness: float = 4.0):
    """A one-layer Llama with random weights; `sharpness` scales the logits so choices are not uniform."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    model.generation_config.eos_token_id = None
    return model


def noisy_copy(model, noise: float, seed: int):
    """The model with every weight jittered: a draft that agrees with it often but not always."""
    draft = copy.deepcopy(model)
    torch.manual_seed(seed)
    with torch.no_grad():
        for weight in draft.parameters():
            weight.add_(noise * weight.std() * torch.randn_like(weight))
    return draft


@pytest.fixture(scope="session")
def tiny_pair():
    """A 32-token target and a jittered copy as draft (acceptance about 0.6 with static k=4)."""
    from specviz.core.models import build_pair

    target = tiny_llama(0, vocab=32, sharpness=2.0)
    return build_pair("tiny", target, noisy_copy(target, 0.2, seed=5), tokenizer=None, device=torch.device("cpu"))


@pytest.fixture(scope="session")
def tiny_unrelated_pair():
    """Two independent 8-token models: their distributions differ a lot, as sampling tests need."""
    from specviz.core.models import build_pair

    return build_pair("tiny", tiny_llama(0, sharpness=10.0), tiny_llama(1, sharpness=10.0), tokenizer=None,
                      device=torch.device("cpu"))


@pytest.fixture(scope="session")
def bundled_pair():
    from specviz.core.models import DEFAULT_PRESET, get_pair

    return get_pair(DEFAULT_PRESET)


@pytest.fixture(scope="session")
def bundled_bf16_pair():
    from specviz.core.models import get_pair

    return get_pair("smollm2-135m-bf16")


@pytest.fixture
def restore_threads():
    """Put torch's thread count back after a test that sets it (bench, study)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, driven by Playwright; one per browser test module."""
    from app_server import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
