"""Shared fixtures: tiny random models for fast tests, the real bundled pair for slow ones."""

from __future__ import annotations

import copy
import os

import pytest
import torch

# One intra-op thread per test process: the suite runs in two xdist workers (pyproject.toml), and
# the apps and command lines the tests start inherit OMP_NUM_THREADS. Measured on this project's
# 2-core machines (3 prompts x 6 policies x 48 tokens on the int8 pair): 2 threads took 112.8 s,
# 1 thread 94.7 s, and two 1-thread processes side by side 94.4 and 94.6 s each.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(items):
    """The model and browser tests first: the workers start on the long units of work, and the
    short unit tests fill in at the end (xdist hands out work in collection order).

    SPECVIZ_TEST_ORDER=reversed runs each module's tests in the opposite order: no test may rely on
    what an earlier one left behind in a shared app or fixture, and this is how that is checked."""
    if os.environ.get("SPECVIZ_TEST_ORDER", "").strip() == "reversed":
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            first.setdefault(item.nodeid.partition("::")[0], i)
        order = {id(item): (first[item.nodeid.partition("::")[0]], -i) for i, item in enumerate(items)}
        items.sort(key=lambda item: order[id(item)])
    items.sort(key=lambda item: not (item.get_closest_marker("slow") or item.get_closest_marker("browser")))


def pytest_xdist_make_scheduler(config, log):
    """Hand out whole modules, so that each worker computes a module's shared fixtures (its
    comparisons, its app server) once; a module parametrized by preset is split by preset, so
    that its two presets run side by side."""
    from xdist.scheduler import LoadScopeScheduling

    from specviz.pair.presets import PRESETS

    class ByModuleAndPreset(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module, _, test = nodeid.partition("::")
            param = test[test.find("[") + 1:-1] if test.endswith("]") else ""
            return f"{module}[{param}]" if param in PRESETS else module

    return ByModuleAndPreset(config, log)


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
    from specviz.pair.models import build_pair

    target = tiny_llama(0, vocab=32, sharpness=2.0)
    return build_pair("tiny", target, noisy_copy(target, 0.2, seed=5), tokenizer=None, device=torch.device("cpu"))


@pytest.fixture(scope="session")
def tiny_unrelated_pair():
    """Two independent 8-token models: their distributions differ a lot, as sampling tests need."""
    from specviz.pair.models import build_pair

    return build_pair("tiny", tiny_llama(0, sharpness=10.0), tiny_llama(1, sharpness=10.0), tokenizer=None,
                      device=torch.device("cpu"))


@pytest.fixture(scope="session")
def bundled_pair():
    from specviz.pair.models import get_pair
    from specviz.pair.presets import DEFAULT_PRESET

    return get_pair(DEFAULT_PRESET)


@pytest.fixture(scope="session")
def bundled_bf16_pair():
    from specviz.pair.models import get_pair

    return get_pair("smollm2-135m-bf16")


@pytest.fixture
def restore_threads():
    """Put torch's thread count back after a test that sets it (bench, study)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium, headless, driven by Playwright: one for the whole run, a new page per test."""
    from app_server import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


# ---- app servers: one per configuration for the whole run ----------------------------------
# Starting `python app.py` costs a Python start, the imports and a model load; every module of a
# worker that needs the same configuration shares one. Each module reads only its own part of the log.


@pytest.fixture(scope="session")
def live_server(tmp_path_factory):
    """The app with the bundled pair preloaded, the hub offline, and a large time budget so that a
    busy machine slows a run down instead of cutting it short."""
    from app_server import serving

    folder = tmp_path_factory.mktemp("live-app")
    with serving(folder, HF_HUB_OFFLINE="1", HF_HOME=str(folder / "hf"), SPECVIZ_TIME_BUDGET_S="1200") as served:
        yield served


@pytest.fixture(scope="session")
def modelless_server(tmp_path_factory):
    """The app with SPECVIZ_PRELOAD=0: examples and imports only; no test presses Run on it."""
    from app_server import serving

    with serving(tmp_path_factory.mktemp("modelless-app"), SPECVIZ_PRELOAD="0") as served:
        yield served


@pytest.fixture(scope="module")
def live_app(live_server):
    """(url, the log from this module's start) of the shared live app."""
    from app_server import LogSince

    return live_server.url, LogSince(live_server.log_path)


@pytest.fixture(scope="module")
def modelless_app(modelless_server):
    from app_server import LogSince

    return modelless_server.url, LogSince(modelless_server.log_path)
