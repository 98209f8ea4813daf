"""The public API as Gradio endpoints (the "Use via API" page of a Space): the functions of
`api.py` with their errors turned into messages for the client, their runs logged, and model
work sharing the page's turns and lock (`server_state.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import gradio as gr

from ..decoding.drafts import draft_choices
from ..decoding.modes import DEFAULT_MODES, MAX_MODES, mode_grammar
from ..errors import SpecVizError
from ..pair.presets import DEFAULT_PRESET
from . import api
from .inputs import draft_value
from .server_state import MODEL_LOCK, TURNS

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


def compare(prompt: str, preset: str = DEFAULT_PRESET, max_new_tokens: int = 128,
            modes: str = DEFAULT_MODES, temperature: float = 0.0, seed: int = 0, draft: str = "model",
            lookup_ngram: int = 2, lookup_tokens: int = 10) -> Iterator[dict]:
    """Run a prompt through speculative decoding under each lookahead policy, and through the target
    model alone, on one draft/target model pair; count every forward pass and check the output.
    The result is the comparison as JSON, the same as `python -m specviz compare --json`.

    Use it to ask how much work a lookahead policy saves: e.g. how many target passes dynamic 0.4
    needs against static k=5, or whether every greedy policy reproduced the target's own answer.
    It runs both models (seconds to minutes: about 30 s for 128 tokens on the bundled pair on 2
    CPU cores); if another run has the models, it waits its turn. Streams the comparison so far
    after each policy; the last value is the whole comparison.

    Args:
        prompt: the question or task, in plain text; the pair's chat template is applied
        preset: the model pair, a name from the presets tool (default: the server's default pair)
        max_new_tokens: at most this many new tokens, 1 to the server's limit (512 by default)
        modes: comma-separated policies, at most MAX_MODES, each once, settings left out at their defaults: MODE_GRAMMAR
        temperature: 0 for greedy decoding (lossless check and oracle); above 0 (at most 2) samples
        seed: the sampling seed, used only when temperature is above 0
        draft: DRAFT_CHOICES
        lookup_ngram: with draft "lookup": the longest n-gram to match, 1 to 8 (transformers' default 2)
        lookup_tokens: with draft "lookup": the most tokens one lookup copies, 1 to 64 (transformers' default 10)

    Returns:
        the comparison: preset, prompt, prompt_tokens, baseline (target-only: token_ids, text, target_passes, wall_s) and modes, one per policy, each with name, text, target_passes, draft_passes, drafted, accepted, acceptance_rate, wall_s, speedup over target-only, lossless (true when its tokens equal target-only greedy decoding), first_difference and rounds (per round: draft tokens and probabilities, accepted count, the oracle's ideal lookahead)
    """
    logger.info("run: preset=%s max_new_tokens=%s modes=%s temperature=%s draft=%s prompt_chars=%d (API)", preset,
                max_new_tokens, modes, temperature, str(draft)[:20], len(prompt) if isinstance(prompt, str) else -1)
    with _api_errors():
        comparison = None
        # The draft's settings, named as the page's boxes and the CLI's options are ("lookup_ngram");
        # a draft string ("lookup:3:16") may also give them, for any draft in the registry.
        asked = draft_value(draft, lookup_ngram=lookup_ngram, lookup_tokens=lookup_tokens)
        for comparison in api.compare(prompt, preset, max_new_tokens, modes, temperature, seed, MODEL_LOCK, TURNS,
                                      asked):
            yield comparison
        logger.info("run finished: %d policies (API)", len(comparison["modes"]) if comparison else 0)


# Gradio reads the docstring for the API page and the MCP tool's description: the modes and the drafts as
# the registries have them.
compare.__doc__ = (compare.__doc__.replace("MODE_GRAMMAR", mode_grammar()).replace("MAX_MODES", str(MAX_MODES))
                   .replace("DRAFT_CHOICES", draft_choices()))


def presets() -> list:
    """The draft/target model pairs a comparison can run on.

    Returns:
        a list, one entry per pair: name (what compare's preset takes), description, target and draft model, offline (runs without the Hugging Face Hub), kind ("bundled", "offline after set-up" or "hub") and setup (the command that installs its files, or null)
    """
    return _api_call(api.presets)


def pair_state(preset: str = DEFAULT_PRESET) -> dict:
    """Whether a model pair is ready on this server, read-only: for the real pair (set up once from
    pinned wheel parts on PyPI), how far its set-up has come. Nothing is started by asking.

    Args:
        preset: the model pair, a name from the presets tool (default: the server's default pair)

    Returns:
        preset; phase ("not set up", "setting up", "cancelling", "ready", "failed" or "cancelled"; a pair that needs no set-up is "ready"); stage while setting up ("download", "join", "verify", "unpack", "pack"), stage_fraction (0 to 1), done_bytes and total_bytes of that stage, message (the last step, or the error in one line), elapsed_s; loaded (whether the pair is loaded in this process: "not loaded", "loading", "ready", "failed"); line (the same as one sentence)
    """
    return _api_call(api.pair_state, preset)


def examples() -> list:
    """The example prompts the page offers, each with a comparison computed ahead.

    Returns:
        a list, one entry per example: name (what the example tool takes) and prompt
    """
    return _api_call(api.examples)


def example(name: str) -> dict:
    """An example's comparison, computed ahead on the server's machine: no model runs, so it answers at once.

    Args:
        name: the example's name, one of those the examples tool lists

    Returns:
        the comparison as JSON, in the same form as the compare tool's result
    """
    return _api_call(api.example, name)
