"""torch.distributed on the cclx NCCL drop-in, on >= 2 GPUs of one host:

    cclx-nccl run torchrun --nproc-per-node 2 bench/dropin_torch.py --json OUT.json [--nonblocking]

Every collective torch offers runs on fresh random data with interception on and again with it
off (cclxDropinSetIntercept(0): the real NCCL on the same group) and the results are compared:
all_reduce (sum, avg, max, min, product, premul-sum), all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single (even and uneven), broadcast, reduce, send/recv,
batch_isend_irecv, coalesced ops, a new_group, an all_reduce captured in a CUDA graph and
replayed, and NCCL called by path with ctypes as vLLM does (VLLM_NCCL_SO_PATH). Evidence that
cclx's kernels ran: the kernels of a captured graph (DDA kernels with interception on, NCCL's
without) and the CCLX_DEBUG=INFO lines when CCLX_DEBUG_FILE names a file. Then dist.all_reduce
is timed from --min-bytes to --max-bytes, eager and in CUDA graphs, interception on against off.
Rank 0 writes every check and number to --json; the exit status is 1 when a check failed.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import glob
import json
import os
import re
import socket
import statistics
import sys
import tempfile
import traceback
from typing import Any, Callable, Dict, List, Optional


def parse_size(s: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"invalid size {s!r} (e.g. 1K, 256M)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True, help="results (rank 0 writes)")
    p.add_argument("--nonblocking", action="store_true",
                   help="TORCH_NCCL_USE_COMM_NONBLOCKING=1 (nonblocking NCCL comms)")
    p.add_argument("--no-device-id", action="store_true",
                   help="init_process_group without device_id (lazy comm creation)")
    p.add_argument("--timeout", type=float, default=300.0, help="process group timeout (s)")
    p.add_argument("--min-bytes", type=parse_size, default=parse_size("1K"))
    p.add_argument("--max-bytes", type=parse_size, default=parse_size("256M"))
    p.add_argument("--factor", type=int, default=2, help="size step of the timings")
    p.add_argument("--dtype", default="bfloat16", help="dtype of the timings")
    p.add_argument("--iters", type=int, default=20, help="ops per timed batch")
    p.add_argument("--repeats", type=int, default=5, help="timed batches per mode (median)")
    p.add_argument("--graph-ops", type=int, default=10, help="all_reduces per captured graph")
    p.add_argument("--skip-timing", action="store_true")
    return p.parse_args()


ARGS = parse_args()
if ARGS.nonblocking:  # read when the process group creates its comms
    os.environ["TORCH_NCCL_USE_COMM_NONBLOCKING"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ.get("LOCAL_RANK", RANK))
DEV = torch.device("cuda", LOCAL % torch.cuda.device_count())
torch.cuda.set_device(DEV)
NCCL_KERNEL = re.compile(r"nccl\w*Kernel")
DDA_KERNEL = re.compile(r"dda(Flat|Lamport|Tree)Kernel")


class Dropin:
    """The preloaded drop-in's own entry points."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(None)
        if not hasattr(lib, "cclxDropinSetIntercept"):
            raise SystemExit("dropin_torch.py: the cclx drop-in is not loaded; run it under "
                             "`cclx-nccl run`")
        self.set = lib.cclxDropinSetIntercept
        self.set.argtypes, self.set.restype = [ctypes.c_int], ctypes.c_int
        fn = lib.cclxDropinRealNccl
        fn.argtypes, fn.restype = [ctypes.POINTER(ctypes.c_char_p)], ctypes.c_void_p
        path = ctypes.c_char_p()
        if not fn(ctypes.byref(path)):
            raise SystemExit("dropin_torch.py: the drop-in found no real NCCL")
        self.real = path.value.decode()
        self.depth = lib.cclxDropinGroupDepth

    @contextlib.contextmanager
    def intercept(self, on: bool):
        before = self.set(1 if on else 0)
        try:
            yield
        finally:
            self.set(before)


D = Dropin()
STEP = [0]


def next_step() -> None:  # new seeds for the next fresh() calls
    STEP[0] += 1


