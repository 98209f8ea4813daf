"""The public API as Gradio endpoints (the "Use via API" page of a Space): the functions of
`api.py` with their errors turned into messages for the client, their runs logged, and model
work sharing the page's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import gradio as gr

from ..core.models import DEFAULT_PRESET
from ..core.policies import DEFAULT_MODES
from ..errors import SpecVizError
from . import api
from .events import MODEL_LOCK

logger = logging.getLogger("specviz.app")

API_SERVER_ERROR = "Something went wrong on the server; the error was logged."


@contextmanager
def _api_errors():
    """Around a public endpoint's work: a SpecVizError (bad input, unknown preset or example, a pair
    that cannot load) becomes the client's error message, anything else is logged."""
    try:
        yield
    except SpecVizError as error:
        raise gr.Error(str(error), print_exception=False) from None
    except Exception:
        logger.exception("API call failed")
        raise gr.Error(API_SERVER_ERROR, print_exception=False) from None


def _api_call(work, *args):
    with _api_errors():
        return work(*args)


def compare_api(prompt: str, preset: str = DEFAULT_PRESET, max_new_tokens: int = 128,
                modes: str = DEFAULT_MODES, temperature: float = 0.0, seed: int = 0) -> Iterator[dict]:
    """Run a prompt through each lookahead policy (modes, e.g. "static:5,heuristic:5,dynamic:0.4,oracle";
    also adaptive:T0 and entropy:H) and target-only decoding on the model pair `preset` (see /presets),
    greedy at temperature 0 or sampled with `seed`, for at most max_new_tokens new tokens. Returns the
    comparison as JSON, the same as `python -m specviz compare --json`: per policy its tokens, every
    round (draft tokens, probabilities, accepted count), target and draft passes, times and the lossless
    check. Streams: the comparison so far after each policy; the last value is the whole comparison.

    Args:
        prompt: the question or task; the pair's chat template is applied
        preset: the model pair, a name from the presets endpoint
        max_new_tokens: at most this many new tokens (1 to the server's limit, 512 by default)
        modes: the policies, as on the command line
        temperature: 0 for greedy decoding (lossless, and the oracle runs); above 0 samples
        seed: the sampling seed (used only when temperature is above 0)
    """
    logger.info("run: preset=%s max_new_tokens=%s modes=%s temperature=%s prompt_chars=%d (API)", preset,
                max_new_tokens, modes, temperature, len(prompt) if isinstance(prompt, str) else -1)
    with _api_errors():
        comparison = None
        for comparison in api.compare(prompt, preset, max_new_tokens, modes, temperature, seed, MODEL_LOCK):
            yield comparison
        logger.info("run finished: %d policies (API)", len(comparison["modes"]) if comparison else 0)


def presets_api() -> list:
    """The model pairs a comparison can run on: name, description, target and draft, and whether
    the pair is bundled (offline)."""
    return _api_call(api.presets)


def examples_api() -> list:
    """The example prompts the page offers: name and prompt."""
    return _api_call(api.examples)


def example_api(name: str) -> dict:
    """An example's comparison, computed ahead (no model runs), in the same JSON as `compare`.

    Args:
        name: the example's name, one of those from the `examples` endpoint
    """
    return _api_call(api.example, name)
