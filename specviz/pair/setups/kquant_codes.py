"""kquant: the model on K-quant codes and SpecViz's kernel (kquant.py, kquant.c), built for this CPU
(AVX512-VNNI, else AVX2 with FMA). Taken in its turn only where nothing is asked for.

The target: its GGUF's own codes, where they were kept at set-up (weights.kquant_layers), the
kernel builds here (`kquant_kernel`), the set-up is row-exact here (`kquant_rows_exact`, on a probe
with random Q4_K codes) and it times faster than the set-up the target would otherwise get, for
one row and for 8 (`kquant_pays`). Passing, it says why ("K-quant codes measured slower here"),
and the set-up taken instead says so first. Asked for, it needs only the codes, the kernel and
row-exactness.

The draft: SpecViz's own 4-bit codes (kquant.quantize) on the same kernel, where it builds and a
one-row product times faster than torch's int4 (`kquant_draft_pays`); row-exact too, so the draft
may be fed several tokens in one call.

Where the CPU has AMX, both take the kernel's AMX body for calls of several rows (windows, catch-ups
and the prompt's prefill alike: they all go through the same layers) from the row count the tiles'
probe found (kquant_tiles.verdict, run in a child process once per CPU); the set-up's line says so,
or why not ("AMX tiles refused: ...").
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .. import cpu, forward, fused_pass, kquant, kquant_tiles
from ..cpu import DRAFT, TARGET, Ask, Choice, CpuSetup, Machine
from .fp32 import WindowLinear
from .int4 import Int4Linear
from .packing import PackedLinear

PROBE_VOCAB = 512


def kquant_kernel(found: Machine, cache: Path) -> tuple[Path | None, str]:
    """The K-quant kernel built for this machine, or None and why not."""
    if not kquant.cpu_can(found.flags):
        return None, f"need {' or '.join(kquant.NEEDS)}, which this CPU lacks"
    try:
        return kquant.build(cache, found.flags), ""
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        # Said on the model line: the pair still runs, on the set-up taken instead (named after this).
        return None, (f"kept, but their kernel did not build here ({str(error)[:120]}), so the target runs on "
                      "its fallback set-up")


def tiles_verdict(kernel: Path, found: Machine | None = None) -> kquant_tiles.Verdict:
    """Whether the layers take the kernel's AMX body on this machine (`found`, else the one running),
    and from how many rows (probed once per CPU in a child process; nothing to say without AMX)."""
    found = found or cpu.machine()
    return kquant_tiles.verdict(kernel, found.name, found.flags)


def kquant_rows_exact(model: torch.nn.Module, kernel: Path, tiles_from_rows: int = 0) -> bool:
    """Whether the K-quant set-up gives a row the same bits in a window as alone, on this machine:
    checked on a one-layer probe whose Linear layers get random Q4_K codes of the same shapes (but
    for a vocabulary of PROBE_VOCAB: each tile of 16 output channels runs the same operations
    however many there are, and threads split tiles, never a sum), on the AMX body from
    `tiles_from_rows` rows where that is given."""
    probe = cpu.probe_of(model, vocab=PROBE_VOCAB)
    generator = np.random.default_rng(0)

    def random_codes(linear: torch.nn.Linear) -> torch.nn.Module:
        if not kquant.fits(linear.out_features, linear.in_features):
            return linear
        raw = kquant.random_blocks(kquant.Q4_K, linear.out_features, linear.in_features, generator)
        return kquant.KQuantLinear(kquant.pack(kquant.Q4_K, raw, linear.out_features, linear.in_features),
                                   linear.bias, kernel, tiles_from_rows)

    cpu.replace_linears(probe, random_codes)
    cpu.use_row_attention(probe)
    return forward.rows_exact(probe, window=8) and forward.rows_exact(probe, window=24)


def kquant_pays(model: torch.nn.Module, packed: Mapping[str, kquant.Packed], kernel: Path, native_bf16: bool,
                repeats: int = 5) -> bool:
    """Whether the K-quant kernel is faster here than the set-up the target would otherwise get,
    timed on the model's widest packed layer for one row and for a window of 8 (a second or two)."""
    linears = [name for name in packed if kquant.JOIN not in name
               and isinstance(model.get_submodule(name), torch.nn.Linear)]
    if not linears:
        return True
    name = max(linears, key=lambda n: packed[n].out_features * packed[n].in_features)
    linear = model.get_submodule(name)
    quant = kquant.KQuantLinear(packed[name], linear.bias, kernel)
    other = PackedLinear(linear) if native_bf16 else WindowLinear(linear)
    one, window = torch.randn(1, linear.in_features), torch.randn(8, linear.in_features)
    with torch.inference_mode():
        ms = cpu.timed_in_turns({"mine one": lambda: quant(one), "mine window": lambda: quant(window),
                                 "theirs one": lambda: other(one), "theirs window": lambda: other(window)}, repeats)
    return ms["mine one"] + ms["mine window"] < ms["theirs one"] + ms["theirs window"]


