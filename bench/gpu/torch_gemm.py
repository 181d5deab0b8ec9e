"""PyTorch's GEMMs on the shapes kiln-gpu-bench measures: torch.matmul / F.linear in bf16 and torch._scaled_mm
in FP8 e4m3 (per-tensor and row-wise scales), timed with CUDA events over inputs rotated past the L2.
The peer figure for "each GEMM vs the best cuBLASLt algorithm" and "FP8 vs bf16"."""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

SHAPES = [
    ("double.img.qkv", 4096, 9216, 3072), ("double.img.proj", 4096, 3072, 3072),
    ("double.img.mlp_up", 4096, 12288, 3072), ("double.img.mlp_down", 4096, 3072, 12288),
    ("double.txt.qkv", 512, 9216, 3072), ("double.txt.mlp_up", 512, 12288, 3072),
    ("single.linear1", 4608, 21504, 3072), ("single.linear2", 4608, 3072, 15360),
]


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    shapes = SHAPES[:2] if args.quick else SHAPES
    reps = 10 if args.quick else 30
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    for name, m, n, k in shapes:
        copies = max(1, min(16, 4 * l2 // ((m * k + n * k) * 2) + 1))
        xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        it = [0]

        def bf16():
            i = it[0] = (it[0] + 1) % copies
            return F.linear(xs[i], ws[i])

        flops = 2.0 * m * n * k
        ms = time_ms(bf16, reps)
        rows.append({"shape": name, "m": m, "n": n, "k": k, "kind": "bf16 F.linear", "ms": ms,
                     "tflops": flops / (ms * 1e-3) / 1e12})
        x8 = [x.to(torch.float8_e4m3fn) for x in xs]
        w8 = [w.to(torch.float8_e4m3fn) for w in ws]
        one = torch.ones((), device="cuda")
        for kind, xs_scale, ws_scale in [
            ("fp8 _scaled_mm tensor", one, one),
            ("fp8 _scaled_mm rowwise", torch.ones(m, 1, device="cuda"), torch.ones(1, n, device="cuda")),
        ]:
            def fp8():
                i = it[0] = (it[0] + 1) % copies
                return torch._scaled_mm(x8[i], w8[i].t(), scale_a=xs_scale, scale_b=ws_scale,
                                        out_dtype=torch.bfloat16)
            try:
                ms = time_ms(fp8, reps)
                rows.append({"shape": name, "m": m, "n": n, "k": k, "kind": kind, "ms": ms,
                             "tflops": flops / (ms * 1e-3) / 1e12})
            except Exception as e:  # noqa: BLE001 - record what the peer cannot do
                rows.append({"shape": name, "kind": kind, "error": str(e)[:300]})
        for r in rows[-3:]:
            if "ms" in r:
                print(f"{r['shape']:<24} {r['kind']:<26} {r['ms']:.4f} ms {r['tflops']:.0f} TFLOP/s")
        del xs, ws, x8, w8
        torch.cuda.empty_cache()
    # Attention at FLUX's joint shape, PyTorch's default SDPA backend (cuDNN on this machine).
    q, k, v = (torch.randn(1, 24, 4608, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v), reps)
    flops = 4.0 * 24 * 4608 * 4608 * 128
    rows.append({"shape": "attention.joint", "kind": "sdpa default [b,h,s,d]", "ms": ms,
                 "tflops": flops / (ms * 1e-3) / 1e12})
    print(f"attention.joint          sdpa default               {ms:.4f} ms {flops / (ms * 1e-3) / 1e12:.0f} TFLOP/s")
    with open(args.out, "w") as f:
        json.dump({"tool": "torch_gemm.py", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                   "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