def fresh(shape: Any, dtype: torch.dtype, rank: int = RANK) -> torch.Tensor:
    """New random data; every rank can make any rank's (same seed per call and rank)."""
    g = torch.Generator(device=DEV)
    g.manual_seed(STEP[0] * 1000 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, device=DEV, dtype=torch.float32).to(dtype)
    return torch.randint(-1000, 1000, shape if isinstance(shape, tuple) else (shape,),
                         generator=g, device=DEV, dtype=dtype)


def compare(got: torch.Tensor, ref: torch.Tensor, exact: bool = False) -> Dict[str, Any]:
    """Bitwise for data movement, integers, max and min; else within the rounding of WORLD
    additions of the result's magnitude."""
    bitwise = bool(torch.equal(got, ref))
    if exact or not got.is_floating_point():
        return {"ok": bitwise, "bitwise": bitwise}
    diff = (got.double() - ref.double()).abs().nan_to_num(nan=float("inf"))
    worst = float(diff.max()) if diff.numel() else 0.0
    scale = float(ref.double().abs().max()) if ref.numel() else 0.0
    tol = 2 * WORLD * torch.finfo(got.dtype).eps * (scale + 1.0)
    return {"ok": bitwise or worst <= tol, "bitwise": bitwise, "max_abs_diff": worst, "tol": tol}


def on_off(fn: Callable[..., Any], *tensors: torch.Tensor):
    """fn on clones of `tensors` with interception on, then on other clones with it off."""
    a = [t.clone() for t in tensors]
    b = [t.clone() for t in tensors]
    with D.intercept(True):
        fn(*a)
    with D.intercept(False):
        fn(*b)
    torch.cuda.synchronize()
    return a, b


CHECKS: List[Dict[str, Any]] = []


def check(name: str, fn: Callable[[], Dict[str, Any]]) -> None:
    next_step()
    try:
        res = fn()
    except Exception:  # noqa: BLE001 - recorded, the run goes on
        res = {"ok": False, "error": traceback.format_exc()[-2000:]}
    res["ok"] = bool(res.get("ok", False))
    CHECKS.append({"name": name, **res})
    if not res["ok"]:
        print(f"rank {RANK}: FAILED {name}: {res}", flush=True)


