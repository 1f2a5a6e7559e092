"""Collective cases on numpy arrays (run by test_collectives.py on several processes)."""
from __future__ import annotations

import numpy as np

import cclx
from refs import INT_TYPES, FP8_TYPES, assert_close, gen, np_dtype, ops_for, poison, reduce_ref

DTYPES = [d for d in ("f32", "f64", "f16", "bf16", "i32", "i64", "u8") if np_dtype(d) is not None]
SHAPES = [(1,), (1001,), (7, 13)]
OP = {n: getattr(cclx.ReduceOp, n) for n in
      ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")}
_seed = [0]


def seed() -> int:
    _seed[0] += 1
    return _seed[0]


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="coll", timeout=30)
    assert ctx.comm.get_rank() == ctx.rank and ctx.comm.get_size() == ctx.size


def teardown(ctx):
    ctx.comm.finalize()


def _all(ctx, dtype, shape, s):
    return [gen(dtype, shape, r, s) for r in range(ctx.size)]


def _all_reduce(ctx, dtype):
    for shape in SHAPES:
        for op in ops_for(dtype):
            for inplace in (True, False):
                s = seed()
                xs = _all(ctx, dtype, shape, s)
                ref, scale = reduce_ref(xs, op, dtype)
                x = xs[ctx.rank].copy()
                what = f"all_reduce {dtype} {op} {shape} {'in' if inplace else 'out-of'}-place"
                if inplace:
                    w = ctx.comm.all_reduce(x, OP[op], async_op=False)
                    got = x
                else:
                    got = poison(shape, dtype)
                    w = ctx.comm.all_reduce(x, OP[op], output=got)
                    assert_close(x, xs[ctx.rank], None, dtype, what + " (input changed)")
                assert w.is_completed()
                assert_close(got, ref, scale, dtype, what)


def case_all_reduce_f32(ctx): _all_reduce(ctx, "f32")
def case_all_reduce_f64(ctx): _all_reduce(ctx, "f64")
def case_all_reduce_f16(ctx): _all_reduce(ctx, "f16")
def case_all_reduce_bf16(ctx): _all_reduce(ctx, "bf16")
def case_all_reduce_i32(ctx): _all_reduce(ctx, "i32")
def case_all_reduce_i64(ctx): _all_reduce(ctx, "i64")
def case_all_reduce_u8(ctx): _all_reduce(ctx, "u8")


def case_all_reduce_premul_sum(ctx):
    for dtype in ("f32", "f64", "bf16"):
        s = seed()
        xs = _all(ctx, dtype, (513,), s)
        ref, scale = reduce_ref(xs, "PREMUL_SUM", dtype, factor=0.375)
        x = xs[ctx.rank].copy()
        ctx.comm.allreduce(x, cclx.ReduceOp.PREMUL_SUM(0.375))
        assert_close(x, ref, scale, dtype, f"all_reduce PREMUL_SUM {dtype}")


def case_reduce(ctx):
    for dtype in DTYPES:
        for root in range(ctx.size):
            for op in ("SUM", "MAX"):
                s = seed()
                xs = _all(ctx, dtype, (257,), s)
                ref, scale = reduce_ref(xs, op, dtype)
                x = xs[ctx.rank].copy()
                out = poison((257,), dtype)
                ctx.comm.reduce(x, root, OP[op], output=out)
                assert_close(x, xs[ctx.rank], None, dtype, "reduce input changed")
                if ctx.rank == root:
                    assert_close(out, ref, scale, dtype, f"reduce {dtype} {op} root {root}")
                y = xs[ctx.rank].copy()
                ctx.comm.reduce(y, root, OP[op])
                if ctx.rank == root:
                    assert_close(y, ref, scale, dtype, f"reduce in-place {dtype} {op} root {root}")


