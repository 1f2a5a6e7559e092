"""all_gather_v, reduce_scatter_v, all_to_all (lists), scatter, gather, gather_single and batched
point to point on numpy arrays, against numpy/float64 references (run by test_grouped.py on 4
processes with 8 KiB staging slots, so that batched messages span many channel pieces)."""
from __future__ import annotations

import numpy as np

import cclx
from refs import FP8_TYPES, assert_close, gen, np_dtype, ops_for, poison, reduce_ref

DTYPES = [d for d in ("f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64", "u32", "u64")
          if np_dtype(d) is not None]
MOVE_DTYPES = DTYPES + [d for d in FP8_TYPES if np_dtype(d) is not None]
OP = {n: getattr(cclx.ReduceOp, n) for n in
      ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")}
_seed = [1000]


def seed() -> int:
    _seed[0] += 1
    return _seed[0]


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="grouped", timeout=60,
                           abort_process_on_timeout_or_error=False)


def teardown(ctx):
    ctx.comm.finalize()


def _count(r: int, base: int) -> int:
    """Elements rank r owns in the uneven collectives: zero, one and odd sizes."""
    return (0, 1, base, base + 6)[r % 4] + 2 * (r // 4)


def case_all_gather_v(ctx):
    n, me = ctx.size, ctx.rank
    for dtype in MOVE_DTYPES:
        for base in (3, 1001):
            for inplace in (False, True):
                s = seed()
                xs = [gen(dtype, (_count(r, base),), r, s) for r in range(n)]
                outs = [poison((_count(r, base),), dtype) for r in range(n)]
                if inplace:
                    outs[me][...] = xs[me]
                    w = ctx.comm.all_gather_v(outs, outs[me])
                else:
                    w = ctx.comm.all_gather_v(outs, xs[me].copy())
                assert w.is_completed()
                for r in range(n):
                    assert_close(outs[r], xs[r], None, dtype,
                                 f"all_gather_v {dtype} base {base} inplace={inplace} from {r}")
    # 2-D entries with different row counts
    s = seed()
    xs = [gen("f32", (r + 1, 5), r, s) for r in range(n)]
    outs = [poison((r + 1, 5), "f32") for r in range(n)]
    ctx.comm.all_gather_v(outs, xs[me])
    for r in range(n):
        assert_close(outs[r], xs[r], None, "f32", f"all_gather_v 2-D from {r}")


def case_reduce_scatter_v(ctx):
    n, me = ctx.size, ctx.rank
    for dtype in DTYPES:
        for op in ops_for(dtype):
            for base in (5, 777):
                s = seed()
                # ins[p][r]: rank p's contribution to rank r's block.
                ins = [[gen(dtype, (_count(r, base),), p * n + r, s) for r in range(n)]
                       for p in range(n)]
                ref, scale = reduce_ref([ins[p][me] for p in range(n)], op, dtype)
                out = poison((_count(me, base),), dtype)
                mine = [x.copy() for x in ins[me]]
                ctx.comm.reduce_scatter_v(out, mine, OP[op])
                what = f"reduce_scatter_v {dtype} {op} base {base}"
                assert_close(out, ref, scale, dtype, what)
                for r in range(n):
                    assert_close(mine[r], ins[me][r], None, dtype, what + " (input changed)")
                ctx.comm.reduce_scatter_v(mine[me], mine, OP[op])  # in place
                assert_close(mine[me], ref, scale, dtype, what + " in place")
    for dtype in ("f32", "bf16"):
        if np_dtype(dtype) is None:
            continue
        s = seed()
        ins = [[gen(dtype, (_count(r, 33),), p * n + r, s) for r in range(n)] for p in range(n)]
        ref, scale = reduce_ref([ins[p][me] for p in range(n)], "PREMUL_SUM", dtype, factor=0.5)
        out = poison((_count(me, 33),), dtype)
        ctx.comm.reduce_scatter_v(out, ins[me], cclx.ReduceOp.PREMUL_SUM(0.5))
        assert_close(out, ref, scale, dtype, f"reduce_scatter_v PREMUL_SUM {dtype}")


def case_all_to_all_lists(ctx):
    n, me = ctx.size, ctx.rank

    def c(i, j, base):  # elements rank i sends to rank j (zeros included)
        return (i * 7 + j * 3) % 5 * base // 4 + (i + j) % 2

    for dtype in MOVE_DTYPES:
        for base in (4, 4003):
            s = seed()
            data = {(i, j): gen(dtype, (c(i, j, base),), i * n + j, s)
                    for i in range(n) for j in range(n)}
            ins = [data[(me, j)].copy() for j in range(n)]
            outs = [poison((c(j, me, base),), dtype) for j in range(n)]
            w = ctx.comm.all_to_all(outs, ins, async_op=True)
            w.wait()
            for j in range(n):
                assert_close(outs[j], data[(j, me)], None, dtype, f"all_to_all {dtype} from {j}")
                assert_close(ins[j], data[(me, j)], None, dtype, "all_to_all input changed")


def case_scatter(ctx):
    n, me = ctx.size, ctx.rank
    for dtype in MOVE_DTYPES:
        for shape in ((1,), (1001,), (7, 13), (0,)):
            for root in range(n):
                s = seed()
                blocks = [gen(dtype, shape, r, s) for r in range(n)]
                out = poison(shape, dtype)
                ins = [b.copy() for b in blocks] if me == root else []
                ctx.comm.scatter(out, ins, root)
                assert_close(out, blocks[me], None, dtype, f"scatter {dtype} {shape} root {root}")
                if me == root:  # in place: the root's output is its own block
                    ins = [b.copy() for b in blocks]
                    ctx.comm.scatter(ins[me], ins, root)
                    assert_close(ins[me], blocks[me], None, dtype, "scatter in place")
                else:
                    o2 = poison(shape, dtype)
                    ctx.comm.scatter(o2, None, root)
                    assert_close(o2, blocks[me], None, dtype, "scatter again")


def case_gather_and_gather_single(ctx):
    n, me = ctx.size, ctx.rank
    for dtype in MOVE_DTYPES:
        for shape in ((1,), (999,), (3, 11), (0,)):
            for root in range(n):
                s = seed()
                xs = [gen(dtype, shape, r, s) for r in range(n)]
                outs = [poison(shape, dtype) for _ in range(n)]
                ctx.comm.gather(outs if me == root else [], xs[me].copy(), root)
                single = poison((n,) + shape, dtype)
                ctx.comm.gather_single(single if me == root else None, xs[me], root)
                if me == root:
                    for r in range(n):
                        assert_close(outs[r], xs[r], None, dtype, f"gather {dtype} from {r}")
                        assert_close(single[r], xs[r], None, dtype, f"gather_single from {r}")
                    # in place: the root's input is its own slot of the output
                    g = poison((n,) + shape, dtype)
                    g[me] = xs[me]
                    ctx.comm.gather_single(g, g[me], root)
                    for r in range(n):
                        assert_close(g[r], xs[r], None, dtype, "gather_single in place")
                else:
                    ctx.comm.gather_single(None, xs[me], root)
                    assert (single.view(np.uint8) == 0x7B).all(), "gather wrote on a non-root"


def _batch(ctx, s, dtype, per_peer, big):
    """Every rank sends per_peer messages to every other rank and receives as many, listing
    peers in its own shuffled order (messages to one peer keep their order)."""
    n, me = ctx.size, ctx.rank

    def count(src, dst, k):
        return (0, 3, big, 1)[(src + 2 * dst + k) % 4]

    def listing(kind):
        order = [p for p in range(n) if p != me for _ in range(per_peer)]
        np.random.default_rng([s, me, kind]).shuffle(order)
        seen = {}
        out = []
        for p in order:
            out.append((p, seen.get(p, 0)))
            seen[p] = seen.get(p, 0) + 1
        return out

    b = ctx.comm.batch_op_create()
    sent, recvd = {}, []
    for p, k in listing(0):
        x = gen(dtype, (count(me, p, k),), me * 100 + p * 10 + k, s)
        sent[(p, k)] = x
        b.send(x, p)
    for p, k in listing(1):
        y = poison((count(p, me, k),), dtype)
        recvd.append((p, k, y))
        b.recv(y, p)
    assert len(b.ops) == 2 * per_peer * (n - 1)
    w = b.issue(async_op=False)
    assert w.is_completed()
    for p, k, y in recvd:
        exp = gen(dtype, (count(p, me, k),), p * 100 + me * 10 + k, s)
        assert_close(y, exp, None, dtype, f"batch {dtype} message {k} from {p}")
    for (p, k), x in sent.items():
        assert_close(x, gen(dtype, x.shape, me * 100 + p * 10 + k, s), None, dtype,
                     "batch send buffer changed")


def case_batch_p2p_any_order(ctx):
    # 8 KiB channel pieces: 30001 f64 elements are ~29 pieces, far more than a pair's two slots.
    for dtype in ("f64", "f32", "bf16", "u8", "i64"):
        if np_dtype(dtype) is not None:
            _batch(ctx, seed(), dtype, per_peer=3, big=30001)
    for _ in range(3):
        _batch(ctx, seed(), "f32", per_peer=1, big=5)


def case_batch_p2p_with_plain_calls(ctx):
    n, me = ctx.size, ctx.rank
    nxt, prv = (me + 1) % n, (me - 1) % n
    s = seed()
    a = gen("f32", (5000,), me, s)
    b = gen("i64", (17,), me, s)
    z = np.empty((0,), np.float32)
    ga, gb, gz = poison((5000,), "f32"), poison((17,), "i64"), np.empty((0,), np.float32)
    # Mixed dtypes in one batch (moved as bytes) with a zero-size entry; the receives of the
    # previous rank's messages come in the same per-pair order (a, z, b), interleaved with sends.
    batch = ctx.comm.batch_op_create()
    batch.recv(ga, prv)
    batch.send(a, nxt)
    batch.recv(gz, prv)
    batch.send(z, nxt)
    batch.send(b, nxt)
    batch.recv(gb, prv)
    w = batch.issue(True)
    w.wait()
    assert_close(ga, gen("f32", (5000,), prv, s), None, "f32", "mixed batch f32")
    assert_close(gb, gen("i64", (17,), prv, s), None, "i64", "mixed batch i64")
    # A batch matched by plain send()/recv() calls on the other side (even ranks batch).
    x = gen("f64", (3001,), me, s)
    y = poison((3001,), "f64")
    if n % 2 == 0:
        peer = me ^ 1
        if me % 2 == 0:
            bb = ctx.comm.batch_op_create()
            bb.send(x, peer)
            bb.recv(y, peer)
            bb.issue(False)
        else:
            ctx.comm.recv(y, peer)
            ctx.comm.send(x, peer)
        assert_close(y, gen("f64", (3001,), peer, s), None, "f64", "batch vs plain")


def case_bad_arguments_then_valid(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    E = cclx.CclxInvalidArgument
    a = np.ones(8, np.float32)
    bad = [
        (lambda: c.all_gather_v([np.ones(8, np.float32)] * (n + 1), a), "length"),
        (lambda: c.all_gather_v([np.ones(9, np.float32) for _ in range(n)], a), "tensor"),
        (lambda: c.all_gather_v([np.ones(8, np.float64) for _ in range(n)], a), "dtype"),
        (lambda: c.reduce_scatter_v(a, [np.ones(7, np.float32)] * n), "output"),
        (lambda: c.reduce_scatter_v(a, [a] * (n - 1)), "length"),
        (lambda: c.reduce_scatter_v(np.ones(8, np.int32), [np.ones(8, np.int32)] * n,
                                    cclx.ReduceOp.PREMUL_SUM(np.nan)), "finite"),
        (lambda: c.reduce_scatter_v(a, [np.ones(8, np.float32)] * n, cclx.ReduceOp.BAND), "BAND"),
        (lambda: c.all_to_all([np.ones(8, np.float32)] * n, [a] * (n + 1)), "length"),
        (lambda: c.all_to_all([np.ones(8, np.float32)] * n, []), "empty"),
        (lambda: c.scatter(a, [a] * n, n), "root"),
        (lambda: c.scatter(a, [np.ones(9, np.float32)] * n, me), "entry"),
        (lambda: c.gather([a] * (n - 1), a, me), "length"),
        (lambda: c.gather([a] * n, a, -1), "root"),
        (lambda: c.gather_single(np.ones(8 * n + 1, np.float32), a, me), "output"),
        (lambda: c.gather_single(None, a, me), "root needs an output"),
        (lambda: c.batch_op_create().issue(), "empty"),
        (lambda: _one(c, "send", a, n), "dst"),
        (lambda: _one(c, "recv", a, -1), "src"),
    ]
    for fn, word in bad:
        try:
            fn()
        except E as e:
            assert word.lower() in str(e).lower(), f"message {str(e)!r} lacks {word!r}"
        else:
            raise AssertionError(f"no CclxInvalidArgument for the {word!r} case")
    # Every rank raised the same errors before anything ran: a valid call still matches up.
    outs = [np.empty(r + 1, np.int32) for r in range(n)]
    c.all_gather_v(outs, np.full(me + 1, me, np.int32))
    for r in range(n):
        assert (outs[r] == r).all(), outs


def _one(c, kind, t, peer):
    b = c.batch_op_create()
    getattr(b, kind)(t, peer)
    return b.issue()


def case_persistent_all_gather(ctx):
    """all_gather_p_init / _exec / _free: repeated executions with fresh data, every dtype,
    outputs larger than an execution fills (the rest untouched), 2-D outputs, async, the init's
    hints and timeout as defaults, and bad calls that raise and change nothing."""
    c, n, me = ctx.comm, ctx.size, ctx.rank
    for dtype in MOVE_DTYPES:
        for count, extra in ((1, 0), (1001, 7), (333, 0)):
            out = poison((count * n + extra,), dtype)
            h = c.all_gather_p_init(out)
            for rep in range(3):
                s = seed()
                xs = [gen(dtype, (count,), r, s) for r in range(n)]
                w = c.all_gather_p_exec(h, xs[me].copy(), async_op=rep == 1)
                w.wait()
                assert_close(out[:count * n], np.concatenate(xs), None, dtype,
                             f"all_gather_p {dtype} count {count} rep {rep}")
                assert (out[count * n:].view(np.uint8) == 0x7B).all(), "wrote past the gather"
            # a smaller execution into the same output: only its part changes
            s = seed()
            small = [gen(dtype, (count // 2,), r, s) for r in range(n)]
            before = out.copy()
            c.all_gather_p_exec(h, small[me])
            k = (count // 2) * n
            assert_close(out[:k], np.concatenate(small), None, dtype, f"all_gather_p {dtype} small")
            assert (out[k:].view(np.uint8) == before[k:].view(np.uint8)).all()
            c.all_gather_p_free(h)
    # 2-D output, init hints and timeout
    out = poison((n, 5), "f32")
    h = c.all_gather_p_init(out, hints={"algo": "auto"}, timeout=30)
    c.all_gather_p_exec(h, np.full(5, me, np.float32))
    assert (out == np.arange(n, dtype=np.float32)[:, None]).all(), out
    # bad calls: raised alike on every rank before anything ran; the output keeps its values
    E = cclx.CclxInvalidArgument
    snapshot = out.copy()
    for fn, word in (
            (lambda: c.all_gather_p_exec(h, np.ones(6, np.float32)), "need"),
            (lambda: c.all_gather_p_exec(h, np.ones(5, np.float64)), "dtype"),
            (lambda: c.all_gather_p_exec("handle", np.ones(5, np.float32)), "handle"),
            (lambda: c.all_gather_p_init(np.ones(0, np.float32)), "empty"),
            (lambda: c.all_gather_p_init(np.ones(4, np.float32), hints=["algo"]), "hints"),
            (lambda: c.all_gather_p_init(np.ones(4, np.float32).copy().view(np.int32)[::2]),
             "contiguous")):
        try:
            fn()
        except E as e:
            assert word in str(e).lower(), f"message {str(e)!r} lacks {word!r}"
        else:
            raise AssertionError(f"no CclxInvalidArgument for the {word!r} case")
    assert (out == snapshot).all()
    c.all_gather_p_free(h)
    for fn in (lambda: c.all_gather_p_exec(h, np.ones(5, np.float32)),
               lambda: c.all_gather_p_free(h)):
        try:
            fn()
        except E as e:
            assert "freed" in str(e), str(e)
        else:
            raise AssertionError("a freed handle ran")
    # a handle of another communicator
    other = cclx.new_comm("cclx", "cpu", name="grouped_other", timeout=60,
                          abort_process_on_timeout_or_error=False)
    ho = other.all_gather_p_init(np.empty(n, np.int32))
    try:
        c.all_gather_p_exec(ho, np.ones(1, np.int32))
    except E as e:
        assert "another communicator" in str(e), str(e)
    else:
        raise AssertionError("another communicator's handle ran")
    other.all_gather_p_exec(ho, np.full(1, me, np.int32))
    other.finalize()
    try:
        other.all_gather_p_exec(ho, np.ones(1, np.int32))
    except cclx.CclxUsageError as e:
        assert "finalized" in str(e) or "was" in str(e), str(e)
    else:
        raise AssertionError("a finalized communicator ran")
