"""The target at its GGUF's own precision: Linear layers that keep the file's K-quant codes (Q4_K in
4 bits, Q6_K in 6) and multiply them on the CPU with a kernel of SpecViz's own (kquant.c).

Why a kernel of its own: torch's weight-only int4 and int8 kernels read a quarter or half of bf16's
bytes and so are fast for one row, but their cost grows with the rows (8 rows cost what bf16 does,
16 twice that; ../shared/KERNELS.md), and a verification window is 8-20 rows. The kernel here
unpacks each tile of 16 output channels x one group of inputs once and multiplies it with every row
of the call with the CPU's integer dot product (AVX512-VNNI, or AVX2's pair of multiply-adds), the
way llama.cpp multiplies K-quants, but with all the rows sharing the unpacked tile. Activations are
quantized to int8 per row and per block of 256 inputs (llama.cpp's Q8_K scheme), so a row's result
depends on that row alone and is the same bits in a one-token pass and in a window: greedy
speculative decoding stays lossless by construction, which `forward.rows_exact` checks at load.

The weights are exactly the GGUF's: code, per-group integer scale and minimum, per-256 float
scales, d*sc*code - dmin*mn. Only the activations are rounded (to 8 bits per value, as llama.cpp
does), so this target's greedy answer can differ from the fp32 copy's in places.

The kernel is compiled once per machine with the system's C compiler into the model cache
(`build`), for AVX512-VNNI or else AVX2; a CPU with neither, or a machine without a compiler, keeps
the other set-ups. Where the CPU has AMX, the VNNI build also holds a body on AMX int8 tiles
(kquant_tiles.h) for calls of several rows, used only where a probe in a child process finds it
runs, gives the VNNI body's bits and pays (kquant_tiles.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeAlias

import numpy as np
import torch

from . import kquant_tiles

Array: TypeAlias = np.ndarray | torch.Tensor
SOURCE = Path(__file__).with_name("kquant.c")
PASS_HEADER = SOURCE.with_name("kquant_pass.h")  # a decoder's layers in one call (fused_pass.py)
COMMON_FLAGS = ("-O3", "-shared", "-fPIC", "-fopenmp", "-mfma")
# The instruction sets the kernel has a body for, best first: the name the model line gives it, the
# /proc/cpuinfo flags it needs, and the compiler's flags that select that body.
INSTRUCTION_SETS = (("avx512_vnni", ("avx512f", "avx512bw", "avx512_vnni"),
                     ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni")),
                    ("avx2", ("avx2", "fma"), ("-mavx2",)))
NEEDS = tuple(name for name, _, _ in INSTRUCTION_SETS)  # what a CPU with neither body's set lacks
TILE, SUPER = 16, 256  # output channels per tile; inputs per block of a GGUF's K-quants
# Q4_K, Q6_K: a GGUF's own; Q4: SpecViz's quantization of a model it only has in float (a draft),
# Q4_K's form in blocks of 128 inputs, which the real pair's draft's widths (896, 4864) divide.
Q4_K, Q6_K, Q4 = "Q4_K", "Q6_K", "Q4"
GROUP = {Q4_K: 32, Q6_K: 16, Q4: 32}  # inputs per integer scale
BLOCK = {Q4_K: SUPER, Q6_K: SUPER, Q4: 128}  # inputs per float scale (and per activation scale)
BLOCK_BYTES = {Q4_K: 144, Q6_K: 210}  # bytes of one block of 256 weights in the GGUF


@dataclass
class Packed:
    """One Linear layer's weights as the kernel reads them (layout in kquant.c)."""

    kind: str  # Q4_K or Q6_K: what the GGUF stored; Q4: quantized by SpecViz (`quantize`)
    out_features: int
    in_features: int
    codes: torch.Tensor  # uint8: 4-bit codes two to a byte (Q4_K), 6-bit codes four to 3 bytes (Q6_K)
    sc: torch.Tensor  # int8 (tiles, groups, 16)
    mn: torch.Tensor  # int8 (tiles, groups, 16)
    d: torch.Tensor  # float32 (tiles, blocks, 16)
    dmin: torch.Tensor  # float32 (tiles, blocks, 16)

    @property
    def group(self) -> int:
        return GROUP[self.kind]

    @property
    def block(self) -> int:
        return BLOCK[self.kind]

    @property
    def bits(self) -> int:
        """Bits a code takes in `codes`: Q6_K's 6 (8, one to a byte, in a cache packed before
        2026-12-07, which the kernel still reads), the others' 4."""
        if self.kind != Q6_K:
            return 4
        return 8 if self.codes.numel() == self.out_features * self.in_features else 6

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}.{name}": getattr(self, name) for name in ("codes", "sc", "mn", "d", "dmin")}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], prefix: str, kind: str) -> Packed:
        d = tensors[f"{prefix}.d"]
        out_features, in_features = d.shape[0] * TILE, d.shape[1] * BLOCK[kind]
        return cls(kind, out_features, in_features, *(tensors[f"{prefix}.{n}"] for n in ("codes", "sc", "mn", "d", "dmin")))

    def weights(self) -> torch.Tensor:
        """The float32 weights (out x in) these codes and scales stand for: the kernel's layout read
        back, for checking it against the GGUF's own dequantization."""
        return self.rows(torch.arange(self.out_features))

    def rows(self, channels: torch.Tensor) -> torch.Tensor:
        """The float32 weights of some output channels (len x in), the same values `weights` gives:
        how a token embedding table kept in its codes looks its rows up."""
        channels = channels.reshape(-1).long()
        tile, channel = channels // TILE, channels % TILE
        stored_steps = {4: self.group // 8, 6: 3, 8: self.group // 4}[self.bits]  # see kquant.c's layout
        tiled = self.codes.view(self.out_features // TILE, self.in_features // self.group, stored_steps, TILE, 4)
        codes = tiled[tile, :, :, channel]  # (channels, groups, stored steps, 4 inputs)
        if self.bits == 4:
            codes = torch.cat([codes & 0xF, codes >> 4], dim=2)
        elif self.bits == 6:
            top = codes >> 6
            last = top[:, :, 0] | (top[:, :, 1] << 2) | (top[:, :, 2] << 4)
            codes = torch.cat([codes & 0x3F, last[:, :, None]], 2)
        ours = (lambda a: a[tile, :, channel].numpy())  # (channels, groups or blocks)
        return torch.from_numpy(_weights(codes.reshape(len(channels), -1).numpy(), ours(self.sc), ours(self.mn),
                                         ours(self.d), ours(self.dmin), self.group, self.block))

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.sc, self.mn, self.d, self.dmin))