def kquant_draft_pays(draft: torch.nn.Module, kernel: Path, repeats: int = 5) -> bool:
    """Whether SpecViz's own 4-bit codes on the K-quant kernel beat torch's int4 kernel for one row
    here (a draft's every call), timed on the draft's widest Linear layer that both fit."""
    block = kquant.BLOCK[kquant.Q4]
    widest = cpu.widest_linear(draft, fits=lambda m: kquant.fits(m.out_features, m.in_features, block)
                               and Int4Linear.fits(m))
    if widest is None:
        return False
    x = torch.randn(1, widest.in_features)
    mine = kquant.KQuantLinear(kquant.quantize(widest.weight), widest.bias, kernel)
    if not hasattr(torch, "_weight_int4pack_mm_for_cpu"):
        return True
    theirs = Int4Linear(widest)
    with torch.inference_mode():
        ms = cpu.timed_in_turns({"mine": lambda: mine(x), "theirs": lambda: theirs(x)}, repeats)
    return ms["mine"] < ms["theirs"]


def to_kquant(model: torch.nn.Module, packed: Mapping[str, kquant.Packed], kernel: Path, tiles_from_rows: int = 0) -> int:
    """In place: every Linear layer the GGUF stored in K-quants runs on its codes (layers stored
    joined, which read one input, as one call: kquant.KQuantPart), and the token embeddings, where
    the GGUF stored them so, are looked up from theirs; the rest (norms, biases, attention) stays as
    loaded. One table at a time, giving the fp32 weights back as it goes. Calls of `tiles_from_rows`
    rows or more run on the AMX body (0: never). Returns how many tables."""
    def put(name: str, module: torch.nn.Module) -> None:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, module)

    for name, layer in packed.items():
        olds = [model.get_submodule(part) for part in name.split(kquant.JOIN)]
        if isinstance(olds[0], torch.nn.Embedding):
            put(name, kquant.KQuantEmbedding(layer))
        elif len(olds) == 1:
            put(name, kquant.KQuantLinear(layer, olds[0].bias, kernel, tiles_from_rows))
        else:
            biases = [old.bias if old.bias is not None else torch.zeros(old.out_features) for old in olds]
            bias = None if all(old.bias is None for old in olds) else torch.cat(biases)
            joint, start = kquant.KQuantLinear(layer, bias, kernel, tiles_from_rows), 0
            for part, old in zip(name.split(kquant.JOIN), olds):
                put(part, kquant.KQuantPart(joint, start, start + old.out_features, len(olds)))
                start += old.out_features
        del olds
    cpu.give_back_memory()
    return len(packed)


