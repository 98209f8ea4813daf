"""transformers' own assisted generation, run with settings equivalent to a SpecViz policy.

Used to check that the engine counts passes and picks tokens as transformers does (tests) and
to measure the engine's overhead against it (benchmarks). Equivalences:

    static k        num_assistant_tokens=k, schedule "constant", confidence threshold 0
    heuristic k0    num_assistant_tokens=k0, schedule "heuristic" (reset before every call)
    dynamic t, m    num_assistant_tokens=m, schedule "constant", assistant_confidence_threshold=t
    adaptive t0, m  as dynamic, with transformers' re-fit of the threshold after every round

transformers re-fits the confidence threshold whenever scikit-learn is installed; that is
SpecViz's `adaptive` policy, so it is switched off for the others.

The passes match SpecViz's only with `drafters.TransformersDrafter`, which feeds the draft as the
installed transformers does (the last committed tokens in one call per round: the last two up to
5.24, what the cache lacks from 5.25); SpecViz's default feeding spends one more draft call per
fully accepted round (drafters.ModelDrafter).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..decoding.modes import ModeSpec

if TYPE_CHECKING:
    from ..pair.models import ModelPair


@dataclass
class HFRun:
    token_ids: list[int]
    target_calls: int  # forward calls of the target model
    draft_calls: int  # forward calls of the draft model
    wall_s: float


def assistant_settings(spec: ModeSpec) -> dict[str, object]:
    """The assistant generation-config fields equivalent to a SpecViz mode."""
    if spec.policy == "static":
        return {"num_assistant_tokens": spec.params.get("num_assistant_tokens", 5),
                "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0}
    if spec.policy == "heuristic":
        return {"num_assistant_tokens": spec.params.get("num_assistant_tokens", 5),
                "num_assistant_tokens_schedule": "heuristic", "assistant_confidence_threshold": 0.0}
    if spec.policy in ("dynamic", "adaptive"):
        return {"num_assistant_tokens": spec.params.get("max_tokens", 20),
                "num_assistant_tokens_schedule": "constant",
                "assistant_confidence_threshold": spec.params.get("assistant_confidence_threshold", 0.4)}
    raise ValueError(f"transformers has no equivalent of the {spec.policy!r} policy")


@contextmanager
def _counting(module: torch.nn.Module):
    calls = [0]

    def hook(*_):
        calls[0] += 1

    handle = module.register_forward_hook(hook)
    try:
        yield calls
    finally:
        handle.remove()


@contextmanager
def _threshold_refit(enabled: bool):
    from transformers.generation import candidate_generator

    if enabled and not candidate_generator.is_sklearn_available():
        raise RuntimeError("transformers re-fits the threshold (the adaptive policy) only with scikit-learn installed")
    original = candidate_generator.is_sklearn_available
    candidate_generator.is_sklearn_available = lambda: enabled
    try:
        yield
    finally:
        candidate_generator.is_sklearn_available = original


def _stop_tokens(pair: ModelPair) -> dict[str, object]:
    eos = sorted(pair.eos_token_ids)
    return {"eos_token_id": eos or None, "pad_token_id": eos[0] if eos else 0}


def hf_assisted(pair: ModelPair, prompt_ids: list[int], spec: ModeSpec, max_new_tokens: int) -> HFRun:
    """Greedy `generate(assistant_model=draft)` with the mode's settings; counts both models' calls."""
    config = pair.draft.generation_config
    for name, value in assistant_settings(spec).items():
        setattr(config, name, value)
    inputs = torch.tensor([prompt_ids], device=pair.device)
    with _threshold_refit(spec.policy == "adaptive"), _counting(pair.target) as target_calls, _counting(pair.draft) as draft_calls, \
            torch.inference_mode():
        started = time.perf_counter()
        output = pair.target.generate(inputs, attention_mask=torch.ones_like(inputs), assistant_model=pair.draft,
                                      do_sample=False, max_new_tokens=max_new_tokens, **_stop_tokens(pair))
        wall_s = time.perf_counter() - started
    return HFRun(output[0, len(prompt_ids):].tolist(), target_calls[0], draft_calls[0], wall_s)


def hf_greedy(pair: ModelPair, prompt_ids: list[int], max_new_tokens: int) -> HFRun:
    """Target-only greedy `generate`, the base of transformers' speedups."""
    inputs = torch.tensor([prompt_ids], device=pair.device)
    with _counting(pair.target) as target_calls, torch.inference_mode():
        started = time.perf_counter()
        output = pair.target.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                                      max_new_tokens=max_new_tokens, **_stop_tokens(pair))
        wall_s = time.perf_counter() - started
    return HFRun(output[0, len(prompt_ids):].tolist(), target_calls[0], 0, wall_s)


def hf_prompt_lookup(pair: ModelPair, prompt_ids: list[int], num_tokens: int, max_new_tokens: int,
                     max_ngram: int = 2) -> HFRun:
    """Greedy `generate(prompt_lookup_num_tokens=num_tokens)`: transformers' prompt lookup draft
    (SpecViz's lookup draft with static k = num_tokens); counts the target's calls."""
    inputs = torch.tensor([prompt_ids], device=pair.device)
    with _counting(pair.target) as target_calls, torch.inference_mode():
        started = time.perf_counter()
        output = pair.target.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                                      prompt_lookup_num_tokens=num_tokens, max_matching_ngram_size=max_ngram,
                                      max_new_tokens=max_new_tokens, **_stop_tokens(pair))
        wall_s = time.perf_counter() - started
    return HFRun(output[0, len(prompt_ids):].tolist(), target_calls[0], 0, wall_s)
