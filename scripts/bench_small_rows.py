"""One of the target's projections over 1-16 rows, computed every way torch offers on this CPU.

Why a verification pass over a few tokens costs more than a one-token pass is decided in the
Linear layers (docs/BENCHMARKS.md, "What a pass costs"): this times one 8960x1536 product (the
real pair's target MLP; --out/--in for another shape) per way and row count, median of many
calls, and says whether a row's result is the same bits alone as among 16 rows (what the
lossless check would need from a set-up). Run it alone: two torch processes at once make every
figure noise.

    python scripts/bench_small_rows.py [--out 8960 --in 1536 --repeats 50 --threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from specviz.pair import cpu, kquant
from specviz.pair.setups.kquant_codes import kquant_kernel

ROWS = (1, 2, 4, 8, 16)
Product = Callable[[torch.Tensor], torch.Tensor]


def ways(weight: torch.Tensor) -> dict[str, Product]:
    """Every way to compute x @ weight.T that this torch build offers here."""
    out: dict[str, Product] = {
        "fp32 F.linear (today)": lambda x: F.linear(x, weight),
        "fp32 weight @ x.T (operand order)": lambda x: (weight @ x.T).T,
        "fp32 one row at a time": lambda x: torch.cat([F.linear(row[None], weight) for row in x]),
    }
    if torch.backends.mkldnn.is_available():
        packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        out["fp32 packed by oneDNN"] = lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    if torch.backends.mkl.is_available():
        for batch in (1, 8):
            try:
                mkl_packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, batch)
            except (RuntimeError, AttributeError):
                continue
            out[f"fp32 packed by MKL for {batch} rows"] = (
                lambda x, p=mkl_packed, b=batch: torch.ops.mkl._mkl_linear(x, p, weight, None, b))
    bf16 = weight.to(torch.bfloat16)
    out["bf16 F.linear"] = lambda x: F.linear(x.to(torch.bfloat16), bf16)
    if torch.backends.mkldnn.is_available():
        try:
            bf16_packed = torch.ops.mkldnn._reorder_linear_weight(bf16)
            out["bf16 packed by oneDNN"] = lambda x: torch.ops.mkldnn._linear_pointwise(
                x.to(torch.bfloat16), bf16_packed, None, "none", [], "")
        except RuntimeError:
            pass
    library, _ = kquant_kernel(cpu.machine(), Path(tempfile.gettempdir()) / "specviz-kernels")
    if library is not None:  # SpecViz's K-quant kernel on random codes of this shape (timing only)
        rows, cols = weight.shape
        for kind in (kquant.Q4_K, kquant.Q6_K):
            raw = kquant.random_blocks(kind, rows, cols, np.random.default_rng(0))
            out[f"{kind} K-quant kernel"] = kquant.KQuantLinear(kquant.pack(kind, raw, rows, cols), None, library)
    return out


def median_ms(product: Product, x: torch.Tensor, repeats: int) -> float:
    product(x)  # warm-up: packing caches, kernel selection
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product(x)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=int, default=8960)
    parser.add_argument("--in", dest="inp", type=int, default=1536)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    weight = torch.randn(args.out, args.inp) / args.inp ** 0.5
    x = torch.randn(max(ROWS), args.inp)
    print(f"CPU: {cpu.machine().describe()}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.out}x{args.inp}, median of {args.repeats}")
    base = None
    print(f"{'way':40s} " + " ".join(f"{r:>6d}" for r in ROWS) + "   ms for rows; x fp32 one row; row alone = among 16")
    for name, product in ways(weight).items():
        try:
            ms = [median_ms(product, x[:r].contiguous(), args.repeats) for r in ROWS]
            together = product(x).float()
            alone = torch.cat([product(x[i:i + 1].contiguous()) for i in range(len(x))]).float()
        except RuntimeError as error:
            print(f"{name:40s} failed: {str(error).splitlines()[0][:80]}")
            continue
        base = base or ms[0]
        exact = "bitwise" if torch.equal(together, alone) else f"no ({(together - alone).abs().max():.1e})"
        print(f"{name:40s} " + " ".join(f"{m:6.2f}" for m in ms) + "   "
              + " ".join(f"{m / base:4.2f}" for m in ms) + f"   {exact}")


if __name__ == "__main__":
    main()