def case_broadcast(ctx):
    for dtype in DTYPES + [d for d in FP8_TYPES if np_dtype(d) is not None]:
        for root in range(ctx.size):
            for shape in SHAPES:
                s = seed()
                xs = _all(ctx, dtype, shape, s)
                x = xs[ctx.rank].copy()
                ctx.comm.broadcast(x, root)
                assert_close(x, xs[root], None, dtype, f"broadcast {dtype} root {root}")
                out = poison(shape, dtype)
                ctx.comm.broadcast(xs[ctx.rank].copy(), root, output=out)
                assert_close(out, xs[root], None, dtype, f"broadcast out-of-place {dtype}")


def case_all_gather(ctx):
    for dtype in DTYPES + [d for d in FP8_TYPES if np_dtype(d) is not None]:
        for shape in SHAPES:
            s = seed()
            xs = _all(ctx, dtype, shape, s)
            outs = [poison(shape, dtype) for _ in range(ctx.size)]
            ctx.comm.all_gather(outs, xs[ctx.rank].copy())
            for r in range(ctx.size):
                assert_close(outs[r], xs[r], None, dtype, f"all_gather {dtype} block {r}")


def case_all_gather_single(ctx):
    n = ctx.size
    for dtype in DTYPES:
        for count in (1, 333):
            s = seed()
            xs = _all(ctx, dtype, (count,), s)
            out = poison((n * count,), dtype)
            ctx.comm.all_gather_single(out, xs[ctx.rank])
            assert_close(out, np.concatenate(xs), None, dtype, f"all_gather_single {dtype}")
            # In place: the input is this rank's block of the output.
            out2 = poison((n, count), dtype)
            out2[ctx.rank] = xs[ctx.rank]
            ctx.comm.all_gather_single(out2, out2[ctx.rank])
            assert_close(out2.reshape(-1), np.concatenate(xs), None, dtype,
                         f"all_gather_single in-place {dtype}")


def case_reduce_scatter_single(ctx):
    n = ctx.size
    for dtype in DTYPES:
        for op in ("SUM", "MIN", "AVG"):
            for count in (1, 129):
                s = seed()
                xs = _all(ctx, dtype, (n * count,), s)
                ref, scale = reduce_ref(xs, op, dtype)
                blk = slice(ctx.rank * count, (ctx.rank + 1) * count)
                out = poison((count,), dtype)
                ctx.comm.reduce_scatter_single(out, xs[ctx.rank].copy(), OP[op])
                sc = None if scale is None else scale[blk]
                assert_close(out, ref[blk], sc, dtype, f"reduce_scatter_single {dtype} {op}")
                x = xs[ctx.rank].copy().reshape(n, count)
                ctx.comm.reduce_scatter_single(x[ctx.rank], x, OP[op])
                assert_close(x[ctx.rank], ref[blk], sc, dtype,
                             f"reduce_scatter_single in-place {dtype} {op}")


def case_reduce_scatter(ctx):
    n = ctx.size
    for dtype in DTYPES:
        s = seed()
        xs = _all(ctx, dtype, (n, 77), s)
        ref, scale = reduce_ref(xs, "SUM", dtype)
        out = poison((77,), dtype)
        ctx.comm.reduce_scatter(out, [xs[ctx.rank][i].copy() for i in range(n)])
        sc = None if scale is None else scale[ctx.rank]
        assert_close(out, ref[ctx.rank], sc, dtype, f"reduce_scatter {dtype}")


def case_all_to_all_single(ctx):
    n = ctx.size
    for dtype in DTYPES:
        for count in (1, 101):
            s = seed()
            xs = _all(ctx, dtype, (n, count), s)
            out = poison((n, count), dtype)
            ctx.comm.all_to_all_single(out, xs[ctx.rank].copy())
            exp = np.stack([xs[src][ctx.rank] for src in range(n)])
            assert_close(out, exp, None, dtype, f"all_to_all_single {dtype}")


