#!/usr/bin/env python3
"""Probe: does splitting the FLUX single block's linear2 along K pay on two streams?

linear2 reads concat(attn, gelu(mlp)) [M, 3072 + 12288]. Its MLP part (K = 12288, 80% of its FLOPs) needs only the
MLP GEMM, which runs on the second stream beside q/k/v and attention. Split, the second stream computes
p = gelu(mlp) @ W2b^T as soon as the MLP is done (beside attention), and the first stream finishes with
y = attn @ W2a^T + b + p (beta = 1). Unsplit, all of linear2 waits for attention.

Both forms are timed as CUDA graphs over the block's GEMMs and attention only (the memory-bound steps, a few
percent, are left out), in rounds taken in turn; each step is also timed alone. The concat buffer of the unsplit
form is written by nobody (kiln's producers write into it in place; only the reads' cost matters here).

  python3 bench/gpu/probe_early_partial.py [OUT.json]

Measured (session 41, NVIDIA H100 80GB HBM3, bench/results/2026-12-07-s41-h100-call1-probe_early_partial.json):
split / unsplit 1.018 (1.013-1.078 over 6 rounds), so the split does not pay; kiln's own pass for it
(early-partials, 5ac0f89) measured 0.993 and 1.002 in the plan and was reverted.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_regimes import timed_calls  # noqa: E402

M, D, MLP, H = 4608, 3072, 12288, 24
dev = "cuda"
torch.manual_seed(0)


def w(*shape):
    return (torch.randn(*shape, device=dev, dtype=torch.bfloat16) * 0.02)


x = torch.randn(M, D, device=dev, dtype=torch.bfloat16)
w_qkv, b_qkv = w(3 * D, D), w(3 * D)
w_mlp, b_mlp = w(MLP, D), w(MLP)
w2, b2 = w(D, D + MLP), w(D)
w2a, w2b = w2[:, :D].contiguous(), w2[:, D:].contiguous()
cat_buf = torch.randn(M, D + MLP, device=dev, dtype=torch.bfloat16)
side = torch.cuda.Stream()


def attention(qkv):
    q, k, v = qkv.view(1, M, 3, H, D // H).permute(2, 0, 3, 1, 4)
    o = F.scaled_dot_product_attention(q, k, v)
    return o.transpose(1, 2).reshape(M, D)


def mlp_up():
    return torch._addmm_activation(b_mlp, x, w_mlp.t(), use_gelu=True)


def unsplit():
    main = torch.cuda.current_stream()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        act = mlp_up()
    attn = attention(torch.addmm(b_qkv, x, w_qkv.t()))
    main.wait_stream(side)
    return torch.addmm(b2, cat_buf, w2.t()), attn, act


def split():
    main = torch.cuda.current_stream()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        p = torch.mm(mlp_up(), w2b.t())
    attn = attention(torch.addmm(b_qkv, x, w_qkv.t()))
    main.wait_stream(side)
    return torch.addmm(p, attn, w2a.t()).add_(b2)  # bias as its own pass here; kiln folds it into the epilogue


def graph_of(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def main():
    # Numerics: the split form against the unsplit one on real data (the concat filled this time).
    attn = attention(torch.addmm(b_qkv, x, w_qkv.t()))
    act = mlp_up()
    ref = torch.cat([attn, act], 1).float() @ w2.t().float() + b2.float()
    one = torch.addmm(b2, torch.cat([attn, act], 1), w2.t())
    two = torch.addmm(torch.mm(act, w2b.t()), attn, w2a.t()).add_(b2)
    err = {"unsplit_max_abs": (one.float() - ref).abs().max().item(), "split_max_abs": (two.float() - ref).abs().max().item(),
           "ref_max_abs": ref.abs().max().item()}

    forms = {"unsplit": graph_of(unsplit), "split": graph_of(split)}
    qkv_out = torch.addmm(b_qkv, x, w_qkv.t())
    steps = {
        "qkv": lambda: torch.addmm(b_qkv, x, w_qkv.t()),
        "attention": lambda: attention(qkv_out),
        "mlp_gelu": mlp_up,
        "linear2": lambda: torch.addmm(b2, cat_buf, w2.t()),
        "linear2_mlp_part": lambda: torch.mm(act, w2b.t()),
        "linear2_attn_part": lambda: torch.addmm(one, attn, w2a.t()),
    }
    alone = {k: timed_calls(graph_of(f), 30, warm=5) for k, f in steps.items()}
    rounds = []
    for r in range(6):
        order = ["unsplit", "split"] if r % 2 == 0 else ["split", "unsplit"]
        rounds.append({k: timed_calls(forms[k], 30, warm=5) for k in order})
    med = {k: sorted(r[k] for r in rounds)[len(rounds) // 2] for k in forms}
    ratios = sorted(r["split"] / r["unsplit"] for r in rounds)
    result = {"device": torch.cuda.get_device_name(), "alone_ms": alone, "rounds_ms": rounds, "median_ms": med,
              "split_over_unsplit": {"median": ratios[len(ratios) // 2], "min": ratios[0], "max": ratios[-1]},
              "numerics": err}
    text = json.dumps(result, indent=1)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
