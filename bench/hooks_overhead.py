"""Cost of the hook machinery on the eager path: a 1 KiB (256 x f32) CPU all_reduce, timed per
call over many back-to-back calls, with no hooks registered, with one no-op pre and one no-op
post hook, and with the flight recorder. Modes alternate within each repeat so drift hits all
alike; the table gives the median and the minimum over repeats of the mean time per call, as
wall time and as rank 0's CPU time (with --ranks 1 nothing waits for a peer, so the CPU time is
the call path's cost even on a busy machine).

    python bench/hooks_overhead.py [--ranks 2] [--iters 10000] [--repeats 7] [--json out.json]

Run it with another checkout's python/ first on PYTHONPATH to time that code's path (modes
with hooks are skipped where Comm has no register_pre_hook).
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


def _worker(iters: int, repeats: int, out: str) -> None:
    import numpy as np

    import cclx

    comm = cclx.new_comm("cclx", "cpu", name="hookbench", timeout=120)
    x = np.ones(256, np.float32)
    modes = ["none"]
    if hasattr(comm, "register_pre_hook"):
        modes += ["noop_hooks", "flight_recorder"]
    times = {m: [] for m in modes}
    cpu = {m: [] for m in modes}

    def setup(mode):
        if mode == "noop_hooks":
            return [comm.register_pre_hook(lambda n, i, a: None),
                    comm.register_post_hook(lambda i, a: None)]
        if mode == "flight_recorder":
            from cclx.hooks import FlightRecorderHook

            fr = FlightRecorderHook(max_entries=1024)
            fr.register_with_comm(comm)
            return [fr]
        return []

    def teardown(handles):
        for h in handles:
            (h.unregister if hasattr(h, "unregister") else h.remove)()

    for _ in range(200):
        comm.all_reduce(x)
    for _ in range(repeats):
        for mode in modes:
            handles = setup(mode)
            comm.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(iters):
                comm.all_reduce(x)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            teardown(handles)
            times[mode].append(dt / iters * 1e6)
            cpu[mode].append(dc / iters * 1e6)
    assert comm._hooks is None if hasattr(comm, "register_pre_hook") else True
    comm.finalize()
    if comm.get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"wall": times, "cpu": cpu}, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    ap.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._worker:
        _worker(a.iters, a.repeats, a._worker)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = os.path.join("/tmp", f"cclx_hookbench_{os.getpid()}.json")
    procs = []
    for r in range(a.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--iters",
                                       str(a.iters), "--repeats", str(a.repeats), "--_worker",
                                       out], env=env))
    rc = max(p.wait() for p in procs)
    if rc:
        return rc
    with open(out) as f:
        res = json.load(f)
    os.remove(out)
    print(f"{a.ranks} CPU rank(s), all_reduce of 256 x f32 (1 KiB), {a.iters} calls x "
          f"{a.repeats} repeats; median and minimum over repeats of the mean per call (us)")
    print(f"{'mode':<18}{'wall med':>10}{'wall min':>10}{'cpu med':>10}{'cpu min':>10}"
          f"{'cpu med vs none':>17}")
    base = statistics.median(res["cpu"]["none"])
    for mode in res["wall"]:
        w, c = res["wall"][mode], res["cpu"][mode]
        print(f"{mode:<18}{statistics.median(w):>10.2f}{min(w):>10.2f}"
              f"{statistics.median(c):>10.2f}{min(c):>10.2f}{statistics.median(c) / base:>17.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ranks": a.ranks, "iters": a.iters, "us_per_call": res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
