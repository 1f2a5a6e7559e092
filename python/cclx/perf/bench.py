"""cclx-perf worker: buffers with exactly predictable results, the collective calls, checking
and timing (CUDA events, CUDA-graph replays, or host clocks)."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

# busbw factor per collective, and whether `size` is per rank (True) or the total (False).
COLLS = {
    "all_reduce": (lambda n: 2.0 * (n - 1) / n, True),
    "all_gather": (lambda n: (n - 1) / n, False),
    "reduce_scatter": (lambda n: (n - 1) / n, False),
    "all_to_all": (lambda n: (n - 1) / n, False),
    "all_to_all_v": (lambda n: (n - 1) / n, False),
    "broadcast": (lambda n: 1.0, True),
    "reduce": (lambda n: 1.0, True),
    # the fused allreduce + residual add + RMSNorm (fused.py): rows by tokens x hidden, not
    # in 'all' nor in plan()
    "allreduce_rmsnorm": (lambda n: 2.0 * (n - 1) / n, True),
    "put": (lambda n: 1.0, True),  # window put + signal + wait_signal (put.py)
}
ALL = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v", "broadcast",
       "reduce")
ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter":
           "reduce_scatter", "alltoall": "all_to_all", "bcast": "broadcast",
           "alltoallv": "all_to_all_v", "all_to_all_v_single": "all_to_all_v"}
DTYPES = {  # name -> (cclx short name, bytes, torch attr, numpy name)
    "f32": ("f32", 4, "float32", "float32"), "f64": ("f64", 8, "float64", "float64"),
    "f16": ("f16", 2, "float16", "float16"), "bf16": ("bf16", 2, "bfloat16", "bfloat16"),
    "i32": ("i32", 4, "int32", "int32"), "i64": ("i64", 8, "int64", "int64"),
    "u8": ("u8", 1, "uint8", "uint8"), "i8": ("i8", 1, "int8", "int8"),
}
DTYPE_ALIASES = {"float": "f32", "float32": "f32", "double": "f64", "float64": "f64",
                 "half": "f16", "float16": "f16", "bfloat16": "bf16", "int32": "i32",
                 "int": "i32", "int64": "i64", "uint8": "u8", "int8": "i8"}
OPS = ("sum", "prod", "min", "max", "avg")


class Xp:
    """The few array operations the checks need, on numpy or on torch (any device)."""

    def __init__(self, torch: Any, device: Any, dtype: str):
        self.torch = torch
        self.device = device
        self.name = dtype
        if torch is not None:
            self.dt = getattr(torch, DTYPES[dtype][2])
        elif dtype == "bf16":
            import ml_dtypes  # type: ignore[import-not-found]

            self.dt = np.dtype(ml_dtypes.bfloat16)
        else:
            self.dt = np.dtype(DTYPES[dtype][3])

    def idx(self, n: int):
        if self.torch is not None:
            return self.torch.arange(n, device=self.device, dtype=self.torch.int64)
        return np.arange(n, dtype=np.int64)

    def cat(self, parts):
        if self.torch is not None:
            return self.torch.cat(parts)
        return np.concatenate(parts)

    def cast(self, a):
        return a.to(self.dt) if self.torch is not None else a.astype(self.dt)

    def f64(self, a):
        if self.torch is not None:
            return a.to(self.torch.float64)
        return a.astype(np.float64)

    def empty(self, n: int):
        if self.torch is not None:
            return self.torch.empty(n, dtype=self.dt, device=self.device)
        return np.empty(n, dtype=self.dt)

    def fill_(self, dst, src) -> None:
        if self.torch is not None:
            dst.copy_(src)
        else:
            dst[...] = src

    def wrong(self, got, exp, tol: float) -> int:
        g = self.f64(got)
        if self.torch is not None:
            bad = (g - exp).abs() > tol if tol > 0 else g != exp
            return int(bad.sum().item())
        bad = np.abs(g - exp) > tol if tol > 0 else g != exp
        return int(bad.sum())


def val(rank, i):
    """Input value of element i on `rank`: a small integer (exact sums in every float type)."""
    return (i * 7 + rank * 3) % 5 - 2


def pval(rank, i):
    """PRODUCT inputs: 1 or 2, so products stay exact."""
    return 1 + (i + rank) % 2


def a2a(src, dst, i):
    return (src * 5 + dst * 3 + i) % 7 - 3


def a2av_split(src: int, dst: int, count: int, n: int) -> int:
    """Elements rank src sends rank dst in the all_to_all_v rows: `count` per pair on average,
    skewed like token routing (half more to itself, half less to the next rank; the rest
    `count`), so that every rank still sends and receives n * count."""
    if n == 1:
        return count
    if dst == src:
        return count + count // 2
    if dst == (src + 1) % n:
        return count - count // 2
    return count


class Case:
    """Buffers, the call and the expected result of one collective at one size.

    `like`: another Case of the same collective and size whose expected result and input
    values this one shares (one float64 reference per size, whatever the number of columns).
    `send_buf(numel)` / `recv_buf(numel, send)`: where the buffers live when not in ordinary
    memory (registered windows, symmetric memory); the input values are then copied in, kept,
    and copied in again by refill() (a library that writes into its input, e.g. in place)."""

    def __init__(self, xp: Xp, coll: str, count: int, rank: int, n: int, op: str, root: int,
                 like: Optional["Case"] = None,
                 send_buf: Optional[Callable[[int], Any]] = None,
                 recv_buf: Optional[Callable[[int, Any], Any]] = None):
        self.xp, self.coll, self.count, self.rank, self.n, self.op, self.root = (
            xp, coll, count, rank, n, op, root)
        if like is not None:
            self.exp, vals, recv_n = like.exp, like.values, like.recv_numel
            self.splits_in = getattr(like, "splits_in", None)
            self.splits_out = getattr(like, "splits_out", None)
        else:
            self.exp, vals, recv_n = self._build()
        self.values, self.recv_numel = vals, recv_n
        self.src = None
        self.barrier: Optional[Callable[[], Any]] = None  # after poison(): receivers written by peers
        if send_buf is not None:
            self.send = send_buf(_numel(vals))
            xp.fill_(self.send, vals)
            self.src = vals
        elif like is not None:
            self.send = xp.empty(_numel(vals))
            xp.fill_(self.send, vals)
        else:
            self.send = vals
        self.recv = recv_buf(recv_n, self.send) if recv_buf is not None else xp.empty(recv_n)

    def _reduced(self, idx):
        n, op = self.n, self.op
        if op == "prod":
            e = self.xp.f64(pval(0, idx))
            for r in range(1, n):
                e = e * pval(r, idx)
            return e
        terms = [self.xp.f64(val(r, idx)) for r in range(n)]
        if op in ("sum", "avg"):
            e = terms[0]
            for t in terms[1:]:
                e = e + t
            return e / n if op == "avg" else e
        e = terms[0]
        for t in terms[1:]:
            if self.xp.torch is not None:
                e = self.xp.torch.minimum(e, t) if op == "min" else self.xp.torch.maximum(e, t)
            else:
                e = np.minimum(e, t) if op == "min" else np.maximum(e, t)
        return e

    def _build(self):
        """(expected result as float64, input values in the run's dtype, output elements)."""
        xp, c, r, n = self.xp, self.count, self.rank, self.n
        inp = pval if self.op == "prod" else val
        if self.coll in ("all_reduce", "reduce"):
            i = xp.idx(c)
            return self._reduced(i), xp.cast(inp(r, i)), c
        if self.coll == "broadcast":
            i = xp.idx(c)
            return xp.f64(val(self.root, i)), xp.cast(val(r, i)), c
        if self.coll == "all_gather":
            j = xp.idx(c * n)
            return xp.f64(val(j // c, j % c)), xp.cast(val(r, xp.idx(c))), c * n
        if self.coll == "reduce_scatter":
            i = xp.idx(c)
            return self._reduced(i + r * c), xp.cast(inp(r, xp.idx(c * n))), c
        if self.coll == "all_to_all":
            j = xp.idx(c * n)
            return (xp.f64(a2a(j // c, r, j % c)), xp.cast(a2a(r, j // c, j % c)), c * n)
        if self.coll == "all_to_all_v":
            self.splits_in = [a2av_split(r, d, c, n) for d in range(n)]
            self.splits_out = [a2av_split(s, r, c, n) for s in range(n)]
            vals = xp.cat([a2a(r, d, xp.idx(k)) for d, k in enumerate(self.splits_in)])
            exp = xp.cat([a2a(s, r, xp.idx(k)) for s, k in enumerate(self.splits_out)])
            return xp.f64(exp), xp.cast(vals), c * n
        if self.coll == "put":  # the previous rank's values land in this rank's window
            i = xp.idx(c)
            return xp.f64(val((r - 1) % n, i)), xp.cast(val(r, i)), c
        raise ValueError(self.coll)

    def call(self, comm: Any, redop: Any, hints: Dict[str, str]) -> Callable[[], Any]:
        s, o, h = self.send, self.recv, hints or None
        c = self.coll
        if c == "all_reduce":
            return lambda: comm.all_reduce(s, redop, False, h, output=o)
        if c == "reduce":
            return lambda: comm.reduce(s, self.root, redop, False, h, output=o)
        if c == "broadcast":
            return lambda: comm.broadcast(s, self.root, False, h, output=o)
        if c == "all_gather":
            return lambda: comm.all_gather_single(o, s, False, h)
        if c == "reduce_scatter":
            return lambda: comm.reduce_scatter_single(o, s, redop, False, h)
        if c == "all_to_all_v":
            si, so = self.splits_in, self.splits_out
            return lambda: comm.all_to_all_v_single(o, s, so, si, False, h)
        return lambda: comm.all_to_all_single(o, s, False, h)

    def poison(self) -> None:
        if self.xp.torch is not None:
            self.recv.fill_(-77)
        else:
            self.recv[...] = -77
        if self.barrier is not None:
            self.barrier()

    def refill(self) -> None:
        """Copies the input values in again (buffers a library may have written into)."""
        if self.src is not None:
            self.xp.fill_(self.send, self.src)

    def wrong(self, tol: float) -> int:
        if self.coll == "reduce" and self.rank != self.root:
            return 0
        return self.xp.wrong(self.recv, self.exp, tol)


class Timer:
    """Per-op time in microseconds of `k` calls of fn, by the selected method."""

    def __init__(self, torch: Any, cuda: bool, graph: int, blocking: bool):
        self.torch, self.cuda, self.graph, self.blocking = torch, cuda, graph, blocking

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def prepare(self, fn: Callable[[], Any], warmup: int):
        """Warm-up; with graphs, capture `graph` back-to-back calls and return the graph."""
        if not (self.cuda and self.graph > 0):
            for _ in range(warmup):
                fn()
            self.sync()
            return None
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(max(1, warmup)):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(self.graph):
                fn()
        g.replay()
        torch.cuda.synchronize()
        return g

    def time(self, fn: Callable[[], Any], graph: Any, iters: int) -> float:
        if self.cuda and graph is not None:
            reps = max(1, iters // self.graph)
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000.0 / (reps * self.graph)
        if self.cuda and not self.blocking:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000.0 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
            self.sync()
        return (time.perf_counter() - t0) * 1e6 / iters


def _numel(a) -> int:
    return int(a.numel()) if hasattr(a, "numel") and callable(a.numel) else int(a.size)


def buffer_numels(coll: str, count: int, n: int) -> Tuple[int, int]:
    """(send, receive) elements of a Case with this count."""
    if coll in ("all_reduce", "reduce", "broadcast", "put"):
        return count, count
    if coll == "all_gather":
        return count, count * n
    if coll == "reduce_scatter":
        return count * n, count
    return count * n, count * n


def plan(colls: List[str], minb: int, maxb: int, factor: float, esize: int,
         n: int) -> List[Tuple[str, int, int]]:
    """(collective, count, bytes) of every row of a sweep, in order."""
    out = []
    for coll in colls:
        if coll not in ALL and coll != "put":  # allreduce_rmsnorm: rows by tokens x hidden
            continue
        seen = set()
        for size in sizes(minb, maxb, factor):
            count, nbytes = count_for(coll, size, esize, n)
            if count == 0 or nbytes in seen:
                continue
            seen.add(nbytes)
            out.append((coll, count, nbytes))
    return out


def median(xs: List[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def sizes(minb: int, maxb: int, factor: float) -> List[int]:
    out, s = [], max(1, minb)
    while s <= maxb:
        out.append(int(s))
        s = max(int(s * factor), s + 1)
    return out


def count_for(coll: str, size: int, esize: int, n: int) -> Tuple[int, int]:
    """(elements per rank argument, bytes actually moved as `size`) for a requested size."""
    per_rank = COLLS[coll][1]
    total = size // esize
    if per_rank:
        return total, total * esize
    total -= total % n
    return total // n, total * esize


def tolerance(op: str, dtype: str, low_precision: bool, n: int) -> float:
    """0 = exact; AVG of small integers may round; FP8 paths get a stated bound."""
    if low_precision:
        return 0.0625 * 2 * n  # 1/16 of the largest possible |result|
    if op == "avg":
        return {"bf16": 2 ** -6, "f16": 2 ** -9}.get(dtype, 1e-6) * 2
    return 0.0


def best_of(times: Dict[str, List[float]]) -> Dict[str, Optional[float]]:
    return {k: (median(v) if v else None) for k, v in times.items()}
