"""cclx-perf: nccl-tests style benchmark of cclx, with NCCL measured in the same run.

    python -m cclx.perf                      # allreduce 1K..256M bf16 on all local GPUs
    python -m cclx.perf --device cpu -N 4    # 4 CPU processes (host transport)
    python -m cclx.perf -C all -b 8 -e 64M -f 2 -G 10 --json out.json --plot out.png
    python -m cclx.perf --api nccl           # NCCL's C API: the cclx drop-in vs the real NCCL

Starts one process per rank itself, or runs as one rank when RANK/WORLD_SIZE are set (torchrun).
Exits non-zero when any result is wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from . import _perf_bench as B
from . import _perf_report as R


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(i?[bB])?\s*", s)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid size {s!r} (e.g. 8, 1K, 256M, 1G)")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cclx-perf", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1K"))
    p.add_argument("-e", "--maxbytes", type=parse_size, default=None,
                   help="default 256M on GPUs, 64M on CPU")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", "--warmup_iters", type=int, default=5)
    p.add_argument("-R", "--repeats", type=int, default=5,
                   help="timed batches per library (alternating cclx and NCCL); median kept")
    p.add_argument("-c", "--check", type=int, default=1, help="check results (0/1)")
    p.add_argument("-d", "--datatype", dest="dtype", default=None,
                   help="bf16 (GPU default), f32 (CPU default), f16, f64, i32, i64, u8, i8")
    p.add_argument("-o", "--op", default="sum", choices=B.OPS)
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("-G", "--cudagraph", dest="graph", type=int, default=0,
                   help="time CUDA-graph replays of a graph of G back-to-back ops")
    p.add_argument("-z", "--blocking", type=int, default=0, help="host sync after each op")
    p.add_argument("-C", "--coll", default="all_reduce",
                   help="comma list of " + ",".join(B.COLLS) + " or 'all'")
    p.add_argument("--algo", default="auto", choices=("auto", "flat", "lamport", "tree", "nccl"),
                   help="per-call hint 'algo' for cclx")
    p.add_argument("--low-precision", action="store_true", help="hint low_precision=fp8")
    p.add_argument("--fp8-algo", default="auto", choices=("auto", "oneshot", "twoshot"),
                   help="FP8 allreduce algorithm (hint fp8_algo)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("-N", "--nranks", type=int, default=None,
                   help="processes to start (default: all local GPUs, or 4 on CPU)")
    p.add_argument("--no-nccl", action="store_true", help="skip the NCCL comparison")
    p.add_argument("--api", default="cclx", choices=("cclx", "nccl"),
                   help="cclx: cclx comms (backend cclx vs nccl); nccl: NCCL's C API through "
                   "the cclx drop-in libnccl.so.2 vs the real NCCL (ctypes, GPUs only)")
    p.add_argument("--json", default=None, help="write every number and machine facts here")
    p.add_argument("--plot", default=None, help="write latency/busbw plots (PNG) here")
    p.add_argument("--timeout", type=float, default=300.0, help="communicator timeout (s)")
    p.add_argument("--corrupt-check", action="store_true", help=argparse.SUPPRESS)
    return p


def _resolve(args: argparse.Namespace, torch: Any) -> None:
    cuda_ok = torch is not None and torch.cuda.is_available() and torch.cuda.device_count() > 0
    if args.device == "auto":
        args.device = "cuda" if cuda_ok else "cpu"
    if args.device == "cuda" and not cuda_ok:
        raise SystemExit("cclx-perf: --device cuda needs torch with a visible GPU")
    args.cuda = args.device == "cuda"
    if args.dtype is None:
        args.dtype = "bf16" if args.cuda else "f32"
    args.dtype = B.DTYPE_ALIASES.get(args.dtype, args.dtype)
    if args.dtype not in B.DTYPES:
        raise SystemExit(f"cclx-perf: unknown datatype {args.dtype!r}")
    if args.maxbytes is None:
        args.maxbytes = parse_size("256M" if args.cuda else "64M")
    names = [c.strip() for c in args.coll.split(",") if c.strip()]
    if names == ["all"]:
        names = list(B.COLLS)
    args.colls = [B.ALIASES.get(c, c) for c in names]
    for c in args.colls:
        if c not in B.COLLS:
            raise SystemExit(f"cclx-perf: unknown collective {c!r}")
    if args.stepfactor <= 1:
        raise SystemExit("cclx-perf: -f must be > 1")
    if args.graph and not args.cuda:
        raise SystemExit("cclx-perf: -G needs CUDA")
    if args.api == "nccl":
        if not args.cuda:
            raise SystemExit("cclx-perf: --api nccl needs CUDA")
        if _hints(args) or args.no_nccl:
            raise SystemExit("cclx-perf: --api nccl takes no --algo, --low-precision, "
                             "--fp8-algo or --no-nccl (the drop-in reads CCLX_* settings)")


def _launch(argv: List[str], n: int) -> int:
    """Starts n ranks of this tool; rank 0 prints. Returns the worst exit status."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        out = None if r == 0 else subprocess.DEVNULL
        procs.append(subprocess.Popen([sys.executable, "-m", "cclx.perf", *argv], env=env,
                                      stdout=out))
    rc, failed_at = 0, None
    while any(p.poll() is None for p in procs):
        bad = [p.returncode for p in procs if p.returncode not in (None, 0)]
        if bad and failed_at is None:
            failed_at = time.time()
        if failed_at is not None and time.time() - failed_at > 30:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)
    for p in procs:
        rc = max(rc, abs(p.returncode or 0))
    return rc


