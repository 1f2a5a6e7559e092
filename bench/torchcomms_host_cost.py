#!/usr/bin/env python3
"""Host cost per call of a 1 KiB (256 x float32) eager all_reduce through torchcomms, for the cclx
backend against torchcomms' own: on CUDA torchcomms.new_comm("cclx") vs new_comm("nccl"), on CPU
new_comm("cclx") vs new_comm("gloo"), and cclx.new_comm ("cclx-direct", the
same comm without torchcomms); "cclx-py" is cclx's Python backend class registered under another
name, for comparing the two routes in one process ("cclx" takes the route CCLX_TORCHCOMMS_ROUTE
picks, recorded as "route"); world size 1, so nothing waits for a peer and the time is
the call path (torchcomms' C++ TorchComm, its hooks' bookkeeping, the backend, the launch).

For each backend: `--iters` back-to-back async_op=False calls, repeated `--repeats` times with
the backends alternating; reported per call: median and minimum over repeats of wall time and of
the process's CPU time (CUDA: the host time to enqueue; the stream is synchronized after each
repeat, outside the timed loop's per-call mean only at its end).

    python3 bench/torchcomms_host_cost.py --device cpu  [--iters 5000] [--repeats 9] [--json F]
    python3 bench/torchcomms_host_cost.py --device cuda
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def head_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"],
                              cwd=os.path.dirname(os.path.abspath(__file__)),
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--backends", default="", help="comma list (default: cclx and the "
                    "device's torchcomms backend: nccl on cuda, gloo on cpu)")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--cclx-commit", default="", help="cclx commit, recorded in the JSON "
                    "(default: this checkout's HEAD, where git can tell)")
    ap.add_argument("--machine", default="", help="device kind, recorded in the JSON")
    a = ap.parse_args()
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                 ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(k, v)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])

    import torch
    import torchcomms

    backends = [b for b in a.backends.split(",") if b] or \
        ["cclx", "nccl" if a.device == "cuda" else "gloo", "cclx-direct"]
    dev = torch.device(a.device)

    def make(b):
        if b == "cclx-direct":  # the same comm without torchcomms: cclx.new_comm
            import cclx

            c = cclx.new_comm("cclx", dev, name="hostcost_direct")
            c.all_reduce_tc = lambda t, op, async_op: c.all_reduce(t, cclx.ReduceOp.SUM, async_op)
            return c
        if b == "cclx-py":  # the Python route, whatever route "cclx" takes
            from cclx.torchcomms_backend import CclxBackend

            torchcomms.register_backend("cclx_py", CclxBackend)
            return torchcomms.new_comm("cclx_py", dev, name="hostcost_cclx_py")
        return torchcomms.new_comm(b, dev, name=f"hostcost_{b}")

    comms = {b: make(b) for b in backends}
    x = torch.ones(256, dtype=torch.float32, device=dev)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    for c in comms.values():
        for _ in range(200):
            getattr(c, "all_reduce_tc", c.all_reduce)(x, torchcomms.ReduceOp.SUM, async_op=False)
    sync()
    wall = {b: [] for b in backends}
    cpu = {b: [] for b in backends}
    for _ in range(a.repeats):
        for b, c in comms.items():
            ar = getattr(c, "all_reduce_tc", c.all_reduce)
            op = torchcomms.ReduceOp.SUM
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(a.iters):
                ar(x, op, async_op=False)
            t1, c1 = time.perf_counter(), time.process_time()
            sync()
            wall[b].append((t1 - t0) / a.iters * 1e6)
            cpu[b].append((c1 - c0) / a.iters * 1e6)
    res = {"device": a.device, "bytes": 1024, "world_size": 1, "iters": a.iters,
           "repeats": a.repeats, "torch": torch.__version__,
           "torchcomms": getattr(torchcomms, "__version__", "?"),
           "cclx_commit": a.cclx_commit or head_commit(), "machine": a.machine,
           "us_per_call": {}}
    if "cclx" in backends:
        import cclx.torchcomms_backend as tb

        res["route"] = tb.ROUTE
    print(f"{'backend':8} {'wall med':>9} {'wall min':>9} {'cpu med':>8} {'cpu min':>8}  (us/call)")
    for b in backends:
        r = {"wall_median": statistics.median(wall[b]), "wall_min": min(wall[b]),
             "cpu_median": statistics.median(cpu[b]), "cpu_min": min(cpu[b])}
        res["us_per_call"][b] = {k: round(v, 2) for k, v in r.items()}
        print(f"{b:8} {r['wall_median']:9.2f} {r['wall_min']:9.2f} {r['cpu_median']:8.2f} "
              f"{r['cpu_min']:8.2f}")
    for c in comms.values():
        c.finalize()
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
