"""Whether the K-quant kernel's AMX body (kquant_tiles.h) runs here, and from how many rows it pays:
decided once per CPU and library, in a child process, and remembered in the kernels' folder.

The body has never run on most machines that build it, and a fault in it (an illegal instruction, a
tile configuration the CPU rejects, the OS refusing the tile state) would take the whole process
down. So its first use on a machine is a probe in a child process (`verdict`): the child loads the
library with ctypes (numpy only, no torch: this file runs as a script there), checks that the body's
rows equal the one-row VNNI body's bit for bit on random layers of every code layout, and times it
against the VNNI body for 2, 4, 8 and 16 rows. A child that dies, hangs or finds a difference
leaves the tiles off, and the reason goes in the set-up's line ("AMX tiles refused: ..."). The
verdict is kept per CPU model, flags and library bytes, so the probe runs once.

The threshold it finds (`Verdict.from_rows`) is what KQuantLinear passes kq_linear_tiles: calls of at
least that many rows take the tiles, one-row calls stay on the VNNI body. The target's and the
draft's prompt prefill go through the same layers, so they take the tiles too.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER = Path(__file__).with_name("kquant_tiles.h")
CPU_FLAGS = ("amx_tile", "amx_int8")  # /proc/cpuinfo's, both needed
COMPILER_FLAGS = ("-mamx-tile", "-mamx-int8")
REFERENCE_FLAG = "-DKQ_TILE_REFERENCE"  # the tile layer in portable C: for the tests, on any CPU
TRIED_ROWS = (2, 4, 8, 16)  # the row counts the probe times, smallest first
# The code layouts the kernel reads, as (inputs per group, inputs per block, bits a code): Q4_K,
# Q6_K, Q6_K in an older cache's 8 bits, and SpecViz's own 4-bit form in blocks of 128.
LAYOUTS = ((32, 256, 4), (16, 256, 6), (16, 256, 8), (32, 128, 4))
TILE = 16
NOT_BUILT, REFUSED = 1, 2  # kq_tiles_ready's answers but 0 (ready)
PROBE_TIMEOUT = 300  # seconds: a child that hangs is refused


def cpu_has(flags: frozenset[str]) -> bool:
    return all(flag in flags for flag in CPU_FLAGS)


@dataclass(frozen=True)
class Verdict:
    """Whether calls of several rows take the tiles here: from `from_rows` rows on, 0 for never, with
    the reason where a CPU that has AMX does not use them."""

    from_rows: int
    reason: str = ""

    def describe(self) -> str:
        """The set-up line's clause: nothing where the CPU has no AMX to speak of."""
        if self.from_rows:
            return f"AMX tiles from {self.from_rows} rows"
        return f"AMX tiles refused: {self.reason}" if self.reason else ""


# ---- the layers the probe multiplies (numpy, in the kernel's layout) -----------------------------