def _hints(args: argparse.Namespace) -> Dict[str, str]:
    h = {}
    if args.algo != "auto":
        h["algo"] = args.algo
    if args.low_precision:
        h["low_precision"] = "fp8"
    if args.fp8_algo != "auto":
        h["fp8_algo"] = args.fp8_algo
    return h


def run_rank(args: argparse.Namespace, torch: Any) -> int:
    import cclx

    cuda = args.cuda
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    if cuda and local > torch.cuda.device_count():
        raise SystemExit(f"cclx-perf: {local} ranks on {torch.cuda.device_count()} GPU(s): ranks "
                         "would share a GPU, which time-slices between processes, so times "
                         "would mean nothing (and NCCL refuses it); run one rank per GPU")
    # Times and wrong counts are combined through the rendezvous store, not through the
    # communicators under test.
    from . import _rendezvous as rdv

    dev = torch.device("cuda") if cuda else "cpu"
    api_facts: Dict[str, Any] = {}
    if args.api == "nccl":
        from . import _perf_nccl_api as NA

        rank, n = rdv.rank_size()
        ctl_store = rdv.default_store(rank, n, rdv.next_prefix("perf_ctl"), args.timeout)
        comms, api_facts = NA.open_comms(torch, rank, n, ctl_store, args.timeout)
        redop = args.op
    else:
        comms = {"cclx": cclx.new_comm("cclx", dev, name="perf", timeout=args.timeout)}
        if cuda and not args.no_nccl:
            comms["nccl"] = cclx.new_comm("nccl", dev, name="perf_nccl", timeout=args.timeout)
        redop = {"sum": cclx.ReduceOp.SUM, "prod": cclx.ReduceOp.PRODUCT,
                 "min": cclx.ReduceOp.MIN, "max": cclx.ReduceOp.MAX,
                 "avg": cclx.ReduceOp.AVG}[args.op]
    libs = list(comms)
    ctl = comms.get("nccl", comms[libs[0]])
    rank, n = ctl.get_rank(), ctl.get_size()
    xp = B.Xp(torch if cuda else None, ctl.get_device() if cuda else None, args.dtype)
    hints = {lib: {} for lib in libs}
    hints[libs[0]] = _hints(args)
    timer = B.Timer(torch, cuda, args.graph, bool(args.blocking))
    tol = B.tolerance(args.op, args.dtype, args.low_precision, n)
    esize = B.DTYPES[args.dtype][1]
    if args.api != "nccl":
        ctl_store = rdv.default_store(rank, n, rdv.next_prefix("perf_ctl"), args.timeout)
    ctl_seq = [0]

    def reduce_vals(vals: List[float], how: str) -> List[float]:
        ctl_seq[0] += 1
        key = f"cclx-perf/{ctl_seq[0]}/"
        ctl_store.set(key + str(rank), json.dumps(vals))
        allv = [json.loads(ctl_store.get(key + str(r), args.timeout)) for r in range(n)]
        return [max(c) if how == "max" else sum(c) for c in zip(*allv)]

    facts = R.machine_facts(torch, cuda) if rank == 0 else {}
    if api_facts:
        facts["nccl_api"] = api_facts
    if rank == 0:
        print(R.header(args, n, libs, facts), flush=True)
        if tol:
            print(f"# check tolerance: |got - expected| <= {tol:g}", flush=True)
    rows: List[Dict[str, Any]] = []
    for coll in args.colls:
        if args.api == "nccl" and not all(c.has(coll) for c in comms.values()):
            if rank == 0:
                print(f"# {coll}: not in the loaded NCCL, skipped", flush=True)
            continue
        seen = set()
        for size in B.sizes(args.minbytes, args.maxbytes, args.stepfactor):
            count, nbytes = B.count_for(coll, size, esize, n)
            if count == 0 or nbytes in seen:
                continue
            seen.add(nbytes)
            row = _one_size(args, coll, count, nbytes, rank, n, xp, comms, redop, hints,
                            timer, tol, reduce_vals)
            rows.append(row)
            if rank == 0:
                print(R.row_line(row, libs), flush=True)
    device = "cuda" if cuda else "cpu"
    summ = R.summary(rows, libs, n, device)
    if rank == 0:
        print(R.summary_line(summ, libs), flush=True)
        if args.json:
            R.write_json(args.json, args, facts, rows, summ)
        if args.plot and rows:
            R.plot(args.plot, rows, libs, f"cclx-perf {args.dtype} {n} ranks {device}")
    for c in comms.values():
        c.finalize()
    return 0 if summ["passed"] else 1