class KQuant(CpuSetup):
    name = "kquant"
    models = frozenset({TARGET, DRAFT})
    summary = ("the target on its GGUF's own K-quant codes, the draft on SpecViz's own 4-bit codes, both on "
               "SpecViz's kernel with attention one query row at a time (row-exact); the draft's decoder layers in "
               "one C call (`specviz/pair/fused_pass.py`: row-exact, not torch's bits, which a draft need not have; "
               "its call's cost in docs/BENCHMARKS.md); where the CPU has "
               "AVX512-VNNI or AVX2 with FMA and it measures faster (the target: where set-up kept its codes); "
               "calls of several rows on AMX int8 tiles where the CPU has AMX and a probe finds them exact and faster")
    unasked_only = True

    def applies(self, ask: Ask) -> bool:
        return kquant.cpu_can(ask.found.flags)

    def pays(self, ask: Ask, kernel: Path) -> bool:
        """Timed on the kernel built for this machine."""
        if ask.role == TARGET:
            return kquant_pays(ask.model, ask.packed, kernel, ask.found.native_bf16)
        return kquant_draft_pays(ask.model, kernel)

    def force(self, ask: Ask) -> Choice | str | None:
        return self._target(ask, forced=True) if ask.role == TARGET else self._draft(ask, forced=True)

    def choose(self, ask: Ask) -> Choice | str | None:
        return self._target(ask, forced=False) if ask.role == TARGET else self._draft(ask, forced=False)

    def _target(self, ask: Ask, forced: bool) -> Choice | str | None:
        """Where the codes were kept, the kernel builds, it is row-exact and (unless asked for) faster;
        else why not (nothing to say where the model has no codes and nobody asked for them)."""
        if not ask.packed:
            return "K-quant codes not kept at set-up" if forced else None
        kernel, why_not = kquant_kernel(ask.found, _kernels(ask))
        if kernel is None:
            return f"K-quant codes {why_not}"
        if not kquant_rows_exact(ask.model, kernel, tiles_verdict(kernel, ask.found).from_rows):
            return "K-quant codes not row-exact on this CPU"
        if forced:
            return Choice(self.name, ask.forced_why, None, kernel)
        if not self.pays(ask, kernel):
            return "K-quant codes measured slower here"
        return Choice(self.name, "the GGUF's own codes, row-exact, measured fastest here", None, kernel)

    def _draft(self, ask: Ask, forced: bool) -> Choice | None:
        if ask.model is None or not self.applies(ask):
            return None
        kernel, _ = kquant_kernel(ask.found, _kernels(ask))
        if kernel is None or not (forced or self.pays(ask, kernel)):
            return None
        return Choice(self.name, ask.forced_why if forced else "a one-row product measured fastest here", None, kernel)

    def prepare(self, model: torch.nn.Module, role: str, choice: Choice,
                packed: Mapping[str, kquant.Packed] | None = None) -> str:
        tiles = tiles_verdict(choice.kernel)
        tiles_said = f", {tiles.describe()}" if tiles.describe() else ""
        if role == DRAFT:
            return _prepare_draft(model, choice.kernel, tiles.from_rows, tiles_said)
        to_kquant(model, packed or {}, choice.kernel, tiles.from_rows)
        cpu.own_memory(model)
        cpu.use_row_attention(model)
        kinds = "/".join(sorted({layer.kind for layer in (packed or {}).values()}))
        return (f"target {kinds} weights of its GGUF (int8-dot kernel, activations int8 per 256, row-exact "
                f"attention{tiles_said})")


def _kernels(ask: Ask) -> Path:
    """Where the kernel is built: the model cache's folder, else the system's temporary one."""
    return ask.cache or Path(tempfile.gettempdir()) / "specviz-kernels"


def _prepare_draft(model: torch.nn.Module, kernel: Path, tiles_from_rows: int, tiles_said: str) -> str:
    block = kquant.BLOCK[kquant.Q4]
    codes = {name: kquant.quantize(module.weight) for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and kquant.fits(module.out_features, module.in_features, block)}
    # joined as the target's are (one call for q/k/v, one for gate/up): a draft call is 24 layers
    # of small products, where each call's own cost (quantizing the rows, ctypes) shows
    to_kquant(model, kquant.with_shared_inputs_joined(codes), kernel, tiles_from_rows)
    del codes
    cpu.own_memory(model)
    cpu.use_row_attention(model)  # one call over several tokens then gives each the bits of its own call
    # a draft's one-token call is 24 layers of small products: in Python their dispatch cost about
    # what the products did (fused_pass.py); the target keeps torch's layers, transformers' bits
    fused = ", its layers in one C call" if fused_pass.attach(model, kernel) else ""
    return (f"draft 4-bit (SpecViz's own codes in groups of {kquant.GROUP[kquant.Q4]}, the K-quant kernel, "
            f"row-exact{tiles_said}{fused})")


KQUANT = KQuant()