@dataclass
class Layer:
    """One Linear layer's arrays as kq_linear reads them (kquant.c's layout), random."""

    out_features: int
    in_features: int
    group: int
    block: int
    bits: int
    arrays: tuple[np.ndarray, ...]  # codes, sc, mn, d, dmin, bias

    @classmethod
    def random(cls, layout: tuple[int, int, int], out_features: int, in_features: int,
               generator: np.random.Generator) -> Layer:
        """Any bytes are codes of a 4- or 6-bit layer (their bits packed); the 8-bit layout holds 6-bit
        codes one to a byte (the AVX2 body's int16 sums rely on it)."""
        group, block, bits = layout
        tiles, groups, blocks = out_features // TILE, in_features // group, in_features // block
        codes = generator.integers(0, 64 if bits == 8 else 256, size=out_features * in_features * bits // 8, dtype=np.uint8)
        sc = generator.integers(0, 64, size=(tiles, groups, TILE), dtype=np.int8)
        mn = generator.integers(-64, 64, size=(tiles, groups, TILE), dtype=np.int8)
        d, dmin = (generator.random((tiles, blocks, TILE), dtype=np.float32) * 0.01 for _ in range(2))
        bias = generator.standard_normal(out_features, dtype=np.float32)
        return cls(out_features, in_features, group, block, bits, (codes, sc, mn, d, dmin, bias))

    def call(self, library: ctypes.CDLL, x: np.ndarray, threads: int, tiles_from_rows: int = 0) -> np.ndarray:
        """x (rows x in) times the layer: kq_linear, or kq_linear_tiles from `tiles_from_rows` rows."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty((x.shape[0], self.out_features), dtype=np.float32)
        pointers = [a.ctypes.data for a in (*self.arrays[:5], x, self.arrays[5], out)]
        shape = (x.shape[0], self.out_features, self.in_features, self.group, self.block, self.bits)
        if tiles_from_rows:
            failed = library.kq_linear_tiles(*shape, *pointers, threads, tiles_from_rows)
        else:
            failed = library.kq_linear(*shape, *pointers, threads)
        if failed:
            raise MemoryError("the kernel found no memory for the rows' codes")
        return out


def open_library(path: Path) -> ctypes.CDLL:
    """The kernel with the entry points the tiles need typed (kquant.load types the rest)."""
    library = ctypes.CDLL(str(path))
    p, i = ctypes.c_void_p, ctypes.c_int
    library.kq_linear.argtypes = [i, i, i, i, i, i, p, p, p, p, p, p, p, p, i]
    library.kq_linear_tiles.argtypes = [i, i, i, i, i, i, p, p, p, p, p, p, p, p, i, i]
    library.kq_tiles_ready.argtypes = [ctypes.POINTER(ctypes.c_int)]
    library.kq_tile_product.argtypes = [i, i, i, p, p, p]
    library.kq_tile_product.restype = None
    return library


def tiles_ready(library: ctypes.CDLL) -> str:
    """Why this process may not use the library's tiles, or "" where it may."""
    error = ctypes.c_int(0)
    answer = library.kq_tiles_ready(ctypes.byref(error))
    if answer == NOT_BUILT:
        return "this kernel was built without the AMX body"
    if answer == REFUSED:
        return f"Linux refused the tile state ({os.strerror(error.value)})"
    return ""


def differences(library: ctypes.CDLL, seeds: Sequence[int], row_counts: Sequence[int], threads: int = 1,
                tiles_from_rows: int = 1) -> list[str]:
    """Where the tile body's rows differ from the library's own body's (VNNI, or AVX2 for a reference
    build there) with each row a call of its own, on random layers of every layout: [] where every
    row is the same bits."""
    found = []
    for seed in seeds:
        generator = np.random.default_rng(seed)
        for layout in LAYOUTS:
            layer = Layer.random(layout, 48, 512, generator)
            for rows in row_counts:
                x = generator.standard_normal((rows, 512), dtype=np.float32) * generator.random((rows, 1), dtype=np.float32)
                together = layer.call(library, x, threads, tiles_from_rows)
                alone = np.concatenate([layer.call(library, x[r:r + 1], threads) for r in range(rows)])
                if not np.array_equal(together.view(np.uint32), alone.view(np.uint32)):
                    found.append(f"{rows} rows, G={layout[0]} {layout[2]}-bit, seed {seed}")
    return found


def measured_from_rows(library: ctypes.CDLL, threads: int, repeats: int = 5) -> int:
    """The fewest rows from which the tiles time faster than the VNNI body on a layer of the real
    pair's widest shape (8960 x 1536, Q4_K), 0 where they never do."""
    generator = np.random.default_rng(0)
    layer = Layer.random(LAYOUTS[0], 8960, 1536, generator)
    pays = []
    for rows in TRIED_ROWS:
        x = generator.standard_normal((rows, 1536), dtype=np.float32)
        ms: dict[int, list[float]] = {0: [], rows: []}
        for repeat in range(repeats + 1):  # the first of each: a warm-up
            for tiles in ((0, rows) if repeat % 2 else (rows, 0)):
                started = time.perf_counter()
                layer.call(library, x, threads, tiles)
                if repeat:
                    ms[tiles].append(time.perf_counter() - started)
        pays.append(statistics.median(ms[rows]) < statistics.median(ms[0]))
    for index, rows in enumerate(TRIED_ROWS):
        if all(pays[index:]):
            return rows
    return 0


def probe_here(library_path: Path) -> dict:
    """The probe, in this process: {"from_rows": n, "reason": why not}. Run in a child (`verdict`)."""
    library = open_library(library_path)
    why_not = tiles_ready(library)
    if why_not:
        return {"from_rows": 0, "reason": why_not}
    threads = os.cpu_count() or 1
    found = differences(library, seeds=(0, 1), row_counts=(1, 2, 5, 16, 17, 40), threads=threads)
    if found:
        return {"from_rows": 0, "reason": f"rows differ from the VNNI body's ({found[0]})"}
    from_rows = measured_from_rows(library, threads)
    return {"from_rows": from_rows, "reason": "" if from_rows else "measured slower than the VNNI body here"}


# ---- the verdict, once per CPU and library ---------------------------------------------------------


def verdict(library: Path, cpu_name: str, flags: frozenset[str], command: Sequence[str] | None = None) -> Verdict:
    """Whether the library's AMX body is used here, and from how many rows: remembered beside the
    library, else probed in a child process (`command` replaces the child, for the tests)."""
    if not cpu_has(flags):
        return Verdict(0)
    key = hashlib.sha256(f"{cpu_name}\n{' '.join(sorted(flags))}\n".encode() + library.read_bytes()).hexdigest()[:16]
    remembered = library.parent / f"amx-verdict-{key}.json"
    try:
        saved = json.loads(remembered.read_text())
        return Verdict(int(saved["from_rows"]), str(saved["reason"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _probe_in_child(library, command)
    staging = remembered.with_name(remembered.name + f".tmp-{os.getpid()}")
    try:
        staging.write_text(json.dumps({"from_rows": found.from_rows, "reason": found.reason}))
        os.replace(staging, remembered)
    except OSError:  # a read-only cache: the probe runs again next time, nothing else changes
        staging.unlink(missing_ok=True)
    return found


def _probe_in_child(library: Path, command: Sequence[str] | None) -> Verdict:
    # -I: neither the environment's PYTHON* settings nor this file's folder on the child's path
    command = list(command or [sys.executable, "-I", str(Path(__file__)), str(library)])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return Verdict(0, f"the probe did not finish in {PROBE_TIMEOUT} s")
    except OSError as error:
        return Verdict(0, f"the probe did not start ({error.strerror})")
    if done.returncode < 0:
        try:
            return Verdict(0, f"the probe died of {signal.Signals(-done.returncode).name}")
        except ValueError:
            return Verdict(0, f"the probe died of signal {-done.returncode}")
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
        return Verdict(int(answer["from_rows"]), str(answer["reason"]))
    except (IndexError, ValueError, KeyError, TypeError):
        said = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        return Verdict(0, f"the probe failed ({said[:120]})")


if __name__ == "__main__":  # the child: python -I kquant_tiles.py LIBRARY
    print(json.dumps(probe_here(Path(sys.argv[1]))))
