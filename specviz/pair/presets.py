"""Presets: the named target/draft pairs SpecViz knows, and which one it starts with.

A preset says where its two models come from (bundled, the hub, or files set up once), about how
much RAM the loaded pair takes, and how long a decoding run takes per token. Loading is
pair/weights.py's and pair/models.py's job; this module is data, and needs no torch.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .. import settings
from ..errors import SpecVizError
from .wheel_parts import SETUP_COMMAND

logger = logging.getLogger(__name__)

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
    # The dtype a draft with weights of its own is loaded in, on the CPU (on a GPU both models load in bf16:
    # gpu.py); a CPU set-up (pair/setups/) may then put it in bf16 for the CPU it runs on, and the target likewise.
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
    Preset(REAL_PAIR_PRESET, "Qwen2.5-Coder-1.5B-Instruct, draft Qwen2.5-Coder-0.5B-Instruct (a real, "
           f"separately trained draft; offline once `{SETUP_COMMAND}` has run, a 1.6 GB download; the target on its "
           "GGUF's 4/6-bit codes where the CPU has AVX512-VNNI or AVX2, 2.5 GB of RAM loaded (4.4 at peak), else bf16 or fp32 and 5-9 GB)", "Qwen/Qwen2.5-Coder-1.5B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct", offline=True,
           setup=SETUP_COMMAND, ram_gb=9.0, draft_dtype="float32", run_s_per_token=0.5),
    Preset("smollm2-1.7b", "SmolLM2-1.7B-Instruct, draft SmolLM2-135M-Instruct (hub)",
           "HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", ram_gb=7.5),
    Preset("smollm2-360m", "SmolLM2-360M-Instruct, draft SmolLM2-135M-Instruct (hub; a separately trained "
           "draft, small enough for a free CPU Space)",
           "HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", ram_gb=2.0),
    Preset("qwen2.5-1.5b", "Qwen2.5-1.5B-Instruct, draft Qwen2.5-0.5B-Instruct (hub)",
           "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", ram_gb=8.5),
    Preset("llama-3.1-8b", "Llama-3.1-8B-Instruct, draft Llama-3.2-1B-Instruct (hub, the study's pair; "
           "needs a GPU: a ZeroGPU Space, see docs/SETUP.md)", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", ram_gb=40.0),
]}
BUILTIN_DEFAULT_PRESET = "smollm2-135m-int8"
DEFAULT_PRESET_ENV = "SPECVIZ_DEFAULT_PRESET"


def default_preset(environ: Mapping[str, str] | None = None) -> str:
    """The preset the app (and the CLI) start with: $SPECVIZ_DEFAULT_PRESET when it names a listed
    preset, else the bundled int8 pair. A Space owner picks a hub pair this way; a typo there must
    not take the Space down, so an unknown name falls back with a logged warning."""
    name = settings.read(DEFAULT_PRESET_ENV, environ)
    if not name:
        return BUILTIN_DEFAULT_PRESET
    if name in PRESETS:
        return name
    shown = name if len(name) <= 60 else name[:60] + "…"
    logger.warning("%s=%r is not a listed preset (%s); using %s", DEFAULT_PRESET_ENV, shown, ", ".join(PRESETS),
                   BUILTIN_DEFAULT_PRESET)
    return BUILTIN_DEFAULT_PRESET


DEFAULT_PRESET = default_preset()


ALLOW_HUB_MODELS_ENV = "SPECVIZ_ALLOW_HUB_MODELS"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def get_preset(name: str) -> Preset:
    """A listed preset, or, only where SPECVIZ_ALLOW_HUB_MODELS=1, a "TARGET_ID|DRAFT_ID" pair of hub ids."""
    if not isinstance(name, str):
        raise SpecVizError("The preset must be a name.")
    if name in PRESETS:
        return PRESETS[name]
    if "|" in name and settings.read(ALLOW_HUB_MODELS_ENV) == "1":
        target, _, draft = (part.strip() for part in name.partition("|"))
        for model_id in (target, draft):
            # Only owner/name hub ids: nothing a visitor types may name a local path.
            if not _HUB_ID.match(model_id) or ".." in model_id:
                raise SpecVizError(f"{model_id[:100]!r} is not a hub model id of the form owner/name.")
        return Preset(name, f"{target}, draft {draft} (hub, user-chosen)", target, draft)
    shown = name if len(name) <= 60 else name[:60] + "…"
    raise SpecVizError(f"Unknown preset {shown!r}. Available: {', '.join(PRESETS)}.")
