"""The K-quant kernel's AMX body (pair/kquant_tiles.h, kquant_tiles.py): its tile layer's portable C
reference against numpy's integers, the body on that reference equal to this CPU's body (VNNI or
AVX2) bit for bit on random Q4_K/Q6_K layers of 1-64 rows, the real instructions where the CPU has
AMX, and the probe in a child process: a child that dies leaves the tiles off with the reason, and
the parent running."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_kquant import kquant_llama, random_packing

from specviz.pair import cpu, forward, kquant, kquant_tiles, setups
from specviz.pair.setups import kquant_codes

here = cpu.machine()
needs_amx = pytest.mark.skipif("-mamx-int8" not in (kquant.compiler_flags(here.flags) or ()),
                               reason="this CPU has no AMX (amx_tile, amx_int8): the real tiles run only there")
AMX_FLAGS = frozenset({"amx_tile", "amx_int8", "avx512f", "avx512bw", "avx512_vnni"})
KILLS_ITSELF = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The kernel with the AMX body on the tile layer's portable C."""
    if not kquant.cpu_can(here.flags):
        pytest.skip("this CPU has neither AVX512-VNNI nor AVX2")
    return kquant.build(tmp_path_factory.mktemp("kernels"), here.flags, reference_tiles=True)


@pytest.mark.parametrize("rows, n, k", [(16, 16, 16), (5, 16, 8), (3, 7, 4), (1, 1, 1)])
def test_the_reference_tile_product_is_the_integer_product(reference, rows, n, k):
    library = kquant_tiles.open_library(reference)
    generator = np.random.default_rng(rows * 100 + n)
    a = generator.integers(-128, 128, size=(rows, 4 * k), dtype=np.int8)  # signed, a row's 4k bytes
    b = generator.integers(0, 256, size=(k, 4 * n), dtype=np.uint8)  # unsigned: row j's byte 4n + t is (4j + t, n)
    out = np.full((rows, n), 7, dtype=np.int32)  # the product starts from a zeroed tile
    library.kq_tile_product(rows, n, k, a.ctypes.data, b.ctypes.data, out.ctypes.data)
    as_matrix = b.reshape(k, n, 4).transpose(0, 2, 1).reshape(4 * k, n)
    assert np.array_equal(out, a.astype(np.int64) @ as_matrix.astype(np.int64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_reference_tile_body_is_this_cpus_bodys_bits_on_every_layout(reference, seed):
    library = kquant_tiles.open_library(reference)
    assert kquant_tiles.tiles_ready(library) == ""
    rows = (1, 2, 3, 7, 16, 17, 31, 33, 64)  # odd counts, and more than a tile's 16
    assert kquant_tiles.differences(library, seeds=(seed,), row_counts=rows, threads=2) == []


@pytest.mark.parametrize("kind", [kquant.Q4_K, kquant.Q6_K])
@pytest.mark.parametrize("rows", [1, 2, 9, 16, 23, 64])
def test_gguf_layers_on_the_reference_tiles_are_the_same_bits_as_alone(reference, kind, rows):
    raw = kquant.random_blocks(kind, 48, 768, np.random.default_rng(rows))
    packed = kquant.pack(kind, raw, 48, 768)
    bias = torch.randn(48)
    tiles, plain = (kquant.KQuantLinear(packed, bias, reference, from_rows) for from_rows in (2, 0))
    x = torch.randn(rows, 768, generator=torch.Generator().manual_seed(rows))
    together = tiles(x)
    assert torch.equal(together, plain(x))
    assert torch.equal(together, torch.cat([plain(x[i:i + 1]) for i in range(rows)]))


@needs_amx
def test_the_real_tiles_are_the_vnni_bodys_bits(tmp_path):
    """On a CPU with AMX: first the probe in its child process (a fault there fails this test, not
    the test run), then the same checks on the instructions in this process."""
    kernel = kquant.build(tmp_path, here.flags)
    found = kquant_tiles.verdict(kernel, here.name, here.flags)
    if found.reason.startswith("Linux refused"):
        pytest.skip(found.reason)  # the set-up then keeps the VNNI body
    assert not found.reason.startswith(("the probe", "rows differ", "this kernel")), found.reason
    library = kquant_tiles.open_library(kernel)
    assert kquant_tiles.tiles_ready(library) == ""
    assert kquant_tiles.differences(library, seeds=(0, 1, 2), row_counts=(1, 2, 3, 7, 16, 17, 33, 64), threads=2) == []
    a = np.arange(-64, 64, dtype=np.int8).reshape(2, 64)
    b = np.arange(1024, dtype=np.int64).astype(np.uint8).reshape(16, 64)
    out = np.empty((2, 16), dtype=np.int32)
    library.kq_tile_product(2, 16, 16, a.ctypes.data, b.ctypes.data, out.ctypes.data)
    assert np.array_equal(out, a.astype(np.int64) @ b.reshape(16, 16, 4).transpose(0, 2, 1).reshape(64, 16))


def test_the_amx_flags_join_the_vnni_bodys_only():
    assert kquant.compiler_flags(AMX_FLAGS)[-2:] == ("-mamx-tile", "-mamx-int8")
    assert "-mamx-tile" not in kquant.compiler_flags(frozenset({"avx512f", "avx512bw", "avx512_vnni"}))
    assert "-mamx-tile" not in kquant.compiler_flags(frozenset({"avx2", "fma", "amx_tile", "amx_int8"}))


def test_a_probe_that_crashes_leaves_the_tiles_off_with_the_reason_and_is_remembered(tmp_path):
    library = tmp_path / "kquant-test.so"
    library.write_bytes(b"stands for a library: its bytes key the verdict")
    crashed = kquant_tiles.verdict(library, "a CPU with AMX", AMX_FLAGS, command=KILLS_ITSELF)
    assert crashed == kquant_tiles.Verdict(0, "the probe died of SIGILL")  # and this process still runs
    assert crashed.describe() == "AMX tiles refused: the probe died of SIGILL"
    # remembered: the next load does not probe again (a command that would fail is never run)
    assert kquant_tiles.verdict(library, "a CPU with AMX", AMX_FLAGS, command=["/nonexistent"]) == crashed
    # another CPU model is another verdict
    other = kquant_tiles.verdict(library, "another CPU", AMX_FLAGS, command=["/nonexistent"])
    assert other.from_rows == 0 and other.reason.startswith("the probe did not start")


def test_without_amx_nothing_is_probed_and_nothing_said(tmp_path):
    library = tmp_path / "kquant-test.so"
    library.write_bytes(b"x")
    none = kquant_tiles.verdict(library, "a CPU", frozenset({"avx512f", "avx512_vnni"}), command=KILLS_ITSELF)
    assert none == kquant_tiles.Verdict(0) and none.describe() == ""
    assert list(tmp_path.iterdir()) == [library]
    assert kquant_tiles.Verdict(4).describe() == "AMX tiles from 4 rows"


def test_the_real_probe_child_answers_for_a_kernel_without_the_tile_body(tmp_path):
    if not kquant.cpu_can(here.flags):
        pytest.skip("this CPU has neither AVX512-VNNI nor AVX2")
    plain = kquant.build(tmp_path, here.flags - {"amx_tile", "amx_int8"})  # no AMX flags: no tile body
    found = kquant_tiles.verdict(plain, "a CPU said to have AMX", here.flags | {"amx_tile", "amx_int8"})
    assert found == kquant_tiles.Verdict(0, "this kernel was built without the AMX body")


@pytest.mark.slow
def test_the_set_up_runs_the_tiles_from_the_verdicts_rows_and_says_so(reference, monkeypatch):
    target, plain = kquant_llama(6), kquant_llama(6)
    packed = random_packing(target, 6)
    monkeypatch.setattr(kquant_codes, "tiles_verdict", lambda kernel, found=None: kquant_tiles.Verdict(2))
    line = setups.prepare_target(target, "kquant", packed=packed, kernel=reference)
    assert "AMX tiles from 2 rows" in line
    assert target.lm_head.tiles_from_rows == 2
    monkeypatch.setattr(kquant_codes, "tiles_verdict", lambda kernel, found=None: kquant_tiles.Verdict(0))
    setups.prepare_target(plain, "kquant", packed=packed, kernel=reference)
    assert plain.lm_head.tiles_from_rows == 0
    ids = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(6))  # a prompt's prefill
    with torch.inference_mode():
        assert torch.equal(target(input_ids=ids).logits, plain(input_ids=ids).logits)
    assert forward.rows_exact(target)


def test_a_refused_verdict_keeps_the_vnni_body_and_says_why(reference, monkeypatch):
    draft = kquant_llama(7)
    monkeypatch.setattr(kquant_codes, "tiles_verdict",
                        lambda kernel, found=None: kquant_tiles.Verdict(0, "the probe died of SIGILL"))
    line = setups.prepare_draft(draft, "kquant", reference)
    assert line.startswith("draft 4-bit") and "AMX tiles refused: the probe died of SIGILL" in line
    assert draft.lm_head.tiles_from_rows == 0