def all_ok(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    bad = [r for r in results if not r["ok"]]
    return {"ok": not bad, "cases": len(results), "failed": bad[:5]}


# ---- collectives ----

COUNTS = [1, 5, 4096, 65537, 1 << 20, 16 << 20]
FLOATS = [torch.float32, torch.bfloat16, torch.float16]
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
       "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}


def all_reduce_cases(op_name: str) -> Dict[str, Any]:
    res = []
    dtypes = FLOATS + ([torch.int32] if op_name in ("sum", "max", "min") else [])
    for dt in dtypes:
        for c in COUNTS:
            next_step()
            x = fresh(c, dt)
            op = dist._make_nccl_premul_sum(0.5) if op_name == "premul" else OPS[op_name]
            (a,), (b,) = on_off(lambda t: dist.all_reduce(t, op=op), x)
            r = compare(a, b, exact=op_name in ("max", "min"))
            res.append({"dtype": str(dt), "count": c, **r})
    return all_ok(res)


def all_gather_cases() -> Dict[str, Any]:
    res = []
    for dt in FLOATS + [torch.int64]:
        for c in COUNTS[:-1]:
            next_step()
            x = fresh(c, dt)
            out = torch.empty(c * WORLD, device=DEV, dtype=dt)
            (a, _), (b, _) = on_off(lambda o, t: dist.all_gather_into_tensor(o, t), out, x)
            want = torch.cat([fresh(c, dt, r) for r in range(WORLD)])
            r = compare(a, b, exact=True)
            r["ok"] = r["ok"] and bool(torch.equal(a, want))
            res.append({"dtype": str(dt), "count": c, **r})
    return all_ok(res)


def reduce_scatter_cases() -> Dict[str, Any]:
    res = []
    for op_name in ("sum", "avg", "max"):
        for dt in FLOATS:
            for c in COUNTS[:-1]:
                next_step()
                x = fresh(c * WORLD, dt)
                out = torch.empty(c, device=DEV, dtype=dt)
                (a, _), (b, _) = on_off(
                    lambda o, t: dist.reduce_scatter_tensor(o, t, op=OPS[op_name]), out, x)
                res.append({"op": op_name, "dtype": str(dt), "count": c,
                            **compare(a, b, exact=op_name == "max")})
    return all_ok(res)


def all_to_all_cases(uneven: bool) -> Dict[str, Any]:
    res = []
    for dt in (torch.float32, torch.bfloat16):
        for c in COUNTS[:-1]:
            next_step()
            if uneven:  # rank r sends (r + p) % 3 + c elements to rank p
                split = [(RANK + p) % 3 + c for p in range(WORLD)]
                x = fresh(sum(split), dt)
                out = torch.empty(sum(split), device=DEV, dtype=dt)
                fn = lambda o, t: dist.all_to_all_single(o, t, split, split)  # noqa: E731
            else:
                x = fresh(c * WORLD, dt)
                out = torch.empty(c * WORLD, device=DEV, dtype=dt)
                fn = lambda o, t: dist.all_to_all_single(o, t)  # noqa: E731
            (a, _), (b, _) = on_off(fn, out, x)
            res.append({"dtype": str(dt), "count": c, **compare(a, b, exact=True)})
    return all_ok(res)


def rooted_cases(kind: str) -> Dict[str, Any]:
    """broadcast from the first and from the last rank; reduce (sum, max) to them."""
    res = []
    for root, op_name in ((0, "sum"), (WORLD - 1, "max")):
        for c in COUNTS[:-1]:
            next_step()
            x = fresh(c, torch.float32)
            if kind == "broadcast":
                (a,), (b,) = on_off(lambda t: dist.broadcast(t, src=root), x)
            else:
                (a,), (b,) = on_off(lambda t: dist.reduce(t, dst=root, op=OPS[op_name]), x)
            r = compare(a, b, exact=kind == "broadcast" or op_name == "max")
            if kind == "broadcast":
                r["ok"] = r["ok"] and bool(torch.equal(a, fresh(c, torch.float32, root)))
            if kind == "broadcast" or RANK == root:  # reduce: defined on the root only
                res.append({"root": root, "op": op_name, "count": c, **r})
    return all_ok(res)


def p2p_case(batched: bool) -> Dict[str, Any]:
    """send/recv between rank pairs (2k, 2k+1), or batch_isend_irecv around the ring."""
    if not batched and WORLD % 2:
        return {"ok": True, "skipped": "odd world size"}
    to, frm = ((RANK + 1) % WORLD, (RANK - 1) % WORLD) if batched else (RANK ^ 1, RANK ^ 1)
    res = []
    for c in COUNTS[:-1]:
        next_step()
        x = fresh(c, torch.bfloat16)
        y = torch.empty(c, device=DEV, dtype=torch.bfloat16)
        if batched:
            ops = [dist.P2POp(dist.isend, x, to), dist.P2POp(dist.irecv, y, frm)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        elif RANK % 2 == 0:
            dist.send(x, to)
            dist.recv(y, frm)
        else:
            dist.recv(y, frm)
            dist.send(x, to)
        torch.cuda.synchronize()
        res.append({"count": c, "ok": bool(torch.equal(y, fresh(c, torch.bfloat16, frm)))})
    return all_ok(res)


def coalesced_case() -> Dict[str, Any]:
    sizes = [3, 4096, 65537, 1 << 20]
    res = []

    def managed(kind: str, outs: List[torch.Tensor], ins: List[torch.Tensor]) -> None:
        with dist._coalescing_manager(async_ops=True) as cm:
            for o, t in zip(outs, ins):
                if kind == "all_reduce":
                    dist.all_reduce(t)
                elif kind == "all_gather":
                    dist.all_gather_into_tensor(o, t)
                else:
                    dist.reduce_scatter_tensor(o, t)
        cm.wait()

    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        next_step()
        m_in, m_out = (WORLD if kind == k else 1 for k in ("reduce_scatter", "all_gather"))
        ins = [fresh(s * m_in, torch.float32) for s in sizes]
        outs = [torch.empty(s * m_out, device=DEV) for s in sizes]
        n = len(sizes)
        a, b = on_off(lambda *t: managed(kind, list(t[:n]), list(t[n:])), *outs, *ins)
        part = slice(n, None) if kind == "all_reduce" else slice(0, n)  # the results
        for s, g, r in zip(sizes, a[part], b[part]):
            res.append({"kind": kind, "count": s, **compare(g, r, exact=kind == "all_gather")})
    if hasattr(dist, "all_reduce_coalesced"):
        next_step()
        ins = [fresh(s, torch.float32) for s in sizes]
        a, b = on_off(lambda *t: dist.all_reduce_coalesced(list(t)), *ins)
        for s, g, r in zip(sizes, a, b):
            res.append({"kind": "all_reduce_coalesced", "count": s, **compare(g, r)})
    return all_ok(res)


def new_group_case() -> Dict[str, Any]:
    res = []
    groups = {"all": list(range(WORLD)), "even": list(range(0, WORLD, 2))}
    made = {k: dist.new_group(v) for k, v in groups.items()}  # every rank creates every group
    for name, ranks in groups.items():
        if RANK not in ranks:
            continue
        for c in (4096, 1 << 20):
            next_step()
            x = fresh(c, torch.bfloat16)
            (a,), (b,) = on_off(lambda t: dist.all_reduce(t, group=made[name]), x)
            res.append({"group": name, "count": c, **compare(a, b)})
    return all_ok(res)


# ---- CUDA graphs ----

def capture(fn: Callable[[], Any], on: bool, debug_path: Optional[str] = None):
    """A CUDA graph of fn() captured with interception `on` (warmed up on a side stream)."""
    with D.intercept(on):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        if debug_path:
            g.enable_debug_mode()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        if debug_path:
            g.debug_dump(debug_path)
    return g


def kernels_of(dot_path: str) -> List[str]:
    """NCCL's and cclx's DDA kernel names in a graph's DOT dump."""
    with open(dot_path, errors="replace") as f:
        text = f.read()
    return sorted(set(re.findall(r"\w*(?:nccl\w*Kernel|dda(?:Flat|Lamport|Tree)Kernel)\w*",
                                 text)))


def graph_case(evidence: Dict[str, Any]) -> Dict[str, Any]:
    res, tmp = [], tempfile.mkdtemp(prefix="dropin_graph_")
    for c in (4096, 1 << 20):
        static = torch.zeros(c, device=DEV, dtype=torch.bfloat16)
        dot = os.path.join(tmp, f"on_{c}.dot")
        g = capture(lambda: dist.all_reduce(static), True, dot if c == 4096 else None)
        for rep in range(3):  # replay on new data each time
            next_step()
            x = fresh(c, torch.bfloat16)
            static.copy_(x)
            g.replay()
            torch.cuda.synchronize()
            ref = x.clone()
            with D.intercept(False):
                dist.all_reduce(ref)
            torch.cuda.synchronize()
            res.append({"count": c, "replay": rep, **compare(static, ref)})
        del g
        if c == 4096:  # the kernels the drop-in put into the graph, and NCCL's
            evidence["graph_kernels_intercept_on"] = kernels_of(dot)
            off_dot = os.path.join(tmp, "off.dot")
            capture(lambda: dist.all_reduce(static), False, off_dot)
            evidence["graph_kernels_intercept_off"] = kernels_of(off_dot)
    return all_ok(res)


def evidence_case(evidence: Dict[str, Any]) -> Dict[str, Any]:
    """DDA kernels in the graph captured with interception on, NCCL's without; the log lines."""
    log = os.environ.get("CCLX_DEBUG_FILE")
    lines: List[str] = []
    if log:
        path = log.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
        for f in glob.glob(path):
            with open(f, errors="replace") as fh:
                lines += [ln.rstrip() for ln in fh if "NCCL drop-in" in ln or "peer memory" in ln]
    evidence["log_lines"] = lines[:40]
    on = evidence.get("graph_kernels_intercept_on", [])
    off = evidence.get("graph_kernels_intercept_off", [])
    dda_on = any(DDA_KERNEL.search(k) for k in on)
    nccl_on = any(NCCL_KERNEL.search(k) for k in on)
    nccl_off = any(NCCL_KERNEL.search(k) for k in off)
    log_on = any("DDA and FP8 collectives on" in ln for ln in lines) if log else None
    if WORLD == 1:  # a comm of one rank: every call is forwarded
        ok = not dda_on and nccl_on
    else:
        ok = dda_on and not nccl_on and nccl_off and log_on is not False
    return {"ok": ok, "dda_kernel_with_intercept": dda_on, "nccl_kernel_with_intercept": nccl_on,
            "nccl_kernel_without_intercept": nccl_off, "log_says_dda_on": log_on}


# ---- NCCL by path, as vLLM and SGLang use it ----

class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def vllm_case() -> Dict[str, Any]:
    """ctypes.CDLL(VLLM_NCCL_SO_PATH): ncclGetUniqueId on rank 0 (shared through the store),
    ncclCommInitRank, ncclAllReduce eager and in a CUDA graph, ncclCommDestroy."""
    path = os.environ.get("VLLM_NCCL_SO_PATH")
    if not path:
        return {"ok": False, "error": "VLLM_NCCL_SO_PATH is not set (run under cclx-nccl run)"}
    lib = ctypes.CDLL(path)
    P, I = ctypes.c_void_p, ctypes.c_int
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(P), I, _UniqueId, I]
    lib.ncclAllReduce.argtypes = [P, P, ctypes.c_size_t, I, I, P, P]

    def ok(r: int, what: str) -> None:
        if r != 0:
            raise RuntimeError(f"{what}: {r} {lib.ncclGetErrorString(r).decode()}")

    version = ctypes.c_int()
    ok(lib.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
    store = dist.distributed_c10d._get_default_store()
    key = "dropin_torch/vllm_uid"
    if RANK == 0:
        uid = _UniqueId()
        ok(lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        store.set(key, bytes(uid))
    uid = _UniqueId.from_buffer_copy(store.get(key))
    comm = P()
    ok(lib.ncclCommInitRank(ctypes.byref(comm), WORLD, uid, RANK), "ncclCommInitRank")
    res = []

    def allreduce(t: torch.Tensor) -> None:  # ncclBfloat16 = 9, ncclFloat32 = 7, ncclSum = 0
        dt = 9 if t.dtype == torch.bfloat16 else 7
        ok(lib.ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, 0, comm,
                             torch.cuda.current_stream().cuda_stream), "ncclAllReduce")

    for dt in (torch.float32, torch.bfloat16):
        for c in (5, 4096, 1 << 20):
            next_step()
            x = fresh(c, dt)
            (a,), (b,) = on_off(lambda t: allreduce(t), x)
            ref = x.clone()
            with D.intercept(False):
                dist.all_reduce(ref)
            torch.cuda.synchronize()
            res.append({"dtype": str(dt), "count": c, "vs_off": compare(a, b)["ok"],
                        **compare(a, ref)})
    static = torch.zeros(4096, device=DEV, dtype=torch.bfloat16)
    g = capture(lambda: allreduce(static), True)
    for rep in range(2):
        next_step()
        x = fresh(4096, torch.bfloat16)
        static.copy_(x)
        g.replay()
        ref = x.clone()
        with D.intercept(False):
            dist.all_reduce(ref)
        torch.cuda.synchronize()
        res.append({"graph_replay": rep, **compare(static, ref)})
    del g
    torch.cuda.synchronize()
    ok(lib.ncclCommDestroy(comm), "ncclCommDestroy")
    out = all_ok([dict(r, ok=r["ok"] and r.get("vs_off", True)) for r in res])
    out["nccl_version"] = version.value
    return out


# ---- timings ----

def timed(fn: Callable[[], Any], iters: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def timings(ctl: Any) -> Dict[str, List[Dict[str, Any]]]:
    """Per size: the median over repeats of the per-op time (us), interception on and off
    alternating, each the maximum over ranks; speedup = off / on."""
    dt = getattr(torch, ARGS.dtype)
    esize = torch.empty(0, dtype=dt).element_size()
    out: Dict[str, List[Dict[str, Any]]] = {"eager": [], "graph": []}
    size = ARGS.min_bytes
    while size <= ARGS.max_bytes:
        x = torch.zeros(max(1, size // esize), device=DEV, dtype=dt)  # sums stay 0
        op = lambda: dist.all_reduce(x)  # noqa: E731
        graphs = {on: capture(lambda: [op() for _ in range(ARGS.graph_ops)], on)
                  for on in (True, False)}
        t: Dict[str, List[float]] = {k: [] for k in ("eager_on", "eager_off", "graph_on",
                                                     "graph_off")}
        for on in (True, False):
            with D.intercept(on):
                timed(op, 3)
        for _ in range(ARGS.repeats):
            for on in (True, False):
                sfx = "on" if on else "off"
                torch.cuda.synchronize()
                dist.barrier(group=ctl)
                with D.intercept(on):
                    t["eager_" + sfx].append(timed(op, ARGS.iters))
                torch.cuda.synchronize()
                dist.barrier(group=ctl)
                reps = max(1, ARGS.iters // ARGS.graph_ops)
                t["graph_" + sfx].append(timed(graphs[on].replay, reps) / ARGS.graph_ops)
        med = torch.tensor([statistics.median(t[k]) for k in sorted(t)], dtype=torch.float64)
        dist.all_reduce(med, op=dist.ReduceOp.MAX, group=ctl)
        m = dict(zip(sorted(t), med.tolist()))
        for mode in ("eager", "graph"):
            on, off = m[mode + "_on"], m[mode + "_off"]
            out[mode].append({"bytes": x.numel() * esize, "dropin_us": on, "nccl_us": off,
                              "speedup": off / on if on > 0 else None})
        if RANK == 0:
            print(f"{x.numel() * esize:>11} B  eager on/off {m['eager_on']:9.2f} "
                  f"{m['eager_off']:9.2f} us  graph on/off {m['graph_on']:9.2f} "
                  f"{m['graph_off']:9.2f} us", flush=True)
        del graphs, x
        size *= ARGS.factor
    return out


# ---- main ----

def main() -> int:
    kw: Dict[str, Any] = {"timeout": datetime.timedelta(seconds=ARGS.timeout)}
    if not ARGS.no_device_id:
        kw["device_id"] = DEV
    dist.init_process_group("nccl", **kw)
    ctl = dist.new_group(backend="gloo")  # control values stay out of NCCL
    evidence: Dict[str, Any] = {}
    premul = ["premul"] if hasattr(dist, "_make_nccl_premul_sum") else []
    for op_name in ["sum", "avg", "max", "min", "product"] + premul:
        check("all_reduce_" + op_name, lambda: all_reduce_cases(op_name))
    check("all_gather_into_tensor", all_gather_cases)
    check("reduce_scatter_tensor", reduce_scatter_cases)
    check("all_to_all_single", lambda: all_to_all_cases(False))
    check("all_to_all_single_uneven", lambda: all_to_all_cases(True))
    check("broadcast", lambda: rooted_cases("broadcast"))
    check("reduce", lambda: rooted_cases("reduce"))
    check("send_recv", lambda: p2p_case(False))
    check("batch_isend_irecv", lambda: p2p_case(True))
    check("coalesced", coalesced_case)
    check("new_group", new_group_case)
    check("cuda_graph_all_reduce", lambda: graph_case(evidence))
    check("cclx_ran", lambda: evidence_case(evidence))
    check("vllm_ctypes", vllm_case)
    check("group_depth_zero", lambda: {"ok": D.depth() == 0})
    times = {} if ARGS.skip_timing else timings(ctl)
    every: List[Any] = [None] * WORLD
    dist.all_gather_object(every, CHECKS, group=ctl)
    dist.barrier(group=ctl)
    destroyed = True
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        destroyed = False
    names = [c["name"] for c in CHECKS]
    summary = {n: all(rank_checks[i]["ok"] for rank_checks in every)
               for i, n in enumerate(names)}
    summary["destroy_process_group"] = destroyed
    passed = all(summary.values())
    if RANK == 0:
        doc = {"tool": "dropin_torch", "world_size": WORLD, "torch": torch.__version__,
               "nccl_version_torch": ".".join(map(str, torch.cuda.nccl.version())),
               "real_nccl": D.real, "dropin": os.environ.get("VLLM_NCCL_SO_PATH"),
               "nonblocking": ARGS.nonblocking, "device_id": not ARGS.no_device_id,
               "gpu": torch.cuda.get_device_name(DEV), "passed": passed, "summary": summary,
               "evidence": evidence, "checks": every, "timings": times,
               "env": {k: v for k, v in os.environ.items()
                       if k.startswith(("CCLX_", "NCCL_", "TORCH_NCCL_"))}}
        os.makedirs(os.path.dirname(os.path.abspath(ARGS.json)), exist_ok=True)
        with open(ARGS.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        for n, ok in summary.items():
            print(f"{'ok    ' if ok else 'FAILED'} {n}", flush=True)
        print(f"dropin_torch: {'PASSED' if passed else 'FAILED'} ({ARGS.json})", flush=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
