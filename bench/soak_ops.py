"""The calls of bench/soak.py. draw(kind, rng, ctx) makes a call's spec from the item's random
generator (the same draws on every rank); issue(ctx, spec, async_op) runs it on this rank and
returns (work, check), check(failed) counting the wrong elements of this rank's outputs (failed:
exact or all-ones bytes is accepted). Buffers are views at random element offsets into larger
buffers whose other bytes (guards, 0x7B) are checked too."""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

import numpy as np

import soak_ref as R

INT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR", "PREMUL_SUM")
FLOAT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM")
# CUDA comms refuse the bitwise ops (NCCL has none; docs/API.md): the mix leaves them out there.
CUDA_INT_OPS = tuple(o for o in INT_OPS if o not in ("BAND", "BOR", "BXOR"))
FACTORS = (0.5, 1.25, -0.75, 3.0)  # exact in every float type
GRAPH_KINDS = ("allreduce", "broadcast", "all_gather_single", "reduce_scatter_single",
               "all_to_all_single")  # issue() leaves ctx.again (the same call again), ctx.bufs
BLOCKED = ("all_gather_single", "all_gather", "reduce_scatter_single", "reduce_scatter",
           "all_to_all_single")  # a buffer of size() blocks of `count`
COLL_KINDS = ("allreduce", "reduce", "broadcast", "all_gather_single", "all_gather",
              "reduce_scatter_single", "reduce_scatter", "all_to_all_single", "all_to_all_v")
# Share of each kind among single calls (the rest of the mix: async batches, graphs).
WEIGHTS = {"allreduce": 30, "reduce": 4, "broadcast": 7, "all_gather_single": 8,
           "all_gather": 3, "reduce_scatter_single": 8, "reduce_scatter": 2,
           "all_to_all_single": 7, "all_to_all_v": 7, "rmsnorm": 6, "window": 5, "p2p": 8,
           "barrier": 1}
FP8_HINTS = ({"low_precision": "fp8", "fp8_algo": "oneshot"},
             {"low_precision": "fp8", "fp8_algo": "twoshot"})
Check = Callable[[bool], int]


def allreduce_hints(ctx) -> List[Any]:
    """Every allreduce algorithm the front exposes for this device (None: the size rule)."""
    algos = ["flat", "tree", "lamport", "auto"] + (["dda"] if ctx.cuda else [])
    if ctx.cuda and ctx.has_nccl:
        algos.append("nccl")
    return [None] + [{"algo": a} for a in algos]


def exchange_hints(ctx) -> List[Any]:
    return [None] + ([{"algo": a} for a in ("flat", "tree", "dda")] if ctx.cuda else [])


def pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def draw(kind: str, rng, ctx) -> dict:
    n = ctx.size
    s = {"kind": kind, "dtype": pick(rng, ctx.dtypes), "inplace": bool(rng.random() < 0.5),
         "offs": [int(v) for v in rng.integers(0, 8, 4) * (rng.random(4) < 0.7)]}
    dt = s["dtype"]
    if kind in ("allreduce", "reduce", "reduce_scatter_single", "reduce_scatter"):
        if dt in R.FP8_TYPES:
            s["dtype"] = dt = pick(rng, ("f32", "bf16"))
        int_ops = CUDA_INT_OPS if ctx.cuda else INT_OPS
        s["op"] = pick(rng, int_ops if dt in R.INT_TYPES else FLOAT_OPS)
        s["factor"] = pick(rng, FACTORS)
        hints = allreduce_hints(ctx) if kind == "allreduce" else exchange_hints(ctx)
        s["hints"] = pick(rng, hints)
        if (dt in ("f32", "bf16", "f16") and s["op"] in ("SUM", "AVG") and kind != "reduce"
                and rng.random() < 0.12):
            s["hints"] = pick(rng, FP8_HINTS) if kind == "allreduce" else FP8_HINTS[0]
    elif kind in ("all_gather_single", "all_to_all_single", "broadcast", "all_gather"):
        s["hints"] = pick(rng, exchange_hints(ctx))
        if (kind != "broadcast" and kind != "all_gather" and dt in ("f32", "bf16", "f16")
                and rng.random() < 0.08):
            s["hints"] = FP8_HINTS[0]
    s["root"] = int(rng.integers(n))
    mult = n if kind in BLOCKED else 1
    if kind == "rmsnorm":
        s["dtype"] = dt = pick(rng, ("f32", "bf16", "f16"))
        s["hidden"] = int(pick(rng, (1, 7, 64, 127, 256, 1000, 1024, 4096, 5120)))
        rows = max(1, ctx.max_bytes // (s["hidden"] * R.np_dtype(dt).itemsize))
        s["tokens"] = int(min(rows, np.exp(rng.uniform(0, np.log(min(rows, 512) + 1)))))
        s["tokens"] = max(1, s["tokens"])
        s["quant"] = bool(rng.random() < 0.25)
        s["hints"] = pick(rng, (None, {"fused_algo": "oneshot"}, {"fused_algo": "twoshot"},
                                {"fused_algo": "unfused"}, {"fused_algo": "auto"}))
        s["eps"] = 1e-6
        return s
    if kind == "all_to_all_v":
        m = rng.integers(0, max(1, ctx.count(rng, dt, n)) + 1, (n, n))
        m *= rng.random((n, n)) < 0.85
        if s["inplace"]:
            m = np.triu(m) + np.triu(m, 1).T  # symmetric: every rank sends what it receives
        s["splits"] = m.tolist()
    elif kind == "p2p":
        m = rng.integers(0, max(1, ctx.count(rng, dt, n)) + 1, (n, n))
        s["pairs"] = (m * (rng.random((n, n)) < 0.5)).tolist()
        s["order"] = [rng.permutation(2 * n).tolist() for _ in range(n)]
    elif kind == "window":
        s["dtype"] = "f32"
        s["count"] = int(min(ctx.win_elems, ctx.count(rng, "f32", 1)))
        s["tgt"] = int(rng.integers(0, ctx.win_elems - s["count"] + 1))
        s["shift"] = int(rng.integers(1, n)) if n > 1 else 0
        s["async"] = bool(rng.random() < 0.3)
        s["hints"] = pick(rng, (None, {"put_path": "ce"}, {"put_path": "sm"})) if ctx.cuda else None
    s["count"] = s.get("count", ctx.count(rng, s["dtype"], mult))
    return s


def _reduction(ctx, s, xs_all: List[np.ndarray], got: np.ndarray, failed: bool) -> int:
    fp8 = bool(s.get("hints") and s["hints"].get("low_precision") == "fp8")
    if failed and fp8:
        ref, scale = R.reduce_f64(xs_all, s["op"], s["factor"])
        return R.count_fp8_or_poison(got, ref, scale, xs_all)
    if failed:
        return R.count_not_exact_or_poison(got, R.reduce_exact(xs_all, s["op"], s["dtype"],
                                                               s["factor"]))
    return R.count_wrong_reduce(got, xs_all, s["op"], s["dtype"], s["factor"], fp8)


def _moved(got: np.ndarray, want: np.ndarray, failed: bool, fp8: bool = False) -> int:
    if fp8:
        ref = want.astype(np.float64)
        if failed:
            return R.count_fp8_or_poison(got, ref, np.abs(ref), [want]) if got.size else 0
        return R.count_fp8(got.astype(np.float64), ref, np.abs(ref), [want])
    if failed:
        return R.count_not_exact_or_poison(got, want)
    return R.count_wrong_exact(got, want)


def issue(ctx, s: dict, async_op: bool) -> Tuple[Any, Check]:
    return globals()["_" + s["kind"]](ctx, s, async_op)


def _op(ctx, s):
    op = getattr(ctx.cclx.ReduceOp, s["op"]) if s["op"] != "PREMUL_SUM" else None
    return op if op is not None else ctx.cclx.ReduceOp.PREMUL_SUM(s["factor"])


def _allreduce(ctx, s, async_op):
    dt, n, cid, r = s["dtype"], s["count"], s["cid"], ctx.rank
    xs = [ctx.pool.input(dt, n, cid, q) for q in range(ctx.size)]
    buf = ctx.dev_in(xs[r], s["offs"][0])
    out = buf if s["inplace"] else ctx.dev_out(dt, n, s["offs"][1])
    ctx.again, ctx.bufs = (lambda a=False: ctx.comm.all_reduce(
        buf.view, _op(ctx, s), a, s["hints"], output=None if s["inplace"] else out.view)), \
        [buf, out]
    w = ctx.again(async_op)

    def check(failed):
        bad = ctx.guards(buf, out)
        return bad + _reduction(ctx, s, xs, ctx.host(out), failed)
    return w, check


def _reduce(ctx, s, async_op):
    dt, n, cid, r, root = s["dtype"], s["count"], s["cid"], ctx.rank, s["root"]
    xs = [ctx.pool.input(dt, n, cid, q) for q in range(ctx.size)]
    buf = ctx.dev_in(xs[r], s["offs"][0])
    out = buf if s["inplace"] else ctx.dev_out(dt, n, s["offs"][1])
    w = ctx.comm.reduce(buf.view, root, _op(ctx, s), async_op, s["hints"],
                        output=None if s["inplace"] else out.view)

    def check(failed):
        bad = ctx.guards(buf, out)
        if r != root:
            return bad if s["inplace"] else bad + ctx.guards(out)
        return bad + _reduction(ctx, s, xs, ctx.host(out), failed)
    return w, check


def _broadcast(ctx, s, async_op):
    dt, n, cid, r, root = s["dtype"], s["count"], s["cid"], ctx.rank, s["root"]
    want = ctx.pool.input(dt, n, cid, root)
    buf = ctx.dev_in(want if r == root else ctx.pool.input(dt, n, cid, r), s["offs"][0])
    out = buf if s["inplace"] else ctx.dev_out(dt, n, s["offs"][1])
    ctx.again, ctx.bufs = (lambda a=False: ctx.comm.broadcast(
        buf.view, root, a, s["hints"], output=None if s["inplace"] else out.view)), [buf, out]
    w = ctx.again(async_op)

    def check(failed):
        return ctx.guards(buf, out) + _moved(ctx.host(out), want, failed)
    return w, check


def _fp8(s) -> bool:
    return bool(s.get("hints") and s["hints"].get("low_precision") == "fp8")


def _all_gather_single(ctx, s, async_op):
    dt, n, cid, r, N = s["dtype"], s["count"], s["cid"], ctx.rank, ctx.size
    xs = [ctx.pool.input(dt, n, cid, q) for q in range(N)]
    want = np.concatenate(xs)
    if s["inplace"]:
        pre = R.poison(dt, N * n)
        pre[r * n:(r + 1) * n] = xs[r]
        out = ctx.dev_in(pre, s["offs"][1])
        inp = ctx.sub(out, r * n, n)
    else:
        out = ctx.dev_out(dt, N * n, s["offs"][1])
        inp = ctx.dev_in(xs[r], s["offs"][0])
    ctx.again, ctx.bufs = (lambda a=False: ctx.comm.all_gather_single(
        out.view, inp.view, a, s["hints"])), [out, inp]
    w = ctx.again(async_op)

    def check(failed):
        return ctx.guards(out, inp) + _moved(ctx.host(out), want, failed, _fp8(s))
    return w, check


def _all_gather(ctx, s, async_op):
    dt, n, cid, r, N = s["dtype"], s["count"], s["cid"], ctx.rank, ctx.size
    xs = [ctx.pool.input(dt, n, cid, q) for q in range(N)]
    inp = ctx.dev_in(xs[r], s["offs"][0])
    outs = [ctx.dev_out(dt, n, s["offs"][(q + 1) % 4]) for q in range(N)]
    w = ctx.comm.all_gather([o.view for o in outs], inp.view, async_op, s["hints"])

    def check(failed):
        return ctx.guards(inp, *outs) + sum(_moved(ctx.host(o), xs[q], failed)
                                            for q, o in enumerate(outs))
    return w, check


def _reduce_scatter_single(ctx, s, async_op):
    dt, n, cid, r, N = s["dtype"], s["count"], s["cid"], ctx.rank, ctx.size
    xs = [ctx.pool.input(dt, N * n, cid, q) for q in range(N)]
    inp = ctx.dev_in(xs[r], s["offs"][0])
    out = ctx.sub(inp, r * n, n) if s["inplace"] else ctx.dev_out(dt, n, s["offs"][1])
    ctx.again, ctx.bufs = (lambda a=False: ctx.comm.reduce_scatter_single(
        out.view, inp.view, _op(ctx, s), a, s["hints"])), [inp, out]
    w = ctx.again(async_op)

    def check(failed):
        blocks = [x[r * n:(r + 1) * n] for x in xs]
        return ctx.guards(inp, out) + _reduction(ctx, s, blocks, ctx.host(out), failed)
    return w, check


def _reduce_scatter(ctx, s, async_op):
    dt, n, cid, r, N = s["dtype"], s["count"], s["cid"], ctx.rank, ctx.size
    xs = [ctx.pool.input(dt, N * n, cid, q) for q in range(N)]
    ins = [ctx.dev_in(xs[r][q * n:(q + 1) * n], s["offs"][q % 4]) for q in range(N)]
    out = ins[r] if s["inplace"] else ctx.dev_out(dt, n, s["offs"][1])
    w = ctx.comm.reduce_scatter(out.view, [i.view for i in ins], _op(ctx, s), async_op,
                                s["hints"])

    def check(failed):
        blocks = [x[r * n:(r + 1) * n] for x in xs]
        return ctx.guards(out, *ins) + _reduction(ctx, s, blocks, ctx.host(out), failed)
    return w, check


def _all_to_all_single(ctx, s, async_op):
    dt, n, cid, r, N = s["dtype"], s["count"], s["cid"], ctx.rank, ctx.size
    xs = [ctx.pool.input(dt, N * n, cid, q) for q in range(N)]
    inp = ctx.dev_in(xs[r], s["offs"][0])
    out = inp if s["inplace"] else ctx.dev_out(dt, N * n, s["offs"][1])
    ctx.again, ctx.bufs = (lambda a=False: ctx.comm.all_to_all_single(
        out.view, inp.view, a, s["hints"])), [inp, out]
    w = ctx.again(async_op)

    def check(failed):
        want = np.concatenate([x[r * n:(r + 1) * n] for x in xs])
        return ctx.guards(inp, out) + _moved(ctx.host(out), want, failed, _fp8(s))
    return w, check


def _all_to_all_v(ctx, s, async_op):
    dt, cid, r, N, m = s["dtype"], s["cid"], ctx.rank, ctx.size, s["splits"]
    xs = [ctx.pool.input(dt, sum(m[q]), cid, q) for q in range(N)]
    inp = ctx.dev_in(xs[r], s["offs"][0])
    recv = [m[q][r] for q in range(N)]
    out = inp if s["inplace"] else ctx.dev_out(dt, sum(recv), s["offs"][1])
    w = ctx.comm.all_to_all_v_single(out.view, inp.view, recv, list(m[r]), async_op)

    def check(failed):
        want = [xs[q][sum(m[q][:r]):sum(m[q][:r + 1])] for q in range(N)]
        want = np.concatenate(want) if want else xs[r][:0]
        return ctx.guards(inp, out) + _moved(ctx.host(out), want, failed)
    return w, check


def _rmsnorm(ctx, s, async_op):
    dt, t, h, cid, r, N = s["dtype"], s["tokens"], s["hidden"], s["cid"], ctx.rank, ctx.size
    xs = [ctx.pool.input(dt, t * h, cid, q).reshape(t, h) for q in range(N)]
    res = ctx.pool.input(dt, t * h, cid, N, 1).reshape(t, h)
    wt = np.abs(ctx.pool.input(dt, h, cid, N, 2))
    x, rs, w = ctx.dev_in(xs[r], s["offs"][0], (t, h)), ctx.dev_in(res, s["offs"][1], (t, h)), \
        ctx.dev_in(wt, s["offs"][2])
    ro = rs if s["inplace"] else ctx.dev_out(dt, t * h, s["offs"][3], (t, h))
    if s["quant"]:
        q = ctx.dev_out("fp8_e4m3", t * h, 0, (t, h))
        sc = ctx.dev_out("f32", t, 0, (t, 1))
        outs = (q.view, sc.view, ro.view)
    else:
        y = x if s["inplace"] else ctx.dev_out(dt, t * h, s["offs"][2], (t, h))
        outs = (y.view, ro.view)
    res_ = ctx.comm.all_reduce_rmsnorm(x.view, rs.view, w.view, s["eps"],
                                       quant="fp8" if s["quant"] else None, out=outs,
                                       async_op=async_op or ctx.cuda, hints=s["hints"])
    work = res_[1] if async_op or ctx.cuda else None  # CUDA: the Work shows a failure

    def check(failed):
        rg = ctx.host(ro).reshape(t, h)
        if failed:
            return R.count_not_exact_or_poison(rg, None) if rg.size and np.any(
                R.bits(rg) != np.iinfo(R.bits(rg).dtype).max) else 0
        if s["quant"]:
            bad = R.rmsnorm_ref(xs, res, wt, s["eps"], dt, rg, None)
            return bad + R.rmsnorm_fp8_wrong(rg, wt, s["eps"], ctx.host(q).reshape(t, h),
                                             ctx.host(sc).reshape(t, 1)) + ctx.guards(ro, q, sc)
        return R.rmsnorm_ref(xs, res, wt, s["eps"], dt, rg, ctx.host(y).reshape(t, h)) + \
            ctx.guards(ro, y)
    return work, check


def _window(ctx, s, async_op):
    """Every rank puts `count` values into rank (r + shift)'s window at its own block, signals
    it, waits for rank (r - shift)'s signal, checks the block, then a barrier (the next window
    call may rewrite the block)."""
    n, cid, r, N, E = s["count"], s["cid"], ctx.rank, ctx.size, ctx.win_elems
    win, buf = ctx.window()
    dst, src = (r + s["shift"]) % N, (r - s["shift"]) % N
    data = ctx.dev_in(ctx.pool.input("f32", n, cid, r), s["offs"][0])
    wk = win.put(data.view, dst, r * E + s["tgt"], async_op=s["async"], hints=s["hints"])
    if s["async"]:
        wk.wait()
    win.signal(dst)
    win.wait_signal(src)
    got = ctx.host_region(buf, src * E + s["tgt"], n)
    bad = R.count_wrong_exact(got, ctx.pool.input("f32", n, cid, src))
    ctx.comm.barrier()
    return None, (lambda failed: bad + ctx.guards(data))


def _p2p(ctx, s, async_op):
    """A batch of sends and receives between every pair with a count (to itself included), in
    an order of its own on every rank."""
    dt, cid, r, N, m = s["dtype"], s["cid"], ctx.rank, ctx.size, s["pairs"]
    batch = ctx.comm.batch_op_create()
    recvs = {}
    sends = []
    for k in s["order"][r]:
        q = k % N
        if k < N and m[r][q]:
            b = ctx.dev_in(ctx.pool.input(dt, m[r][q], cid, r, 10 + q), s["offs"][q % 4])
            sends.append(b)
            batch.send(b.view, q)
        elif k >= N and m[q][r]:
            b = recvs[q] = ctx.dev_out(dt, m[q][r], s["offs"][(q + 1) % 4])
            batch.recv(b.view, q)
    if not sends and not recvs:
        return None, (lambda failed: 0)
    w = batch.issue(async_op)

    def check(failed):
        bad = ctx.guards(*sends, *recvs.values())
        for q, b in recvs.items():
            bad += _moved(ctx.host(b), ctx.pool.input(dt, m[q][r], cid, q, 10 + r), failed)
        return bad
    return w, check


def _barrier(ctx, s, async_op):
    return ctx.comm.barrier(async_op), (lambda failed: 0)
