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

A round that runs this script afresh imports torch and compiles the block again: about 50 s of a device call a
round on the H200 (session 41), most of a three-round head to head. So the rounds can go to one process instead:

  python3 bench/gpu/peer_regimes.py OUT.json --blocks single --serve DIR    (compiles once, then serves)
  python3 bench/gpu/peer_regimes.py --ask DIR --figures torch.compile      (one round: NAME=MS, the from-idle time)
  python3 bench/gpu/peer_regimes.py --ask DIR --quit                       (the server ends)

The server listens on a loopback TCP port it writes to DIR/port once the block is compiled; each request is
timed as a fresh run would time it (2 s idle, 5 warm-up calls, the median of 30). --ask imports no torch, and
fails within --ask-timeout seconds, naming the server, when there is none or it does not answer.
"""
import argparse
import importlib.util
import json
import os
import socket
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_peer(path):
    spec = importlib.util.spec_from_file_location("torch_flux_block", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ask(server_dir, request, timeout):
    """One request to the server in `server_dir`: its one-line answer."""
    port_file = os.path.join(server_dir, "port")
    try:
        with open(port_file) as f:
            port = int(f.read().strip())
    except (OSError, ValueError) as e:
        sys.exit(f"no peer server in {server_dir} ({port_file}: {e})")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall((request + "\n").encode())
            answer = conn.makefile().readline().strip()
    except OSError as e:
        sys.exit(f"the peer server in {server_dir} (port {port}) did not answer '{request}': {e}")
    if not answer or answer.startswith("error"):
        sys.exit(f"the peer server in {server_dir} answered '{request}' with '{answer or 'nothing'}'")
    return answer


def serve(server_dir, measure):
    """Answers requests on a loopback port (written to server_dir/port once listening) until 'quit': 'time' gets
    measure()'s milliseconds. One request at a time; a failed measurement is answered 'error: ...'."""
    os.makedirs(server_dir, exist_ok=True)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port_file = os.path.join(server_dir, "port")
        with open(port_file + ".tmp", "w") as f:
            f.write(str(listener.getsockname()[1]))
        os.replace(port_file + ".tmp", port_file)  # the port appears whole or not at all
        served = 0
        while True:
            conn, _ = listener.accept()
            with conn:
                request = conn.makefile().readline().strip()
                if request == "quit":
                    conn.sendall(b"bye\n")
                    break
                if request != "time":
                    conn.sendall(f"error: unknown request '{request}' (time, quit)\n".encode())
                    continue
                try:
                    answer = f"{measure():.6f}"
                    served += 1
                except Exception as e:  # noqa: BLE001 - the client is told, the server goes on
                    answer = f"error: {type(e).__name__}: {e}"
                conn.sendall((answer + "\n").encode())
    os.remove(port_file)
    return served


def timed_calls(fn, n, before=None, warm=0):
    """n calls, each timed alone with events and synchronized (as the peer's bench() does); their median in ms.
    `warm` untimed calls come first; `before`, if given, runs ahead of each timed call, outside its timing (e.g.
    clearing the L2)."""
    import torch
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


def from_idle(fn):
    """The peer script's protocol: the device idles 2 s, then 5 warm-up calls and the median of 30 timed calls."""
    import torch
    torch.cuda.synchronize()
    time.sleep(2)
    return timed_calls(fn, 30, warm=5)


def regimes(fn, sustain):
    import torch
    idle = from_idle(fn)
    end = time.time() + sustain
    while time.time() < end:
        for _ in range(16):
            fn()
        torch.cuda.synchronize()
    sustained = timed_calls(fn, 30)
    return {"from_idle_ms": idle, "sustained_ms": sustained}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--sustain", type=float, default=1.0)
    parser.add_argument("--blocks", default="double,single")
    parser.add_argument("--peer", default=os.path.join(ROOT, ".peer", "torch_flux_block.py"))
    parser.add_argument("--figures", metavar="NAME",
                        help="last line NAME=MS, the block's from-idle time (one block; for kiln optimize --peer-command)")
    parser.add_argument("--serve", metavar="DIR", help="compile one block, then time it on request (see above)")
    parser.add_argument("--ask", metavar="DIR", help="one round from the server in DIR (no torch imported)")
    parser.add_argument("--quit", action="store_true", help="with --ask: end the server")
    parser.add_argument("--ask-timeout", type=float, default=120.0)
    args = parser.parse_args()
    if args.ask:
        if args.quit:
            ask(args.ask, "quit", args.ask_timeout)
            return
        ms = float(ask(args.ask, "time", args.ask_timeout))
        print(f"{args.figures or 'peer'}={ms}", flush=True)
        return
    if not args.out:
        parser.error("OUT.json is needed unless --ask is given")
    if args.serve and "," in args.blocks:
        sys.exit("--serve times one block: give one block in --blocks")
    import torch  # here, not at the top: --ask runs where it must start fast, without torch
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
            if args.serve:
                print(json.dumps({block: {"compile_wall_s": compile_s}, "serving": args.serve}), flush=True)
                served = serve(args.serve, lambda: from_idle(fn))
                print(json.dumps({block: {"rounds_served": served}}), flush=True)
                return
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
