#!/usr/bin/env python3
"""Probe: how close does a bf16 GEMV (M = 1, the FLUX adaLN modulation's shape) come to a copy of its weights?

For each weight shape [N, 3072], three things that each read the weights once, each timed alone per call with
the L2 cleared before the call (a read of a buffer twice the L2, so no dirty lines are left to write back):
  cublas   y = F.linear(x, w, b)        (cuBLAS/cuBLASLt, what kiln's plans run today)
  triton   a row-reduction GEMV kernel (each program: BLOCK_N weight rows, f32 accumulation)
  copy     w.copy_ into another buffer of the same size: reads as many bytes (and writes them too)
  read     w.sum(): reads as many bytes, writes nothing (the bound a GEMV can reach)
Medians of 30 calls after 5 warm-ups, in rounds taken in turn.

  python3 bench/gpu/probe_gemv.py [OUT.json]
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_regimes import timed_calls  # noqa: E402

K = 3072
SHAPES = [6144, 9216, 18432, 36864]
dev = "cuda"


@triton.jit
def gemv_kernel(w_ptr, x_ptr, b_ptr, y_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=rows[:, None] < N, other=0.0)
        x = tl.load(x_ptr + cols)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    b = tl.load(b_ptr + rows, mask=rows < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows, (acc + b).to(tl.bfloat16), mask=rows < N)


def triton_gemv(w, x, b, y, block_n, block_k):
    n = w.shape[0]
    gemv_kernel[(triton.cdiv(n, block_n),)](w, x, b, y, n, K, BLOCK_N=block_n, BLOCK_K=block_k)


def main():
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4 + 1024, device=dev, dtype=torch.float32).fill_(1)

    def timed(fn):
        return timed_calls(fn, 30, before=lambda: flush.sum(), warm=5)

    result = {"device": torch.cuda.get_device_name(), "l2_bytes": l2, "shapes": []}
    torch.manual_seed(0)
    for n in SHAPES:
        w = torch.randn(n, K, device=dev, dtype=torch.bfloat16) * 0.02
        x = torch.randn(1, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, device=dev, dtype=torch.bfloat16) * 0.02
        y = torch.empty(n, device=dev, dtype=torch.bfloat16)
        other = torch.empty_like(w)
        ref = (w.float() @ x.float()[0] + b.float())
        configs = [(bn, bk) for bn in (4, 8, 16, 32) for bk in (256, 512)]
        forms = {"cublas": lambda: F.linear(x, w, b), "copy": lambda: other.copy_(w), "read": lambda: w.sum(dtype=torch.float32)}
        errors = {}
        for bn, bk in configs:
            triton_gemv(w, x[0], b, y, bn, bk)
            errors[f"triton_{bn}x{bk}"] = (y.float() - ref).abs().max().item()
            forms[f"triton_{bn}x{bk}"] = (lambda bn=bn, bk=bk: triton_gemv(w, x[0], b, y, bn, bk))
        errors["cublas"] = (F.linear(x, w, b)[0].float() - ref).abs().max().item()
        rounds = []
        for r in range(3):
            names = list(forms) if r % 2 == 0 else list(reversed(forms))
            rounds.append({k: timed(forms[k]) for k in names})
        med = {k: sorted(rr[k] for rr in rounds)[1] for k in forms}
        nbytes = w.numel() * 2
        best_triton = min((k for k in med if k.startswith("triton")), key=lambda k: med[k])
        row = {"n": n, "k": K, "weight_bytes": nbytes, "median_ms": med, "max_abs_error": errors, "rounds": rounds,
               "tbps": {k: nbytes / (v * 1e-3) / 1e12 for k, v in med.items()}, "best_triton": best_triton,
               "cublas_over_best_triton": med["cublas"] / med[best_triton], "read_over_cublas": med["read"] / med["cublas"]}
        print(f"n={n} ({nbytes / 1e6:.1f} MB): cublas {med['cublas'] * 1e3:.1f} us ({row['tbps']['cublas']:.2f} TB/s), "
              f"{best_triton} {med[best_triton] * 1e3:.1f} us ({row['tbps'][best_triton]:.2f} TB/s), "
              f"read {med['read'] * 1e3:.1f} us ({row['tbps']['read']:.2f} TB/s), copy {med['copy'] * 1e3:.1f} us; "
              f"errors cublas {errors['cublas']:.2e} triton {errors[best_triton]:.2e}", flush=True)
        result["shapes"].append(row)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
