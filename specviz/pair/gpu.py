"""Where model work runs: the device, and on a ZeroGPU Space the GPU slot it runs in.

A ZeroGPU Space lends a GPU only to functions decorated with `spaces.GPU`, each for the
duration it asks for ahead; the decorated function runs in a forked process, so its arguments
and what it yields travel by pickling (names and requests, never models). Everywhere else
(`spaces` not installed, or installed without SPACES_ZERO_GPU) that decorator returns the
function unchanged, so `gpu_work` changes nothing on a CPU.

Everything a GPU changes is here: the device, the dtype, the duration asked for. `gpu_work`
also marks the time spent inside such a function, so a test can check that every forward pass
of the app, the API and the study happens there (`inside_gpu_work`).
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])

# The duration a comparison asks ZeroGPU for: a fixed part (moving the pair into the GPU's
# memory, the tokenizer, the oracle's search) plus a cost per token of every decoding run. The
# per-token figure is an estimate for an 8B target in bf16 on a ZeroGPU slice, to be measured on
# one (none is reachable from this project's machines). The cap keeps a visitor's request within
# ZeroGPU's usual limits: a longer request waits longer for a GPU and spends more of the quota.
GPU_BASE_S = 15
GPU_S_PER_TOKEN = 0.04
GPU_MAX_S = 120

_inside = threading.local()


def device() -> torch.device:
    """The device models are loaded onto: the GPU when there is one (on ZeroGPU the `spaces`
    package makes CUDA look present in the main process, and real in a decorated function)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def model_dtype(device: torch.device, on_cpu: torch.dtype = torch.float32) -> torch.dtype:
    """bf16 on a GPU (half the memory and the GPU's fast path; the lossless check reports any
    position where its rounding changes a greedy token), `on_cpu` elsewhere."""
    return torch.bfloat16 if device.type == "cuda" else on_cpu


def warms_up(device: torch.device) -> bool:
    """Whether a pair just loaded onto `device` gets a warm-up call (models.warm_up) and a first
    small comparison (the app's preload): on a CPU, to read the weights mapped from disk and set
    up torch's kernels before the first visitor waits for them. Not on a GPU: the weights were
    copied into its memory while loading, and on ZeroGPU model work outside `gpu_work` has no
    GPU to run on (and inside it would spend a visitor's quota)."""
    return device.type == "cpu"


def on_zerogpu() -> bool:
    """True on a ZeroGPU Space: `spaces` is installed and SPACES_ZERO_GPU says so."""
    try:
        from spaces.config import Config
    except ImportError:
        return False
    return bool(Config.zero_gpu)


def comparison_gpu_s(max_new_tokens: int, runs: int) -> int:
    """Seconds of GPU a comparison asks for: `runs` decoding runs (policies and target-only) of up
    to `max_new_tokens` tokens each, capped at GPU_MAX_S."""
    return min(GPU_MAX_S, math.ceil(GPU_BASE_S + GPU_S_PER_TOKEN * max(0, max_new_tokens) * max(1, runs)))


def inside_gpu_work() -> bool:
    """Whether the calling thread is running a `gpu_work` function right now."""
    return getattr(_inside, "depth", 0) > 0


@contextmanager
def _marked() -> Iterator[None]:
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        yield
    finally:
        _inside.depth -= 1


def _mark(function: F) -> F:
    """`function` with the calls (for a generator: each step) marked as GPU work."""
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def steps(*args: Any, **kwargs: Any) -> Iterator[Any]:
            inner = function(*args, **kwargs)
            try:
                while True:
                    with _marked():
                        try:
                            item = next(inner)
                        except StopIteration as end:
                            return end.value
                    yield item
            finally:
                inner.close()  # a consumer that stops early (Stop, a client gone) frees the caches
        return steps  # type: ignore[return-value]

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _marked():
            return function(*args, **kwargs)
    return call  # type: ignore[return-value]


def gpu_work(duration: Callable[..., int]) -> Callable[[F], F]:
    """Decorate a function that does model work: on ZeroGPU it runs under `spaces.GPU`, asking for
    `duration(*args, **kwargs)` seconds; elsewhere it runs as it is."""
    def decorate(function: F) -> F:
        marked = _mark(function)
        try:
            import spaces
        except ImportError:
            return marked
        return spaces.GPU(duration=duration)(marked)  # the function itself unless on ZeroGPU
    return decorate
