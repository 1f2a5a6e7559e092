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
import os
import re
import secrets
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from .. import _C
from . import baselines as BL
from . import bench as B
from . import fused as F
from . import report as R


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(i?[bB])?\s*", s)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid size {s!r} (e.g. 8, 1K, 256M, 1G)")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cclx-perf", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1K"),
                   help="smallest size in bytes, K/M/G suffixes allowed (default 1K)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=None,
                   help="largest size in bytes (default 256M on GPUs, 64M on CPU)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0,
                   help="factor between consecutive sizes, > 1 (default 2)")
    p.add_argument("-n", "--iters", type=int, default=20,
                   help="timed ops per batch (with -G: ops replayed per batch) (default 20)")
    p.add_argument("-w", "--warmup", "--warmup_iters", type=int, default=5,
                   help="untimed warm-up ops per column and size (default 5)")
    p.add_argument("-R", "--repeats", type=int, default=5,
                   help="timed batches per column, the columns alternating; median kept "
                   "(default 5)")
    p.add_argument("-c", "--check", type=int, default=1, help="check results (0/1)")
    p.add_argument("-d", "--datatype", dest="dtype", default=None,
                   help="bf16 (GPU default), f32 (CPU default), f16, f64, i32, i64, u8, i8")
    p.add_argument("-o", "--op", default="sum", choices=B.OPS, help="reduction (default sum)")
    p.add_argument("-r", "--root", type=int, default=0, help="root of broadcast and reduce")
    p.add_argument("-G", "--cudagraph", dest="graph", type=int, default=0,
                   help="time CUDA-graph replays of a graph of G back-to-back ops")
    p.add_argument("-z", "--blocking", type=int, default=0, help="host sync after each op")
    p.add_argument("-C", "--coll", default="all_reduce",
                   help="comma list of " + ",".join(B.COLLS) + " (or allgather, reducescatter, "
                   "alltoall, alltoallv) or 'all' (all but allreduce_rmsnorm and put); all_to_all_v "
                   "moves all_to_all's bytes in unequal splits (1.5 blocks to itself, half a block "
                   "to the next rank); allreduce_rmsnorm is the fused allreduce + residual add + RMSNorm, "
                   "rows by --tokens x --hidden, against NCCL allreduce + torch add + RMSNorm; put = "
                   "one-sided window put + signal + wait_signal around the ring")
    p.add_argument("--tokens", default="1:8192",
                   help="allreduce_rmsnorm: token counts, 'A:B' (powers of two) or a comma list "
                   "(default 1:8192)")
    p.add_argument("--hidden", default="4096,8192",
                   help="allreduce_rmsnorm: hidden sizes, comma list (default 4096,8192)")
    p.add_argument("--fused-algo", default="auto",
                   choices=_C.hint_values("fused_algo"),
                   help="allreduce_rmsnorm: hint fused_algo for cclx")
    p.add_argument("--algo", default="auto",
                   choices=_C.hint_values("algo"),
                   help="per-call hint 'algo' for cclx (all-gather, reduce-scatter, all-to-all: "
                   "flat = the DDA LL exchange, tree = the pipelined one, dda = DDA at any size)")
    p.add_argument("--low-precision", action="store_true", help="hint low_precision=fp8")
    p.add_argument("--fp8-algo", default="auto", choices=_C.hint_values("fp8_algo"),
                   help="FP8 allreduce algorithm (hint fp8_algo)")
    p.add_argument("--put-path", default="auto", choices=_C.hint_values("put_path"),
                   help="-C put between GPUs: copy engine, SM stores, or by size (hint put_path)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="where to run (default: cuda when torch sees a GPU, else cpu)")
    p.add_argument("-N", "--nranks", type=int, default=None,
                   help="processes to start (default: all local GPUs, or 4 on CPU)")
    p.add_argument("--baseline", default="auto",
                   help="what cclx is compared with, each timed in the same processes the same "
                   "way: comma list of " + ", ".join(BL.NAMES) + "; 'auto' (default): all "
                   "that the machine can run; 'all': all, each skip explained; 'none'. "
                   "nccl = NCCL's ordinary kernels; nccl-sym = NCCL with buffers from "
                   "ncclMemAlloc registered as symmetric windows; torch-symm = torch symmetric "
                   "memory one-shot / two-shot allreduce (best of them), multicast off")
    p.add_argument("--no-nccl", action="store_true", help="same as --baseline none")
    p.add_argument("--api", default="cclx", choices=("cclx", "nccl"),
                   help="cclx: cclx comms (backend cclx vs the baselines); nccl: NCCL's C API "
                   "through the cclx drop-in libnccl.so.2 vs the real NCCL (ctypes, GPUs only)")
    p.add_argument("--json", default=None, help="write every number and machine facts here")
    p.add_argument("--plot", default=None,
                   help="write latency/busbw plots (PNG) here (needs matplotlib)")
    p.add_argument("--timeout", type=float, default=300.0, help="communicator timeout (s)")
    p.add_argument("--corrupt-check", action="store_true", help=argparse.SUPPRESS)
    return p


def _need(module: str, what: str, pip_name: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise SystemExit(f"cclx-perf: {what} needs {module}: pip install {pip_name}") from None


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
        names = list(B.ALL)
    args.colls = [F.ALIASES.get(c, B.ALIASES.get(c, c)) for c in names]
    for c in args.colls:
        if c not in B.COLLS:
            raise SystemExit(f"cclx-perf: unknown collective {c!r}")
    if args.stepfactor <= 1:
        raise SystemExit("cclx-perf: -f must be > 1")
    try:
        args.tokens = F.parse_tokens(args.tokens)
        args.hidden = F.parse_hidden(args.hidden)
    except ValueError as e:
        raise SystemExit(f"cclx-perf: {e}") from None
    if F.COLL in args.colls:
        if args.dtype not in F.ROUNDOFF:
            raise SystemExit(f"cclx-perf: {F.COLL} takes bf16, f16 or f32, not {args.dtype}")
        if torch is None:
            try:
                import torch as _t  # noqa: F401
            except ImportError:
                raise SystemExit(f"cclx-perf: {F.COLL} needs torch (pip install torch)") from None
    if args.minbytes > args.maxbytes:
        raise SystemExit(f"cclx-perf: no sizes to run: -b {args.minbytes} is larger than "
                         f"-e {args.maxbytes} (bytes)")
    for k, lo in (("iters", 1), ("repeats", 1), ("warmup", 0)):
        if getattr(args, k) < lo:
            raise SystemExit(f"cclx-perf: --{k} must be >= {lo}")
    if args.graph and not args.cuda:
        raise SystemExit("cclx-perf: -G needs CUDA")
    try:
        args.baselines, args.baselines_explicit = BL.parse(args.baseline)
    except ValueError as e:
        raise SystemExit(f"cclx-perf: --baseline: {e}") from None
    if args.no_nccl:
        if args.baselines_explicit and args.baselines:
            raise SystemExit("cclx-perf: --no-nccl and --baseline contradict each other")
        args.baselines, args.baselines_explicit = [], True
    if args.api == "nccl" and "put" in args.colls:
        raise SystemExit("cclx-perf: -C put measures cclx windows; --api nccl has no put")
    if args.api == "nccl":
        if not args.cuda:
            raise SystemExit("cclx-perf: --api nccl needs CUDA")
        if _hints(args) or args.no_nccl:
            raise SystemExit("cclx-perf: --api nccl takes no --algo, --low-precision, "
                             "--fp8-algo or --no-nccl (the drop-in reads CCLX_* settings)")
        if F.COLL in args.colls:
            raise SystemExit(f"cclx-perf: --api nccl has no {F.COLL} (NCCL has no such call)")
        if args.baselines_explicit and args.baselines != ["nccl"]:
            raise SystemExit("cclx-perf: --api nccl compares the drop-in with the real NCCL "
                             "only; --baseline does not apply")
        args.baselines = ["nccl"]
    if args.dtype == "bf16" and not args.cuda:
        _need("ml_dtypes", "-d bf16 on CPU", "ml-dtypes")
    if args.plot:
        _need("matplotlib", "--plot", "matplotlib")


def _check_plan(args: argparse.Namespace, n: int) -> None:
    """Exits with the reason when the sweep would have no row."""
    esize = B.DTYPES[args.dtype][1]
    if F.COLL in args.colls or B.plan(args.colls, args.minbytes, args.maxbytes, args.stepfactor,
                                      esize, n):
        return
    total = [c for c in args.colls if c in B.ALL and not B.COLLS[c][1]]
    need = esize * (n if total else 1)
    raise SystemExit(
        f"cclx-perf: no sizes to run: every size from -b {args.minbytes} to -e {args.maxbytes} "
        f"bytes is below {need} bytes, one {args.dtype} element"
        + (f" per rank for {', '.join(total)} at {n} ranks" if total else ""))


def _launch(argv: List[str], n: int) -> int:
    """Starts n ranks of this tool; rank 0 prints. Returns the worst exit status."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    # The store admits only the ranks started here: one secret for all of them.
    token = os.environ.get("CCLX_STORE_TOKEN") or secrets.token_hex(32)
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   CCLX_STORE_TOKEN=token)
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

    from . import measure as M
    from .. import _rendezvous as rdv

    cuda = args.cuda
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    if cuda and local > torch.cuda.device_count():
        raise SystemExit(f"cclx-perf: {local} ranks on {torch.cuda.device_count()} GPU(s): ranks "
                         "would share a GPU, which time-slices between processes, so times "
                         "would mean nothing (and NCCL refuses it); run one rank per GPU")
    rank, n = rdv.rank_size()
    _check_plan(args, n)
    # Times and wrong counts are combined through a store of the tool's own, not through the
    # communicators under test.
    base = rdv.default_store(rank, n, rdv.next_prefix("perf_ctl"), args.timeout)
    ex = M.Exchange(rdv._via_foreign(base, rank, rdv.next_prefix("perf_exchange"),
                                     args.timeout), rank, n, args.timeout)
    esize = B.DTYPES[args.dtype][1]
    rows_plan = B.plan(args.colls, args.minbytes, args.maxbytes, args.stepfactor, esize, n)
    if cuda and args.api == "cclx":
        # before any comm exists, so that the device is set for every library alike
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else None
    xp = B.Xp(torch if cuda else None, dev, args.dtype)

    def make_case(coll, count, like=None, send_buf=None, recv_buf=None):
        return B.Case(xp, coll, count, rank, n, args.op, args.root, like, send_buf, recv_buf)

    closers: List[Any] = []
    info: Dict[str, Dict[str, Any]] = {}
    api_facts: Dict[str, Any] = {}
    if args.api == "nccl":
        from . import nccl_api as NA

        comms, api_facts = NA.open_comms(torch, rank, n, ex.store, args.timeout)
        xp = B.Xp(torch, comms["nccl"].get_device(), args.dtype)
        cols = [M.comm_column(k, comms[k], args.op, {}, make_case) for k in ("dropin", "nccl")]
        missing = [c for c in args.colls if not all(x.has(c) for x in comms.values())]
        if missing and rank == 0:
            print(f"# {', '.join(missing)}: not in the loaded NCCL, skipped", flush=True)
        rows_plan = [r for r in rows_plan if r[0] not in missing]
        barrier = comms["nccl"].barrier
        closers = list(comms.values())
    else:
        comms = {"cclx": cclx.new_comm("cclx", dev or "cpu", name="perf", timeout=args.timeout)}
        redop = {"sum": cclx.ReduceOp.SUM, "prod": cclx.ReduceOp.PRODUCT,
                 "min": cclx.ReduceOp.MIN, "max": cclx.ReduceOp.MAX,
                 "avg": cclx.ReduceOp.AVG}[args.op]
        cols = [M.comm_column("cclx", comms["cclx"], redop, _hints(args), make_case)]
        closers = [comms["cclx"]]
        if "put" in args.colls:
            from . import put as PP

            put_hints = {} if args.put_path == "auto" else {"put_path": args.put_path}
            closers.append(PP.with_put(cols[0], comms["cclx"], xp, rows_plan, make_case,
                                       put_hints, rank, n))
        if cuda:
            base_cols = _baseline_columns(args, torch, rank, n, ex, rows_plan, esize, make_case,
                                          redop, info, closers, comms)
            if "put" in args.colls:
                for col in base_cols:
                    PP.skip_put(col)
            cols += base_cols
        elif args.baselines_explicit:
            for b in args.baselines:
                info[b] = {"skipped": "needs CUDA (this run is on CPU)", "measured": False}
        barrier = (comms.get("nccl") or comms["cclx"]).barrier
    names = M.table_names(cols)
    timer = B.Timer(torch, cuda, args.graph, bool(args.blocking))
    tol = B.tolerance(args.op, args.dtype, args.low_precision, n)
    facts = R.machine_facts(torch, cuda) if rank == 0 else {}
    if api_facts:
        facts["nccl_api"] = api_facts
    if info:
        facts["baselines"] = info
    if rank == 0:
        print(R.header(args, n, names, facts), flush=True)
        if tol:
            print(f"# check tolerance: |got - expected| <= {tol:g}", flush=True)
    rows: List[Dict[str, Any]] = []
    for coll, count, nbytes in rows_plan:
        row = M.one_size(args, coll, count, nbytes, n, cols, barrier, timer, tol, ex,
                         make_case, shared=args.api == "nccl",
                         corrupt=args.corrupt_check and rank == 0)
        rows.append(row)
        if rank == 0:
            print(R.row_line(row, names), flush=True)
    if F.COLL in args.colls and args.api == "cclx":
        import torch as torch_mod

        fh = {"fused_algo": args.fused_algo} if args.fused_algo != "auto" else {}
        rows += F.run_rows(args, torch_mod, comms, dev or torch_mod.device("cpu"), rank, n,
                           dict(_hints(args), **fh), names, barrier, timer, ex,
                           lambda row: rank == 0 and print(R.row_line(row, names), flush=True))
    device = "cuda" if cuda else "cpu"
    summ = R.summary(rows, names, n, device)
    if rank == 0:
        print(R.summary_line(summ, names), flush=True)
        if args.json:
            R.write_json(args.json, args, facts, rows, summ)
        if args.plot and rows:
            R.plot(args.plot, rows, names, f"cclx-perf {args.dtype} {n} ranks {device}")
    for c in reversed(closers):  # baselines first (collective deregistration), cclx last
        c.finalize()
    if "torch-symm" in info:
        BL.close_torch_group()
    ex.finish()
    return 0 if summ["passed"] else 1


def _baseline_columns(args, torch, rank, n, ex, rows_plan, esize, make_case, redop, info,
                      closers, comms) -> List[Any]:
    """Creates the requested GPU baselines (the same order on every rank) and their columns;
    fills info[name] with what was measured or why it was skipped."""
    import cclx

    from .. import _C
    from . import measure as M
    from .._info import nccl_version

    cols: List[Any] = []
    want = args.baselines
    if "nccl" in want:
        comms["nccl"] = cclx.new_comm("nccl", torch.device("cuda", torch.cuda.current_device()),
                                      name="perf_nccl", timeout=args.timeout)
        closers.append(comms["nccl"])
        v = nccl_version()
        info["nccl"] = {"library": getattr(_C, "nccl_path", lambda: "")(),
                        "version": ".".join(map(str, v)) if v else None}
        cols.append(M.comm_column("nccl", comms["nccl"], redop, {}, make_case))
    if "nccl-sym" in want:
        arena = max([max(B.buffer_numels(c, k, n)) * esize for c, k, _ in rows_plan] + [1])
        sym, f = BL.open_nccl_sym(torch, rank, n, ex.store, args.timeout, arena)
        info["nccl-sym"] = f
        if sym is not None:
            closers.append(sym)
            col = M.comm_column(
                "nccl-sym", sym, args.op, {}, make_case,
                send_buf=lambda k: sym.alloc(0, k, xp_dtype(torch, args.dtype)),
                recv_buf=lambda k, s: sym.alloc(1, k, xp_dtype(torch, args.dtype)))
            col.skip = lambda coll, nb: None if sym.has(coll) else (
                "not one NCCL function" if coll == "all_to_all_v" else "not in the loaded NCCL")
            cols.append(col)
    if "torch-symm" in want:
        why = None
        if "all_reduce" not in args.colls:
            why = "torch symmetric memory has allreduce only, and -C has no all_reduce"
        else:
            why = BL.torch_symm_size_skip("all_reduce", args.dtype, args.op, 4)
        numel = max([k for c, k, _ in rows_plan if c == "all_reduce"] + [1])
        ts, f = BL.open_torch_symm(torch, rank, n, ex.store, args.timeout,
                                   xp_dtype(torch, args.dtype), numel, why)
        info["torch-symm"] = f
        if ts is not None:
            closers.append(ts)
            for v in ts.variants:
                def case(coll, count, like, v=v):
                    inplace = v == "twoshot"
                    return make_case(coll, count, like, ts.input,
                                     (lambda k, s: s) if inplace else None)

                cols.append(M.Column(
                    f"torch-symm/{v}", "torch-symm", ts, case,
                    lambda c, v=v: ts.call(v, c.send, c.recv),
                    skip=lambda coll, nb: BL.torch_symm_size_skip(coll, args.dtype, args.op, nb),
                    variant=v))
    for name, f in info.items():
        f.setdefault("measured", "skipped" not in f)
    return cols


def xp_dtype(torch: Any, dtype: str) -> Any:
    return getattr(torch, B.DTYPES[dtype][2])


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    notes = BL.force_no_multicast()  # before torch, NCCL or any comm exists
    torch = None
    if args.device != "cpu":
        try:
            import torch  # type: ignore[import-not-found,no-redef]
        except ImportError:
            torch = None
    asked = args.device
    _resolve(args, torch)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        if os.environ.get("RANK") == "0":
            for line in notes:
                print(f"cclx-perf: {line}", file=sys.stderr)
        return run_rank(args, torch)
    for line in notes:
        print(f"cclx-perf: {line}", file=sys.stderr)
    n = args.nranks or (torch.cuda.device_count() if args.cuda else 4)
    if args.cuda and n > torch.cuda.device_count():
        raise SystemExit(f"cclx-perf: {n} ranks but only {torch.cuda.device_count()} GPU(s): "
                         "ranks sharing a GPU time-slice, so times would mean nothing")
    _check_plan(args, n)
    print(R.plan_line(args, n, torch, asked), flush=True)
    return _launch(argv, n)


if __name__ == "__main__":
    sys.exit(main())