# ---- from the GGUF's blocks -----------------------------------------------------------------


def _q4_k_fields(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q4_K blocks (rows, blocks, 144 bytes) -> codes (rows, blocks*256) 0..15, sc and mn (rows, blocks*8),
    d and dmin (rows, blocks): weight = d*sc*code - dmin*mn."""
    rows, count = blocks.shape[:2]
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    dmin = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    s = blocks[..., 4:16].astype(np.int16)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 0xF) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
    qs = blocks[..., 16:144].reshape(rows, count, 4, 32)
    codes = np.stack([qs & 0xF, qs >> 4], axis=3)  # (rows, blocks, 4 chunks, low/high, 32): sub-block 2c, 2c+1
    return (codes.reshape(rows, count * SUPER), sc.reshape(rows, -1), mn.reshape(rows, -1), d, dmin)


def _q6_k_fields(blocks: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q6_K blocks (rows, blocks, 210 bytes) -> codes 0..63, sc and mn (rows, blocks*16), d and dmin:
    weight = d*sc*(code - 32) = d*sc*code - (32*d)*sc, the Q4_K form with mn = sc and dmin = 32*d."""
    rows, count = blocks.shape[:2]
    ql, qh = blocks[..., 0:128].astype(np.uint8), blocks[..., 128:192].astype(np.uint8)
    sc = blocks[..., 192:208].copy().view(np.int8).astype(np.int16)
    d = blocks[..., 208:210].copy().view(np.float16)[..., 0].astype(np.float32)
    halves = []
    for h in range(2):
        low, high = ql[..., 64 * h: 64 * h + 32], ql[..., 64 * h + 32: 64 * h + 64]
        top = qh[..., 32 * h: 32 * h + 32]
        halves += [(low & 0xF) | ((top & 3) << 4), (high & 0xF) | (((top >> 2) & 3) << 4),
                   (low >> 4) | (((top >> 4) & 3) << 4), (high >> 4) | (((top >> 6) & 3) << 4)]
    codes = np.stack(halves, axis=2)  # (rows, blocks, 8 runs of 32 values, 32)
    return codes.reshape(rows, count * SUPER), sc.reshape(rows, -1), sc.reshape(rows, -1), d, 32 * d


def fields(kind: str, raw: np.ndarray, out_features: int, in_features: int) -> tuple[np.ndarray, ...]:
    """A GGUF tensor's raw bytes (any shape holding out x in/256 blocks) as codes, sc, mn, d, dmin."""
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(out_features, in_features // SUPER, BLOCK_BYTES[kind])
    return (_q4_k_fields if kind == Q4_K else _q6_k_fields)(blocks)


def dequantize(kind: str, raw: np.ndarray, out_features: int, in_features: int) -> np.ndarray:
    """The weights a GGUF tensor stands for, float32 (out x in), from the same fields the kernel reads."""
    return _weights(*fields(kind, raw, out_features, in_features), GROUP[kind], SUPER)


def _weights(codes: np.ndarray, sc: np.ndarray, mn: np.ndarray, d: np.ndarray, dmin: np.ndarray,
             group: int, block: int) -> np.ndarray:
    """d*sc*code - dmin*mn in float32, as the GGUF's own dequantization computes it."""
    scale = np.repeat(np.repeat(d, block // group, axis=1) * sc, group, axis=1)
    offset = np.repeat(np.repeat(dmin, block // group, axis=1) * mn, group, axis=1)
    return (scale * codes - offset).astype(np.float32)


def fits(out_features: int, in_features: int, block: int = SUPER) -> bool:
    """The kernel's shapes: output channels in tiles of 16, inputs in whole blocks."""
    return out_features % TILE == 0 and in_features % block == 0


def random_blocks(kind: str, out_features: int, in_features: int, generator: np.random.Generator) -> np.ndarray:
    """GGUF blocks of random codes and scales (finite, small): for probes and tests."""
    blocks = generator.integers(0, 256, size=(out_features, in_features // SUPER, BLOCK_BYTES[kind]), dtype=np.uint8)
    scales = (generator.random((out_features, in_features // SUPER, 1)) * 0.01).astype(np.float16).view(np.uint8)
    if kind == Q4_K:
        blocks[..., 0:2], blocks[..., 2:4] = scales, scales
    else:
        blocks[..., 208:210] = scales
    return blocks


def pack(kind: str, raw: np.ndarray, out_features: int, in_features: int) -> Packed:
    """A GGUF tensor (Q4_K or Q6_K) in the kernel's layout."""
    if not fits(out_features, in_features):
        raise ValueError(f"a {out_features}x{in_features} layer does not tile by {TILE}x{SUPER}")
    return _tiled(kind, *fields(kind, raw, out_features, in_features), out_features, in_features)


def quantize(weight: torch.Tensor) -> Packed:
    """A float weight (out x in) in SpecViz's own 4-bit form (kind Q4), for a model that has no
    K-quant codes of its own (the real pair's draft): per group of 32 inputs a scale and a minimum,
    each an integer times its block's float scale, as Q4_K does, in blocks of 128. Lossy, which a
    draft may be: only its guesses' agreement with the target matters. In torch's float32
    operations, each exactly rounded (half to even), so the codes are the same on any machine and
    the same as the numpy version this replaced (3.7x slower) gave."""
    out_features, in_features = weight.shape
    if not fits(out_features, in_features, BLOCK[Q4]):
        raise ValueError(f"a {out_features}x{in_features} layer does not tile by {TILE}x{BLOCK[Q4]}")
    per_block = BLOCK[Q4] // GROUP[Q4]
    w = weight.detach().float().reshape(out_features, -1, per_block, GROUP[Q4])  # may be the weight itself: read only
    low, high = w.amin(-1), w.amax(-1)  # (out, blocks, groups)
    step = ((high - low) / 15).clamp_min_(1e-12)
    d = step.amax(-1).clamp_min_(1e-12) / 127
    sc = (step / d[..., None]).round_().clamp_(1, 127)
    dmin = low.abs().amax(-1).clamp_min_(1e-12) / 127
    mn = (-low / dmin[..., None]).round_().clamp_(-127, 127)
    scale = (d[..., None] * sc)[..., None]
    offset = (dmin[..., None] * mn)[..., None]
    codes = ((w + offset) / scale).round_().clamp_(0, 15)
    return _tiled(Q4, codes.reshape(out_features, in_features), sc.reshape(out_features, -1),
                  mn.reshape(out_features, -1), d, dmin, out_features, in_features)


def _tiled(kind: str, codes: Array, sc: Array, mn: Array, d: Array, dmin: Array,
           out_features: int, in_features: int) -> Packed:
    """Codes (out x in) and scales (out x groups, out x blocks) in the kernel's layout (kquant.c)."""
    group, tiles = GROUP[kind], out_features // TILE
    steps = group // 4
    codes, sc, mn, d, dmin = (torch.as_tensor(a) for a in (codes, sc, mn, d, dmin))
    # (tiles, 16 channels, groups, steps, 4 inputs) -> (tiles, groups, steps, 16, 4): a step's 64 bytes
    tiled = codes.to(torch.uint8).reshape(tiles, TILE, -1, steps, 4).permute(0, 2, 3, 1, 4)
    if kind == Q6_K:  # 6 bits: steps 0, 1, 2 in bits 0-5 of three vectors, step 3 in their bits 6-7
        last = tiled[:, :, 3:]
        tiled = tiled[:, :, :3] | (torch.cat([last & 3, (last >> 2) & 3, last >> 4], 2) << 6)
    else:
        tiled = tiled[:, :, : steps // 2] | (tiled[:, :, steps // 2:] << 4)

    def per_group(a: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return a.to(dtype).reshape(tiles, TILE, -1).transpose(1, 2).contiguous()

    return Packed(kind, out_features, in_features, tiled.contiguous().reshape(-1), per_group(sc, torch.int8),
                  per_group(mn, torch.int8), per_group(d, torch.float32), per_group(dmin, torch.float32))


# ---- the kernel -----------------------------------------------------------------------------


def compiler_flags(flags: frozenset[str]) -> tuple[str, ...] | None:
    """The flags that compile the kernel's best body for a CPU with these /proc/cpuinfo flags, or None;
    with AMX's beside the VNNI body's where the CPU has AMX (the tile body sits beside that one)."""
    for name, needs, chosen in INSTRUCTION_SETS:
        if all(flag in flags for flag in needs):
            amx = kquant_tiles.COMPILER_FLAGS if name == "avx512_vnni" and kquant_tiles.cpu_has(flags) else ()
            return COMMON_FLAGS + chosen + amx
    return None


def cpu_can(flags: frozenset[str]) -> bool:
    return compiler_flags(flags) is not None


def build(into: Path, flags: frozenset[str], reference_tiles: bool = False) -> Path:
    """The kernel compiled for a CPU with these flags, in `into` (once: its name carries the sources'
    and the flags' hash). Where the compiler has no AMX intrinsics, without the AMX body.
    `reference_tiles`: with the AMX body on the tile layer's portable C (the tests', on any CPU)."""
    chosen = compiler_flags(flags)
    if chosen is None:
        raise RuntimeError(f"the kernel needs {' or '.join(NEEDS)}")
    if reference_tiles:
        chosen += (kquant_tiles.REFERENCE_FLAG,)
    try:
        return _compiled(into, chosen)
    except RuntimeError:
        if not set(kquant_tiles.COMPILER_FLAGS) & set(chosen):
            raise
        return _compiled(into, tuple(flag for flag in chosen if flag not in kquant_tiles.COMPILER_FLAGS))


def _compiled(into: Path, chosen: tuple[str, ...]) -> Path:
    sources = SOURCE.read_bytes() + kquant_tiles.HEADER.read_bytes() + PASS_HEADER.read_bytes()  # kquant.c includes both
    digest = hashlib.sha256(sources + " ".join(chosen).encode()).hexdigest()[:16]
    library = into / f"kquant-{digest}.so"
    if library.is_file():
        return library
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc or gcc) on this machine")
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=into, suffix=".so.tmp", delete=False) as staging:
        pass
    try:
        result = subprocess.run([compiler, *chosen, str(SOURCE), "-o", staging.name, "-lm"], check=False,
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {(result.stderr or result.stdout).strip()[:300]}")
        os.replace(staging.name, library)
    finally:
        Path(staging.name).unlink(missing_ok=True)
    return library


@cache
def load(library: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library))
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.kq_quantize.argtypes = [p, i, i, i, i, p, p, p]  # what kq_linear does to the rows first
    lib.kq_quantize.restype = None
    lib.kq_linear.argtypes = [i, i, i, i, i, i, p, p, p, p, p, p, p, p, i]
    lib.kq_linear.restype = i
    lib.kq_linear_tiles.argtypes = [*lib.kq_linear.argtypes, i]  # and the rows from which tiles are used
    lib.kq_linear_tiles.restype = i
    return lib


class KQuantLinear(torch.nn.Module):
    """A Linear layer on the GGUF's K-quant codes (see the module's docstring). float32 in and out.
    `tiles_from_rows`: calls of that many rows or more run on the AMX body (kquant_tiles.Verdict), 0 never."""

    def __init__(self, packed: Packed, bias: torch.Tensor | None, library: Path, tiles_from_rows: int = 0):
        super().__init__()
        self.packed, self.library, self.tiles_from_rows = packed, library, tiles_from_rows
        self.in_features, self.out_features = packed.in_features, packed.out_features
        # a copy of its own: the loaded bias may lie in the weights file's mapping (cpu.own_memory)
        self.bias = None if bias is None else bias.detach().float().clone()
        # a token's pass makes about 200 of these calls: what does not change is looked up once
        self._call = load(library).kq_linear_tiles if tiles_from_rows else load(library).kq_linear
        self._tiles = (tiles_from_rows,) if tiles_from_rows else ()
        self._layer = (packed.out_features, packed.in_features, packed.group, packed.block, packed.bits,
                       *(t.data_ptr() for t in (packed.codes, packed.sc, packed.mn, packed.d, packed.dmin)))
        self._bias = 0 if self.bias is None else self.bias.data_ptr()
        self.last: list = [None, None, 0]  # for KQuantPart: an input, its output, how many parts still read it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if rows.dtype != torch.float32 or not rows.is_contiguous():
            rows = rows.float().contiguous()
        count = rows.shape[0]
        out = torch.empty(count, self.out_features)
        if self._call(count, *self._layer, rows.data_ptr(), self._bias, out.data_ptr(), torch.get_num_threads(),
                      *self._tiles):
            raise MemoryError(f"no memory for the codes of {count} rows")
        out = out.view(*x.shape[:-1], self.out_features)
        return out if x.dtype == torch.float32 else out.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.packed.kind} codes"


class KQuantEmbedding(torch.nn.Module):
    """A token embedding table kept in its GGUF's codes: a token's row is unpacked when it is looked up,
    to the same float32 values the fp32 table holds (a pass looks up a few rows; the fp32 table of the
    real pair's target is 0.9 GB, its Q4_K codes 0.14)."""

    def __init__(self, packed: Packed):
        super().__init__()
        self.packed = packed
        self.num_embeddings, self.embedding_dim = packed.out_features, packed.in_features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.packed.rows(ids).view(*ids.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {self.packed.kind} codes"


class KQuantPart(torch.nn.Module):
    """One of several Linear layers that read the same input (a layer's q, k and v projections, its
    MLP's gate and up), all run as one KQuantLinear over their codes concatenated (`joined`): one
    kernel call and one quantization of the rows instead of two or three. A channel's result depends
    on its own tile and the row alone, so every result is the same bits as apart. The first part
    called with an input computes all parts; the others, called with that very tensor, take their
    columns of it. The joint output is let go once every part has taken its columns: held until the
    next call, a long prompt's would take memory (gate and up: 72 KB a token in each layer).

    The call reads only plain attributes and changes the shared record in place: torch's module
    attribute machinery (a registered submodule's lookup, a module's __setattr__) cost about 15 us
    a part, more than joining saves (a target pass was 1.04x slower joined than apart that way)."""

    def __init__(self, joint: KQuantLinear, start: int, stop: int, parts: int):
        super().__init__()
        self.joint, self.start, self.stop, self.parts = joint, start, stop, parts
        self.in_features, self.out_features = joint.in_features, stop - start
        self.last, self.compute = joint.last, joint.forward  # plain attributes: see the class's docstring

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = self.last  # [input, output, parts yet to take their columns], shared by the parts
        if last[0] is not x:  # (identity: the input is held, so its id is not reused)
            last[0], last[1], last[2] = x, self.compute(x), self.parts
        columns = last[1][..., self.start:self.stop]
        last[2] -= 1
        if last[2] == 0:
            last[0] = last[1] = None
        return columns

    def extra_repr(self) -> str:
        return f"outputs {self.start}-{self.stop} of {self.joint.out_features}"


# Sibling modules (of one transformers decoder layer) that read the same input.
SHARED_INPUT = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("mlp.gate_proj", "mlp.up_proj"))


JOIN = ","  # between the module names of layers stored joined ("...q_proj,...k_proj")


def joinable(packed: dict[str, Packed]) -> list[list[str]]:
    """The groups of packed modules to run as one call (KQuantPart): siblings reading the same input
    whose codes are of one kind (a Q4_K_M file stores some v projections in Q6_K, its q and k in Q4_K)."""
    groups = []
    for name, first in packed.items():
        for siblings in SHARED_INPUT:
            if name.endswith("." + siblings[0]):
                layer = name[: -len(siblings[0])]
                group = [layer + s for s in siblings if layer + s in packed and packed[layer + s].kind == first.kind
                         and packed[layer + s].in_features == first.in_features]
                if len(group) > 1:
                    groups.append(group)
    return groups


def joined(parts: list[Packed]) -> Packed:
    """Layers of one kind and input width as one layer, their output tiles one after another."""
    first = parts[0]
    if any(part.kind != first.kind or part.in_features != first.in_features for part in parts):
        raise ValueError("only layers of one kind and input width join")
    return Packed(first.kind, sum(part.out_features for part in parts), first.in_features,
                  *(torch.cat([getattr(part, name) for part in parts]) for name in ("codes", "sc", "mn", "d", "dmin")))


def with_shared_inputs_joined(packed: dict[str, Packed]) -> dict[str, Packed]:
    """The packed layers with each joinable group stored as one, under its modules' names joined by
    JOIN. Done when the file is written, so that a load maps the joined codes as they are (joining at
    load would hold a copy beside the file's pages)."""
    out = dict(packed)
    for group in joinable(packed):
        out[JOIN.join(group)] = joined([out.pop(name) for name in group])
    return out


# ---- the packed file in the cache -------------------------------------------------------------

# GGUF tensor names (llama.cpp's) -> the module each is in transformers' Qwen2/Llama models.
_MODULES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
            "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
            "ffn_down": "mlp.down_proj"}


def module_name(gguf_name: str) -> str | None:
    """The transformers module of a GGUF weight ("blk.3.ffn_up.weight" -> "model.layers.3.mlp.up_proj"),
    or None for what is neither a Linear layer's weight nor the token embeddings (norms, biases)."""
    if gguf_name == "output.weight":
        return "lm_head"
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens"
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in _MODULES:
        return f"model.layers.{parts[1]}.{_MODULES[parts[2]]}"
    return None


def pack_gguf(gguf_path: Path, destination: Path) -> int:
    """Every Linear layer of a GGUF file stored in Q4_K or Q6_K, and its token embeddings if so stored,
    packed for the kernel into one safetensors file (written whole or not at all), layers that read
    one input joined (`with_shared_inputs_joined`); returns how many tables it holds. Those in other
    types are left out: they keep the set-up the rest of the model gets."""
    from gguf import GGUFReader
    from safetensors.torch import save_file

    packed: dict[str, Packed] = {}
    for tensor in GGUFReader(str(gguf_path)).tensors:
        name, kind = module_name(tensor.name), tensor.tensor_type.name
        if name is None or kind not in GROUP:
            continue
        in_features, out_features = (int(n) for n in tensor.shape[:2])
        if not fits(out_features, in_features):
            continue
        packed[name] = pack(kind, np.asarray(tensor.data), out_features, in_features)
    packed = with_shared_inputs_joined(packed)
    tensors = {key: value for name, layer in packed.items() for key, value in layer.tensors(name).items()}
    staging = destination.with_name(destination.name + f".tmp-{os.getpid()}")
    try:
        save_file(tensors, str(staging), metadata={name: layer.kind for name, layer in packed.items()})
        os.replace(staging, destination)
    finally:
        staging.unlink(missing_ok=True)
    return len(packed)


def read_packed(path: Path) -> dict[str, Packed]:
    """The packed layers of a file written by `pack_gguf`, by module name (joined layers: their names
    joined by JOIN; a file packed before layers were joined has none)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as handle:
        kinds = dict(handle.metadata() or {})
    tensors = load_file(str(path))
    return {name: Packed.from_tensors(tensors, name, kind) for name, kind in kinds.items()}
