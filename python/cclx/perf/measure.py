"""cclx-perf measurement of one row: every column (the library under test, then each baseline,
variants of a baseline timed apart and the best kept) checked, warmed up or captured in a CUDA
graph, and timed in alternating batches; and the exchange of numbers between ranks."""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional

from . import bench as B


class Exchange:
    """Numbers combined over ranks through a store the tool owns (rank 0 serves it, the
    collectives under test never see it).

    finish() is the last exchange: every other rank posts that it has made its last request;
    rank 0 returns only when all have, so the server never leaves while a rank still reads
    (a rank that read after rank 0 had gone would fail with 'connection reset')."""

    def __init__(self, store: Any, rank: int, n: int, timeout: float) -> None:
        self.store, self.rank, self.n, self.timeout = store, rank, n, timeout
        self.seq = 0

    def reduce(self, vals: List[float], how: str) -> List[float]:
        """Element-wise max or sum over ranks."""
        self.seq += 1
        key = f"cclx-perf/{self.seq}/"
        self.store.set(key + str(self.rank), json.dumps(vals))
        allv = [json.loads(self.store.get(key + str(r), self.timeout)) for r in range(self.n)]
        return [max(c) if how == "max" else sum(c) for c in zip(*allv)]

    def finish(self) -> None:
        """Collective; after it this rank must not use the store (it is released)."""
        if self.store is None:
            return
        if self.rank == 0:
            self.store.wait([f"cclx-perf/done/{r}" for r in range(1, self.n)], self.timeout)
        else:
            self.store.set(f"cclx-perf/done/{self.rank}", "1")
        # Dropping the last reference closes a client's connection, or stops rank 0's server
        # after it has sent every reply it owes.
        self.store = None


class Column:
    """One timed column of a row. key: unique ('torch-symm/oneshot'); name: the table column
    it reports into ('torch-symm'); variant: which of the column's variants (or None).
    case(like) builds this column's buffers; call(case) returns the collective to time;
    skip(coll, bytes) says why the column has no number for a row (or None)."""

    def __init__(self, key: str, name: str, comm: Any,
                 case: Callable[..., B.Case], call: Callable[[B.Case], Callable[[], Any]],
                 skip: Optional[Callable[[str, int], Optional[str]]] = None,
                 variant: Optional[str] = None) -> None:
        self.key, self.name, self.comm, self.variant = key, name, comm, variant
        self.case, self.call = case, call
        self.skip = skip or (lambda coll, nbytes: None)


def comm_column(name: str, comm: Any, redop: Any, hints: Dict[str, str], make_case: Callable,
                send_buf: Optional[Callable] = None,
                recv_buf: Optional[Callable] = None) -> Column:
    """A column that calls a cclx-like comm (cclx, the NCCL backend, the NCCL C API)."""
    def case(coll, count, like):
        return make_case(coll, count, like, send_buf, recv_buf)
    return Column(name, name, comm, case, lambda c: c.call(comm, redop, hints))


def one_size(args: Any, coll: str, count: int, nbytes: int, n: int, cols: List[Column],
             barrier: Callable[[], None], timer: B.Timer, tol: float, ex: Exchange,
             make_case: Callable, shared: bool, corrupt: bool) -> Dict[str, Any]:
    """The row of one collective at one size. shared: every column runs on the same buffers
    (the NCCL API: the drop-in and the real NCCL on one Case)."""
    factor = B.COLLS[coll][0](n)
    skipped = {c.key: c.skip(coll, nbytes) for c in cols}
    live = [c for c in cols if skipped[c.key] is None]
    cases: Dict[str, B.Case] = {}
    first: Optional[B.Case] = None
    for c in live:
        if shared and first is not None:
            cases[c.key] = first
            continue
        cases[c.key] = c.case(coll, count, first)
        first = first or cases[c.key]
    fns = {c.key: c.call(cases[c.key]) for c in live}
    wrong = {c.key: 0 for c in live}
    graphs = {}
    for c in live:
        k = c.key
        cases[k].poison()
        cases[k].refill()
        fns[k]()
        timer.sync()
        if args.check:
            wrong[k] += cases[k].wrong(tol)
        graphs[k] = timer.prepare(fns[k], args.warmup)
    times: Dict[str, List[float]] = {c.key: [] for c in live}
    for _ in range(args.repeats):
        for c in live:
            barrier()
            timer.sync()
            times[c.key].append(timer.time(fns[c.key], graphs[c.key], args.iters))
    timer.sync()
    if args.check:  # out-of-place: the last timed op left the same exact result
        for c in live:
            k = c.key
            if shared or cases[k].src is not None:  # another library's op ran last, or this
                cases[k].poison()                   # one writes into its input: once more
                cases[k].refill()
                fns[k]()
                timer.sync()
            wrong[k] += cases[k].wrong(tol)
    if corrupt and live:
        wrong[live[0].key] += 1
    # every rank has the same columns for a row, so the exchanged lists line up
    med = ex.reduce([B.median(times[c.key]) for c in live], "max")
    wr = ex.reduce([float(wrong[c.key]) for c in live], "sum")
    row: Dict[str, Any] = {"coll": coll, "bytes": nbytes, "count": count, "dtype": args.dtype,
                           "op": args.op if coll in ("all_reduce", "reduce",
                                                     "reduce_scatter") else "none",
                           "root": args.root if coll in ("broadcast", "reduce") else -1}
    for i, c in enumerate(live):
        t = med[i]
        algbw = nbytes / (t * 1e-6) / 1e9 if t > 0 else 0.0
        d = {"time_us": t, "algbw": algbw, "busbw": algbw * factor, "wrong": int(wr[i]),
             "times_us_rank": times[c.key]}
        if c.variant is None:
            row[c.name] = d
            continue
        # variants of one baseline: the fastest is its number; every variant is kept
        cur = row.get(c.name)
        vs = (cur or {}).get("variants", {})
        vs[c.variant] = {"time_us": t, "wrong": int(wr[i])}
        wrong_all = sum(v["wrong"] for v in vs.values())
        if cur is None or t < cur["time_us"]:
            cur = dict(d, variant=c.variant)
        cur["variants"], cur["wrong"] = vs, wrong_all
        row[c.name] = cur
    notes = {}
    for c in cols:
        if skipped[c.key] is not None and c.name not in row:
            notes[c.name] = skipped[c.key]
    if notes:
        row["not_measured"] = notes
    ratios(row, [c.name for c in cols])
    del graphs
    return row


def ratios(row: Dict[str, Any], names: List[str]) -> None:
    """speedup_vs[baseline] = baseline time / time of the column under test (names[0]);
    best_baseline / speedup_best: against the fastest baseline measured on this row; speedup:
    against 'nccl' (the figure of earlier records)."""
    names = list(dict.fromkeys(names))
    tested, bases = names[0], names[1:]
    t0 = row.get(tested, {}).get("time_us", 0.0)
    if not t0 or t0 <= 0:
        return
    vs = {b: row[b]["time_us"] / t0 for b in bases if b in row and row[b]["time_us"] > 0}
    if not vs:
        return
    row["speedup_vs"] = vs
    best = min(vs, key=lambda b: row[b]["time_us"])
    row["best_baseline"], row["speedup_best"] = best, vs[best]
    if "nccl" in vs:
        row["speedup"] = vs["nccl"]


def table_names(cols: List[Column]) -> List[str]:
    """The table's columns in order (variants folded into their baseline)."""
    return list(dict.fromkeys(c.name for c in cols))