def _one_size(args, coll, count, nbytes, rank, n, xp, comms, redop, hints, timer, tol,
              reduce_vals) -> Dict[str, Any]:
    factor = B.COLLS[coll][0](n)
    libs = list(comms)
    shared = args.api == "nccl"  # the NCCL API: both libraries on the same buffers
    one = B.Case(xp, coll, count, rank, n, args.op, args.root) if shared else None
    cases = {lib: one or B.Case(xp, coll, count, rank, n, args.op, args.root) for lib in libs}
    fns = {lib: cases[lib].call(comms[lib], redop, hints[lib]) for lib in libs}
    wrong = {lib: 0 for lib in libs}
    graphs = {}
    for lib in libs:
        cases[lib].poison()
        fns[lib]()
        timer.sync()
        if args.check:
            wrong[lib] += cases[lib].wrong(tol)
        graphs[lib] = timer.prepare(fns[lib], args.warmup)
    times: Dict[str, List[float]] = {lib: [] for lib in libs}
    for _ in range(args.repeats):
        for lib in libs:
            comms[libs[-1]].barrier()
            timer.sync()
            times[lib].append(timer.time(fns[lib], graphs[lib], args.iters))
    timer.sync()
    if args.check:  # out-of-place: the last timed op left the same exact result
        for lib in libs:
            if shared:  # the last op was another library's: one more of this one
                cases[lib].poison()
                fns[lib]()
                timer.sync()
            wrong[lib] += cases[lib].wrong(tol)
    if args.corrupt_check and rank == 0:
        wrong[libs[0]] += 1
    med = reduce_vals([B.median(times[lib]) for lib in libs], "max")
    wr = reduce_vals([float(wrong[lib]) for lib in libs], "sum")
    row: Dict[str, Any] = {"coll": coll, "bytes": nbytes, "count": count, "dtype": args.dtype,
                           "op": args.op if coll in ("all_reduce", "reduce",
                                                     "reduce_scatter") else "none",
                           "root": args.root if coll in ("broadcast", "reduce") else -1}
    for i, lib in enumerate(libs):
        t = med[i]
        algbw = nbytes / (t * 1e-6) / 1e9 if t > 0 else 0.0
        row[lib] = {"time_us": t, "algbw": algbw, "busbw": algbw * factor, "wrong": int(wr[i]),
                    "times_us_rank": times[lib]}
    if len(libs) > 1 and row[libs[0]]["time_us"] > 0:  # NCCL time / time of the one tested
        row["speedup"] = row[libs[-1]]["time_us"] / row[libs[0]]["time_us"]
    for g in graphs.values():
        del g
    return row


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    torch = None
    if args.device != "cpu":
        try:
            import torch  # type: ignore[import-not-found,no-redef]
        except ImportError:
            torch = None
    _resolve(args, torch)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return run_rank(args, torch)
    n = args.nranks or (torch.cuda.device_count() if args.cuda else 4)
    if args.cuda and n > torch.cuda.device_count():
        raise SystemExit(f"cclx-perf: {n} ranks but only {torch.cuda.device_count()} GPU(s): "
                         "ranks sharing a GPU time-slice, so times would mean nothing")
    return _launch(argv, n)


if __name__ == "__main__":
    sys.exit(main())
