#!/usr/bin/env python3
"""Time of the DDA allreduce kernels with ranks sharing one GPU under MPS, to compare two builds of
the library on the same machine (e.g. a change to the kernels' code against its parent): each
rank runs every (algorithm, dtype, op, size) of the grid, checks one call's result against a
float64 reference, then times back-to-back calls with CUDA events; the row is the slowest rank's
mean per call. Ranks time-share the SMs (each its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), so a row is
a relative number, never a speed of the kernels on GPUs of their own.

    python3 bench/shared_gpu/dda_timing.py --ranks 2 --json a.json  # an MPS daemon runs
    python3 bench/shared_gpu/dda_timing.py --ranks 2 --start-mps --json a.json  # its own daemon

The build is whichever `cclx` Python imports (CCLX_EXT_DIR picks the extension's folder).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SIZES = (1 << 10, 16 << 10, 256 << 10, 4 << 20)
GRID = (  # (algo, dtype, op)
    ("flat", "bfloat16", "SUM"), ("flat", "float32", "AVG"), ("flat", "int32", "PRODUCT"),
    ("tree", "bfloat16", "SUM"), ("tree", "float32", "PREMUL_SUM"), ("tree", "int32", "BXOR"),
    ("lamport", "bfloat16", "SUM"), ("lamport", "float32", "AVG"),
)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--start-mps", action="store_true", help="run an MPS daemon of its own")
    p.add_argument("--label", default="", help="names the build in the record")
    p.add_argument("--json", default=None)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def op_of(cclx, name: str):
    return cclx.ReduceOp.PREMUL_SUM(0.375) if name == "PREMUL_SUM" else getattr(cclx.ReduceOp, name)


def reference(torch, xs, op: str):
    """float64 (int64 for integers, wrapping to int32) reduction of the ranks' inputs."""
    if xs[0].dtype.is_floating_point:
        s = [x.double() for x in xs]
        if op == "PREMUL_SUM":
            return sum(0.375 * v for v in s)
        r = sum(s)
        return r / len(s) if op == "AVG" else r
    acc = xs[0].long()
    for x in xs[1:]:
        acc = acc * x.long() if op == "PRODUCT" else acc ^ x.long()
        acc = ((acc + (1 << 31)) % (1 << 32)) - (1 << 31)
    return acc


def rank_main(a) -> int:
    import torch
    import cclx
    rank, size = a.rank, a.ranks
    store = cclx.TcpStore("127.0.0.1", int(os.environ["MASTER_PORT"]), rank == 0, "dda_timing",
                          120.0)
    comm = cclx.new_comm("cclx", "cuda", name="dda_timing", store=store)
    rows = []
    for algo, dt, op in GRID:
        dtype = getattr(torch, dt)
        for nbytes in SIZES:
            n = nbytes // dtype.itemsize
            gens = [torch.Generator().manual_seed(1000 * r + n) for r in range(size)]
            if dtype.is_floating_point:
                xs = [torch.randn(n, generator=g).to(dtype) for g in gens]
            else:
                xs = [torch.randint(-9, 10, (n,), generator=g, dtype=dtype) for g in gens]
            x = xs[rank].cuda()
            hints = {"algo": algo}
            comm.all_reduce(x, op_of(cclx, op), hints=hints)
            torch.cuda.synchronize()
            want = reference(torch, xs, op)
            got = x.cpu()
            if dtype.is_floating_point:
                tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
                err = ((got.double() - want).abs() / (1 + want.abs())).max().item()
                ok = err <= tol
            else:
                ok = torch.equal(got.long(), want)
            y = torch.zeros(n, dtype=dtype, device="cuda")
            for _ in range(a.warmup):
                comm.all_reduce(y, op_of(cclx, op), hints=hints)
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(a.iters):
                comm.all_reduce(y, op_of(cclx, op), hints=hints)
            e1.record()
            torch.cuda.synchronize()
            us = e0.elapsed_time(e1) * 1000.0 / a.iters
            t = torch.tensor([us, 0.0 if ok else 1.0], device="cuda")
            comm.all_reduce(t, cclx.ReduceOp.MAX)
            torch.cuda.synchronize()
            rows.append({"algo": algo, "dtype": dt, "op": op, "bytes": nbytes,
                         "us_slowest_rank": round(t[0].item(), 2), "checked": t[1].item() == 0.0})
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(rows, f)
    comm.finalize()
    return 0 if all(r["checked"] for r in rows) else 1


def start_mps(env: dict, d: str) -> dict:
    env = dict(env, CUDA_MPS_PIPE_DIRECTORY=os.path.join(d, "pipe"),
               CUDA_MPS_LOG_DIRECTORY=os.path.join(d, "log"))
    os.makedirs(env["CUDA_MPS_PIPE_DIRECTORY"])
    os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"])
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True)
    return env


def main(argv=None) -> int:
    a = parse(argv)
    if a.rank is not None:
        return rank_main(a)
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // a.ranks))
        if a.start_mps:
            if not shutil.which("nvidia-cuda-mps-control"):
                raise SystemExit("dda_timing: nvidia-cuda-mps-control is not installed")
            env = start_mps(env, d)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            env["MASTER_PORT"] = str(s.getsockname()[1])
        out = os.path.join(d, "rows.json")
        t0 = time.time()
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r),
                                   "--ranks", str(a.ranks), "--iters", str(a.iters),
                                   "--warmup", str(a.warmup), "--out", out],
                                  env=dict(env, RANK=str(r), WORLD_SIZE=str(a.ranks),
                                           LOCAL_RANK="0"))
                 for r in range(a.ranks)]
        rcs = [p.wait() for p in procs]
        if a.start_mps:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, text=True,
                           timeout=60)
        rows = json.load(open(out)) if os.path.exists(out) else []
    rec = {"label": a.label, "ranks": a.ranks, "iters": a.iters, "mps_percent": 100 // a.ranks,
           "ext_dir": os.environ.get("CCLX_EXT_DIR", ""), "seconds": round(time.time() - t0, 1),
           "rank_exit_codes": rcs, "rows": rows}
    for r in rows:
        print(f"{a.label:8} {r['algo']:8} {r['dtype']:9} {r['op']:10} {r['bytes']:>9} B "
              f"{r['us_slowest_rank']:9.2f} us {'ok' if r['checked'] else 'WRONG'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rec, f, indent=1)
    return 0 if rows and all(rc == 0 for rc in rcs) else 1


if __name__ == "__main__":
    sys.exit(main())
