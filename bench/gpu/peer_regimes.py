#!/usr/bin/env python3
"""The PyTorch peer's FLUX blocks (torch.compile, default mode) timed in two regimes, as kiln optimize times its
final Plan (--settle, --sustain):

  from idle:  the device idles 2 s, then 5 warm-up calls and the median of 30 calls, each timed with events
              (the peer script's own protocol, ../shared/bench/torch_flux_block.py, which it runs right after
              compiling, from an idle GPU);
  sustained:  the block runs back to back for SUSTAIN seconds (1 s), then 30 more calls are timed the same way.

On the H200 the clocks fall within ~70 ms of dense GEMM load (the 700 W cap, session 21): a plan timed from idle
runs 11-15% faster than the same plan under sustained load, so a ratio is only fair between figures of the same
regime. The blocks, weights and inputs are the peer script's own (imported from .peer/torch_flux_block.py, the
copy the device call carries); nothing about the model is restated here.

  python3 bench/gpu/peer_regimes.py OUT.json [--sustain SECONDS] [--blocks double,single] [--figures NAME]

With --figures NAME (one block) the last line printed is NAME=MS, the from-idle time: the form `kiln optimize
--peer-command` reads, which runs this before each of its head-to-head timings of the final Plan.
"""
import argparse
import importlib.util
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_peer(path):
    spec = importlib.util.spec_from_file_location("torch_flux_block", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed_calls(fn, n, before=None, warm=0):
    """n calls, each timed alone with events and synchronized (as the peer's bench() does); their median in ms.
    `warm` untimed calls come first; `before`, if given, runs ahead of each timed call, outside its timing (e.g.
    clearing the L2)."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(n):
        if before is not None:
            before()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def regimes(fn, sustain):
    torch.cuda.synchronize()
    time.sleep(2)
    for _ in range(5):
        fn()
    from_idle = timed_calls(fn, 30)
    end = time.time() + sustain
    while time.time() < end:
        for _ in range(16):
            fn()
        torch.cuda.synchronize()
    sustained = timed_calls(fn, 30)
    return {"from_idle_ms": from_idle, "sustained_ms": sustained}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--sustain", type=float, default=1.0)
    parser.add_argument("--blocks", default="double,single")
    parser.add_argument("--peer", default=os.path.join(ROOT, ".peer", "torch_flux_block.py"))
    parser.add_argument("--figures", metavar="NAME",
                        help="last line NAME=MS, the block's from-idle time (one block; for kiln optimize --peer-command)")
    args = parser.parse_args()
    if args.figures and "," in args.blocks:
        sys.exit("--figures prints one block's figure: give one block in --blocks")
    if not os.path.exists(args.peer):
        sys.exit(f"no peer script at {args.peer}: copy ../shared/bench/torch_flux_block.py to .peer/ and carry it")
    peer = load_peer(args.peer)
    dev, dt, D = peer.dev, peer.dt, peer.D
    torch.manual_seed(0)
    N = peer.NI + peer.NT
    img = torch.randn(1, peer.NI, D, device=dev, dtype=dt)
    txt = torch.randn(1, peer.NT, D, device=dev, dtype=dt)
    vec = torch.randn(1, D, device=dev, dtype=dt)
    ang = torch.rand(N, peer.HD // 2, device=dev) * 6.28
    cos, sin = ang.cos(), ang.sin()
    x = torch.cat([txt, img], 1)
    result = {"NI": peer.NI, "NT": peer.NT, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "sustain_seconds": args.sustain, "mode": "torch.compile default"}
    with torch.no_grad():
        for block in args.blocks.split(","):
            if block == "double":
                model = torch.compile(peer.Double().to(dev, dt).eval())
                fn = lambda: model(img, txt, vec, cos, sin)
            elif block == "single":
                model = torch.compile(peer.Single().to(dev, dt).eval())
                fn = lambda: model(x, vec, cos, sin)
            else:
                sys.exit(f"unknown block '{block}' (double, single)")
            t0 = time.time()
            fn()  # compiles
            torch.cuda.synchronize()
            compile_s = round(time.time() - t0, 1)
            result[block] = regimes(fn, args.sustain)
            result[block]["compile_wall_s"] = compile_s
            torch._dynamo.reset()
            print(json.dumps({block: result[block]}), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("RESULT " + json.dumps(result), flush=True)
    if args.figures:
        print(f"{args.figures}={result[args.blocks]['from_idle_ms']}", flush=True)


if __name__ == "__main__":
    main()
