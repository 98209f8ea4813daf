"""Model pairs: a target and its draft loaded for a preset, shared per process, and prompts as token ids.

A bundled preset's draft is derived from its target's weights (int8 dynamic quantization, or a
bf16 copy); every other preset loads its two models apart (pair/weights.py says from where).

Memory: a preset states roughly how much RAM its pair takes, and a large pair (see
`presets.LARGE_PAIR_GB`) evicts every other large pair before it loads (`get_pair`).
"""

from __future__ import annotations

import copy
import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import SpecVizError
from . import cpu, draft_head, forward, gpu, setups, vocab, weights
from .presets import DEFAULT_PRESET, Preset, get_preset
from .rows import CATCH_UP_ROWS
from .setups.int8 import to_row_int8


@dataclass(eq=False)  # a loaded pair is itself: decoding keeps what it measured of it by identity
class ModelPair:
    """A target model, its draft, and the tokenizer they share."""

    preset: str
    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    device: torch.device
    vocab_size: int  # logits beyond this (padding rows) are ignored
    eos_token_ids: frozenset[int]
    max_context: int
    load_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    setup: str = ""  # what runs, for the model line: e.g. "target bf16 (...); draft bf16 (...)" (pair/setups/)
    # The draft gives a row the same bits in a call of several (up to CATCH_UP_ROWS) as
    # alone, checked at load: it then reads a round's backlog in one call (drafters.ModelDrafter).
    draft_row_exact: bool = False