def case_all_to_all_v_single(ctx):
    n = ctx.size
    # rows[src][dst] = rows rank src sends to rank dst (zeros included), 3 elements per row.
    rows = [[(src * 2 + dst) % 4 for dst in range(n)] for src in range(n)]
    for dtype in ("f32", "i64", "f16"):
        s = seed()
        xs = [gen(dtype, (sum(rows[src]), 3), src, s) for src in range(n)]
        me = ctx.rank
        in_splits = rows[me]
        out_splits = [rows[src][me] for src in range(n)]
        out = poison((sum(out_splits), 3), dtype)
        ctx.comm.all_to_all_v_single(out, xs[me], out_splits, in_splits)
        parts = []
        for src in range(n):
            start = sum(rows[src][:me])
            parts.append(xs[src][start:start + rows[src][me]])
        assert_close(out, np.concatenate(parts), None, dtype, f"all_to_all_v_single {dtype}")


def case_send_recv(ctx):
    # Rank 0 sends a distinct array to every other rank, which sends it back doubled.
    for dtype in ("f32", "i32", "bf16"):
        if np_dtype(dtype) is None:
            continue
        s = seed()
        if ctx.rank == 0:
            for peer in range(1, ctx.size):
                x = gen(dtype, (999,), peer, s)
                ctx.comm.send(x, peer)
                back = poison((999,), dtype)
                ctx.comm.recv(back, peer)
                assert_close(back, (x.astype(np.float64) * 2).astype(x.dtype), None, dtype,
                             f"send/recv {dtype} with {peer}")
        else:
            buf = poison((999,), dtype)
            ctx.comm.recv(buf, 0)
            assert_close(buf, gen(dtype, (999,), ctx.rank, s), None, dtype, "recv")
            ctx.comm.send((buf.astype(np.float64) * 2).astype(buf.dtype), 0)


def case_async_work(ctx):
    x = gen("f32", (4097,), ctx.rank, seed())
    ref, scale = reduce_ref([gen("f32", (4097,), r, _seed[0]) for r in range(ctx.size)],
                            "SUM", "f32")
    w = ctx.comm.all_reduce(x, cclx.ReduceOp.SUM, async_op=True)
    assert isinstance(w, cclx.Work)
    w.wait()
    w.wait_blocking()
    assert w.is_completed()
    assert_close(x, ref, scale, "f32", "async all_reduce")
    ctx.comm.barrier(async_op=True).wait_blocking(timeout=30)
    ctx.comm.barrier()


def case_zero_size(ctx):
    x = np.empty((0,), np.float32)
    ctx.comm.all_reduce(x)
    ctx.comm.broadcast(x, 0)
    ctx.comm.all_gather_single(np.empty((0,), np.float32), x)


def case_hints_and_timeout(ctx):
    x = gen("f64", (64,), ctx.rank, seed())
    ref, scale = reduce_ref([gen("f64", (64,), r, _seed[0]) for r in range(ctx.size)],
                            "SUM", "f64")
    ctx.comm.all_reduce(x, cclx.ReduceOp.SUM, False, {"algo": "tree"}, 30.0)
    assert_close(x, ref, scale, "f64", "all_reduce with hints")