def int8_draft(target: torch.nn.Module, kept: np.ndarray | None = None) -> torch.nn.Module:
    """The target's Linear layers in dynamic int8 (torch.ao), computed row by row for the few
    rows of a catch-up call so that the draft is row-exact (setups/int8.py); its output layer over
    the `kept` rows only, where given (vocab.py)."""
    draft = _copy(target, kept)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao quantization is deprecated but works in 2.13
        # In place on the private copy: the default would make a third full copy of the weights.
        draft = torch.ao.quantization.quantize_dynamic(draft, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    to_row_int8(draft, CATCH_UP_ROWS)
    return draft


def bf16_draft(target: torch.nn.Module, kept: np.ndarray | None = None) -> torch.nn.Module:
    """The target in bf16, attention one query row at a time so that it may be row-exact (checked
    at load: on an AMX Xeon it is, and reads a backlog in one call); its output layer over the
    `kept` rows only, where given."""
    draft = _copy(target, kept).to(torch.bfloat16)
    cpu.use_row_attention(draft)
    return draft


def _copy(target: torch.nn.Module, kept: np.ndarray | None) -> torch.nn.Module:
    draft = copy.deepcopy(target)
    if kept is not None:
        draft_head.keep_rows(draft, kept)
    return draft


def check_same_vocabulary(target_tokenizer: object, draft_tokenizer: object) -> None:
    """Speculative decoding compares token ids, so both models must use one vocabulary."""
    if target_tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise SpecVizError(
            f"The draft and target use different vocabularies ({len(draft_tokenizer)} vs "
            f"{len(target_tokenizer)} tokens, or the same size with different tokens): "
            "pick a draft from the same model family."
        )


def _eos_ids(model: torch.nn.Module, tokenizer: object) -> frozenset[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)


def build_pair(preset: str, target: torch.nn.Module, draft: torch.nn.Module, tokenizer: object,
               device: torch.device | None = None) -> ModelPair:
    """Wrap two loaded models (any causal LMs sharing `tokenizer`) as a pair ready for the engine."""
    target.eval()
    draft.eval()
    rows = min(draft_head.output_rows(target), _draft_vocab(draft))
    return ModelPair(
        preset=preset, target=target, draft=draft, tokenizer=tokenizer,
        device=device or next(target.parameters()).device, vocab_size=rows,
        eos_token_ids=_eos_ids(target, tokenizer),
        max_context=int(getattr(target.config, "max_position_embeddings", 2048) or 2048),
    )


def _draft_vocab(draft: torch.nn.Module) -> int:
    return int(draft.config.vocab_size)


class ModelLoadError(SpecVizError):
    """A preset's pair could not be loaded; the message names the cause and the fix."""


def _load_error(name: str, error: Exception) -> ModelLoadError:
    """Turn any failure while loading into one message a user can act on."""
    if isinstance(error, SpecVizError):
        return ModelLoadError(str(error))  # already says what to do
    lines = str(error).strip().splitlines()
    cause = f"{type(error).__name__}: {lines[0][:300].rstrip('.')}" if lines else type(error).__name__
    if isinstance(error, ImportError) or "pip install" in cause:
        fix = "install SpecViz's requirements with scripts/setup.sh (or pip install -r requirements.txt)"
    else:
        fix = (f"run scripts/setup.sh; if that does not help, delete the folder {weights.cache_root()} so that the "
               "model is unpacked again")
    return ModelLoadError(f"The model pair {name!r} could not be loaded ({cause}). To fix it, {fix}, then run again.")


def load_pair(name: str = DEFAULT_PRESET, progress: Callable[[str], None] | None = None) -> ModelPair:
    """Load a preset's pair (uncached: use `get_pair` to share one pair per process).

    Raises ModelLoadError, whatever went wrong, so that callers show one clear message.
    """
    preset = get_preset(name)
    try:
        return _load_preset(preset, name, progress)
    except Exception as error:  # every failure becomes one message with its fix
        raise _load_error(name, error) from error


def _load_preset(preset: Preset, name: str, progress: Callable[[str], None] | None) -> ModelPair:
    say = progress or (lambda message: None)
    started = time.perf_counter()
    vocab.asked()  # a mistaken SPECVIZ_DRAFT_VOCAB is refused before any model loads
    if preset.target == "bundled":
        target, tokenizer = weights.load_bundled_target(say)
        say(f"Building the {preset.draft} draft")
        draft_vocab = _vocab_plan(target, _eos_ids(target, tokenizer), tokenizer, say)
        draft = int8_draft(target, draft_vocab.kept) if preset.draft == "int8" else bf16_draft(target, draft_vocab.kept)
        say("Choosing the target's set-up for this CPU")  # after the draft is made from the target as loaded
        choice = setups.choose_fp32_target(target)
        target_setup = f"{setups.prepare_target(target, choice.setup, choice.sizes)}: {choice.why}"
        pair = build_pair(name, target, draft, tokenizer, torch.device("cpu"))
        pair.setup = f"{target_setup}; draft " + ("int8 dynamic" if preset.draft == "int8" else "bf16 copy")
    else:
        device = gpu.device()
        say(f"Loading target {preset.target}")
        target, tokenizer = weights.load_model(preset, name, preset.target, device, gpu.model_dtype(device), say)
        setup = []
        if device.type == "cpu":  # before the draft loads: converting needs room for both copies of the target
            say("Choosing the target's set-up for this CPU")
            packed = weights.kquant_layers(preset.target)
            choice = setups.choose_target(target, packed=packed, cache=weights.cache_root() / "kernels")
            setup.append(f"{setups.prepare_target(target, choice.setup, choice.sizes, packed, choice.kernel)}: "
                         f"{choice.why}")
            del packed  # what the target did not take
        say(f"Loading draft {preset.draft}")
        draft, draft_tokenizer = weights.load_model(preset, name, preset.draft, device,
                                                    gpu.model_dtype(device, _dtype(preset.draft_dtype)), say)
        check_same_vocabulary(tokenizer, draft_tokenizer)
        if device.type == "cpu":  # chosen on the full draft: with and without a smaller output layer alike
            choice = setups.choose_draft(draft=draft, cache=weights.cache_root() / "kernels")
        draft_vocab = _vocab_plan(draft, _eos_ids(target, tokenizer) | _eos_ids(draft, tokenizer), tokenizer, say)
        if draft_vocab.kept is not None:  # before the precision set-up, which then converts the kept rows
            draft_head.keep_rows(draft, draft_vocab.kept)
        if device.type == "cpu":
            setup.append(f"{setups.prepare_draft(draft, choice.setup, choice.kernel)}: {choice.why}")
        pair = build_pair(name, target, draft, tokenizer, device)
        pair.setup = "; ".join(setup) or f"target and draft in {gpu.model_dtype(device)} on {device.type}"
    if draft_vocab.line:
        pair.setup += f"; {draft_vocab.line}"
    if pair.device.type == "cpu":
        say("Checking whether the draft can catch up in one call")
        pair.draft_row_exact = forward.draft_rows_exact(pair.draft)
        pair.setup += ("; draft reads a round's backlog in one call (row-exact)" if pair.draft_row_exact
                       else "; draft reads its backlog one token per call (not row-exact)")
    if gpu.warms_up(pair.device):
        say("Warming up both models")
        warm_up(pair)
    pair.load_s = time.perf_counter() - started
    return pair


def _vocab_plan(draft: torch.nn.Module, eos_ids: frozenset[int], tokenizer: object,
                say: Callable[[str], None]) -> vocab.Plan:
    """The rows of the draft's output layer that SPECVIZ_DRAFT_VOCAB keeps (all, unset): the EOS ids always."""
    if vocab.asked() is not None:
        say("Choosing the draft's output rows by token frequency")
    return vocab.plan(draft_head.output_rows(draft), tokenizer, eos_ids, weights.cache_root() / "vocab")


def warm_up(pair: ModelPair) -> None:
    """One forward call of each model. A model read from safetensors is mapped from disk, and its
    first forward call reads every weight in: 6.7 GB for the real pair's target, which made the
    first policy of the first comparison after a load twice as slow as the same policy later
    (measured: static k=5 at 0.50x of target-only, then 1.06x on the next prompt). Only where
    `gpu.warms_up` says so."""
    ids = torch.tensor([[0]], device=pair.device)
    with torch.inference_mode():
        pair.target(input_ids=ids)
        pair.draft(input_ids=ids)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise SpecVizError(f"{name!r} is not a torch dtype (e.g. float32, bfloat16).")
    return dtype


@dataclass(frozen=True)
class LoadState:
    """Where loading a preset's pair stands, for a page that shows a cold start as it happens."""

    phase: str  # "not loaded", "loading", "ready" or "failed"
    step: str = ""  # the loading step under way, or the error message when failed
    started: float = 0.0  # time.monotonic() when loading began
    finished: float = 0.0

    def elapsed_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started if self.started else 0.0


_pairs: dict[str, ModelPair] = {}
_pairs_lock = threading.Lock()
_load_states: dict[str, LoadState] = {}


def pair_setup(name: str) -> str:
    """What runs in the loaded pair of a preset (see pair/setups/), or "" when it is not loaded."""
    pair = _pairs.get(name)
    return pair.setup if pair is not None else ""


def load_state(name: str) -> LoadState:
    return _load_states.get(name, LoadState("ready") if name in _pairs else LoadState("not loaded"))


def _is_large(name: str) -> bool:
    try:
        return get_preset(name).large
    except SpecVizError:  # a user-chosen hub pair no longer allowed: unknown size, so large
        return True


def get_pair(name: str = DEFAULT_PRESET, progress: Callable[[str], None] | None = None) -> ModelPair:
    """The process-wide pair for a preset, loaded on first use and shared by every caller.

    A failed load is not remembered: the next call tries again.
    """
    preset = get_preset(name)
    with _pairs_lock:
        if name not in _pairs:
            if preset.large:
                # Two large pairs (the real pair is about 9 GB) would not fit a 16 GB machine: let the
                # others go first. Small pairs (the bundled ones, about 1 GB each) stay.
                evicted = [other for other in _pairs if _is_large(other)]
                for other in evicted:
                    del _pairs[other]
                    _load_states.pop(other, None)  # it is "not loaded" again, not "ready"
                if evicted:
                    gc.collect()  # give the memory back before the next pair claims it
            started = time.monotonic()

            def step(message: str) -> None:
                _load_states[name] = LoadState("loading", message, started)
                if progress is not None:
                    progress(message)

            step("Starting to load the model pair")
            try:
                _pairs[name] = load_pair(name, step)
            except ModelLoadError as error:
                _load_states[name] = LoadState("failed", str(error), started, time.monotonic())
                raise
            _load_states[name] = LoadState("ready", "", started, time.monotonic())
        return _pairs[name]


def release_pair(name: str) -> None:
    """Let the process's pair for a preset go (the study's next pair needs the memory)."""
    with _pairs_lock:
        _load_states.pop(name, None)  # "not loaded" again: a failed load's message no longer holds either
        if _pairs.pop(name, None) is not None:
            gc.collect()


def wait_for_pair(name: str, poll_s: float = 0.5) -> Iterator[LoadState | ModelPair]:
    """`get_pair` in a worker thread: yields the load state every `poll_s` while the pair loads
    (or while another caller, such as the app's preload, loads it), then the pair itself.
    Raises the load's ModelLoadError."""
    get_preset(name)
    outcome: dict[str, object] = {}

    def load() -> None:
        try:
            outcome["pair"] = get_pair(name)
        except Exception as error:  # noqa: BLE001 - handed to the waiting caller, which re-raises it
            outcome["error"] = error

    worker = threading.Thread(target=load, name=f"specviz-load-{name}", daemon=True)
    worker.start()
    while True:
        worker.join(poll_s)
        if not worker.is_alive():
            break
        yield load_state(name)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    yield outcome["pair"]  # type: ignore[misc]


# ---- prompts -----------------------------------------------------------------------------


def encode_prompt(pair: ModelPair, prompt: str, chat: bool = True) -> list[int]:
    """Token ids of the prompt, through the chat template when the tokenizer has one."""
    tokenizer = pair.tokenizer
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True)
        if hasattr(ids, "keys"):  # some versions return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)
    return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