def case_bad_inputs_then_valid(ctx):
    """Every rank passes the same bad arguments: each raises before enqueuing anything, so a
    valid collective afterwards still matches up across ranks."""
    c, n = ctx.comm, ctx.size
    E = cclx.CclxInvalidArgument
    a = np.ones(10, np.float32)
    bad = [
        (lambda: c.all_reduce(a, output=np.ones(11, np.float32)), "output"),
        (lambda: c.all_reduce(np.ones((4, 4), np.float32)[:, ::2]), "contiguous"),
        (lambda: c.all_reduce(a, output=np.ones(10, np.float64)), "dtype"),
        (lambda: c.all_reduce(a, cclx.ReduceOp.BAND), "BAND"),
        (lambda: c.all_reduce(np.ones(3, np.complex64)), "complex"),
        (lambda: c.all_reduce(np.ones(3, np.int16)), "int16"),
        (lambda: c.all_reduce([1.0, 2.0]), "list"),
        (lambda: c.broadcast(a, n), "root"),
        (lambda: c.reduce(a, -1), "root"),
        (lambda: c.all_gather([np.ones(10, np.float32)] * (n + 1), a), "length"),
        (lambda: c.all_gather_single(np.ones(10 * n + 1, np.float32), a), "output"),
        (lambda: c.reduce_scatter_single(np.ones(10, np.float32), np.ones(10 * n - 1,
                                                                           np.float32)), "input"),
        (lambda: c.all_to_all_single(np.ones(n + 1, np.float32), np.ones(n + 1, np.float32)),
         "multiple"),
        (lambda: c.all_to_all_v_single(np.ones(n, np.float32), np.ones(n, np.float32),
                                       [1] * n, [2] * n), "sum"),
        (lambda: c.send(a, n), "dst"),
        (lambda: c.all_reduce(np.ones(4, np.float32), timeout=-1), "timeout"),
    ]
    ro = np.ones(10, np.float32)
    ro.flags.writeable = False
    bad.append((lambda: c.all_reduce(ro), "read-only"))
    if np_dtype("fp8_e4m3") is not None:
        bad.append((lambda: c.all_reduce(np.ones(4, np_dtype("fp8_e4m3"))), "fp8"))
    for fn, word in bad:
        try:
            fn()
        except E as e:
            assert isinstance(e, ValueError) and e.code == int(cclx.Result.InvalidArgument)
            msg = str(e)
            assert word.lower() in msg.lower() or word in ("fp8", "complex", "list", "int16"), \
                f"message {msg!r} does not mention {word!r}"
        else:
            raise AssertionError(f"no CclxInvalidArgument for the {word!r} case")
    x = np.full(5, ctx.rank + 1, np.float32)
    c.all_reduce(x)
    assert (x == n * (n + 1) / 2).all(), x


def case_low_precision_hint(ctx):
    """FP8 collectives through the per-call hint; normalized L2 error bounds (allreduce 4%,
    one quantization 5%) against float64 references."""
    n, h = ctx.size, {"low_precision": "fp8"}
    s = seed()

    def normal(count, r, dtype):
        v = np.random.default_rng([s, r]).standard_normal(count)
        return v.astype(np_dtype(dtype))

    def err(got, exp):
        e = np.asarray(exp, np.float64)
        return float(np.linalg.norm(got.astype(np.float64) - e) / np.linalg.norm(e))

    dtypes = ["f32"] + (["bf16"] if np_dtype("bf16") is not None else [])
    for dtype in dtypes:
        count = 50_001
        xs = [normal(count, r, dtype) for r in range(n)]
        x = xs[ctx.rank].copy()
        ctx.comm.all_reduce(x, cclx.ReduceOp.SUM, False, h)
        e = err(x, sum(a.astype(np.float64) for a in xs))
        assert e <= 0.04, f"fp8 all_reduce {dtype}: normalized error {e:.4f}"
        big = [normal(n * 4096, r, dtype) for r in range(n)]
        out = np.empty(4096, np_dtype(dtype))
        ctx.comm.reduce_scatter_single(out, big[ctx.rank], cclx.ReduceOp.SUM, False, h)
        ref = sum(a.astype(np.float64) for a in big)[ctx.rank * 4096:(ctx.rank + 1) * 4096]
        e = err(out, ref)
        assert e <= 0.05, f"fp8 reduce_scatter {dtype}: normalized error {e:.4f}"
        g = np.empty(n * 4096 * n, np_dtype(dtype))
        ctx.comm.all_gather_single(g, big[ctx.rank], False, h)
        e = err(g, np.concatenate(big))
        assert e <= 0.05, f"fp8 all_gather {dtype}: normalized error {e:.4f}"
        a2a = np.empty(n * 4096, np_dtype(dtype))
        ctx.comm.all_to_all_single(a2a, big[ctx.rank], False, h)
        e = err(a2a, np.concatenate([b.reshape(n, 4096)[ctx.rank] for b in big]))
        assert e <= 0.05, f"fp8 all_to_all {dtype}: normalized error {e:.4f}"
