"""Eager collectives on CUDA torch tensors (2 processes), checked against float64 references
and against torch.distributed (NCCL) run in the same workers."""
from __future__ import annotations

import torch
import torch.distributed as dist

import cclx
from trefs import (DIST_OPS, FP8, OPS, cat, check, gen, ops_for, poison, reduce_ref, setup_comms,
                   teardown_comms)

DTYPES = ["f32", "bf16", "f16", "f64", "i32", "i64", "u8"]
SHAPES = [(1,), (1001,), (7, 13), (1 << 20) + 3]
_s = [100]


def seed():
    _s[0] += 1
    return _s[0]


def setup(ctx):
    setup_comms(ctx, "gpu")


def teardown(ctx):
    teardown_comms(ctx)


def _xs(ctx, dtype, shape, s):
    shape = shape if isinstance(shape, tuple) else (shape,)
    return [gen(dtype, shape, r, s, ctx.dev) for r in range(ctx.size)]


def _all_reduce(ctx, comm, dtype):
    for shape in SHAPES:
        for op in ops_for(dtype):
            for inplace in (True, False):
                s = seed()
                xs = _xs(ctx, dtype, shape, s)
                exp, scale = reduce_ref(xs, op, dtype)
                x = xs[ctx.rank].clone()
                what = f"{comm.get_backend()} all_reduce {dtype} {op} {shape} inplace={inplace}"
                if inplace:
                    comm.all_reduce(x, OPS[op], async_op=False)
                    got = x
                else:
                    got = poison(x.shape, dtype, ctx.dev)
                    comm.all_reduce(x, OPS[op], output=got)
                torch.cuda.synchronize()
                check(got, exp, scale, dtype, what)
                if op in DIST_OPS and not (op == "AVG" and dtype in ("i32", "i64", "u8")):
                    ref = xs[ctx.rank].clone()
                    dist.all_reduce(ref, DIST_OPS[op])
                    torch.cuda.synchronize()
                    if scale is None:
                        check(got, ref, None, dtype, what + " vs torch.distributed")
                    else:
                        check(got, ref.double(), scale, dtype, what + " vs torch.distributed", 2)


def case_all_reduce_cclx(ctx):
    for d in DTYPES:
        _all_reduce(ctx, ctx.comm, d)


def case_all_reduce_nccl_backend(ctx):
    for d in ("f32", "bf16", "i32"):
        _all_reduce(ctx, ctx.ncomm, d)


def case_premul_sum(ctx):
    for dtype in ("f32", "bf16", "f16"):
        xs = _xs(ctx, dtype, (4099,), seed())
        exp, scale = reduce_ref(xs, "PREMUL_SUM", dtype, factor=0.25)
        x = xs[ctx.rank].clone()
        ctx.comm.all_reduce(x, cclx.ReduceOp.PREMUL_SUM(0.25))
        torch.cuda.synchronize()
        check(x, exp, scale, dtype, f"PREMUL_SUM {dtype}")


def case_reduce_broadcast(ctx):
    for comm in (ctx.comm, ctx.ncomm):
        for dtype in ("f32", "bf16", "i64"):
            for root in range(ctx.size):
                xs = _xs(ctx, dtype, (3001,), seed())
                exp, scale = reduce_ref(xs, "SUM", dtype)
                x = xs[ctx.rank].clone()
                comm.reduce(x, root, cclx.ReduceOp.SUM)
                y = xs[ctx.rank].clone()
                comm.broadcast(y, root)
                ref = xs[ctx.rank].clone()
                dist.broadcast(ref, root)
                torch.cuda.synchronize()
                if ctx.rank == root:
                    check(x, exp, scale, dtype, f"reduce {dtype} root {root}")
                check(y, xs[root], None, dtype, f"broadcast {dtype} root {root}")
                check(y, ref, None, dtype, "broadcast vs torch.distributed")
        for dtype in FP8:
            xs = _xs(ctx, dtype, (513,), seed())
            y = xs[ctx.rank].clone()
            comm.broadcast(y, 1)
            torch.cuda.synchronize()
            check(y, xs[1], None, dtype, f"broadcast {dtype}")


def case_all_gather(ctx):
    n = ctx.size
    for comm in (ctx.comm, ctx.ncomm):
        for dtype in ("f32", "bf16", "f16", "i32", "u8") + FP8:
            for count in (1, 777, (1 << 18) + 1):
                xs = _xs(ctx, dtype, (count,), seed())
                out = poison((n * count,), dtype, ctx.dev)
                comm.all_gather_single(out, xs[ctx.rank])
                lst = [poison((count,), dtype, ctx.dev) for _ in range(n)]
                comm.all_gather(lst, xs[ctx.rank])
                inpl = poison((n, count), dtype, ctx.dev)
                inpl[ctx.rank].copy_(xs[ctx.rank])
                comm.all_gather_single(inpl, inpl[ctx.rank])
                torch.cuda.synchronize()
                exp = cat(xs)
                check(out, exp, None, dtype, f"all_gather_single {dtype} {count}")
                check(cat(lst), exp, None, dtype, f"all_gather {dtype}")
                check(inpl.reshape(-1), exp, None, dtype, f"all_gather_single in-place {dtype}")
                if dtype not in FP8:
                    ref = poison((n * count,), dtype, ctx.dev)
                    dist.all_gather_into_tensor(ref, xs[ctx.rank])
                    torch.cuda.synchronize()
                    check(out, ref, None, dtype, "all_gather vs torch.distributed")


def case_reduce_scatter(ctx):
    n = ctx.size
    for comm in (ctx.comm, ctx.ncomm):
        for dtype in ("f32", "bf16", "f16", "i32"):
            for op in ("SUM", "MAX", "AVG"):
                for count in (1, 555, (1 << 18) + 3):
                    xs = _xs(ctx, dtype, (n * count,), seed())
                    exp, scale = reduce_ref(xs, op, dtype)
                    blk = slice(ctx.rank * count, (ctx.rank + 1) * count)
                    exp, scale = exp[blk], None if scale is None else scale[blk]
                    out = poison((count,), dtype, ctx.dev)
                    comm.reduce_scatter_single(out, xs[ctx.rank], OPS[op])
                    out2 = poison((count,), dtype, ctx.dev)
                    comm.reduce_scatter(out2, list(xs[ctx.rank].chunk(n)), OPS[op])
                    x = xs[ctx.rank].clone()
                    comm.reduce_scatter_single(x[blk], x, OPS[op])
                    torch.cuda.synchronize()
                    w = f"reduce_scatter {dtype} {op} {count}"
                    check(out, exp, scale, dtype, w)
                    check(out2, exp, scale, dtype, w + " (list)")
                    check(x[blk], exp, scale, dtype, w + " in-place")
                    if op != "AVG" or dtype != "i32":
                        ref = poison((count,), dtype, ctx.dev)
                        dist.reduce_scatter_tensor(ref, xs[ctx.rank], DIST_OPS[op])
                        torch.cuda.synchronize()
                        check(out, ref if scale is None else ref.double(), scale, dtype,
                              w + " vs torch.distributed", 2)


def case_all_to_all(ctx):
    n = ctx.size
    for comm in (ctx.comm, ctx.ncomm):
        for dtype in ("f32", "bf16", "i64") + FP8:
            for count in (1, 999):
                xs = _xs(ctx, dtype, (n, count), seed())
                out = poison((n, count), dtype, ctx.dev)
                comm.all_to_all_single(out, xs[ctx.rank])
                torch.cuda.synchronize()
                exp = cat([xs[src][ctx.rank] for src in range(n)], stack=True)
                check(out, exp, None, dtype, f"all_to_all_single {dtype}")
                if dtype not in FP8:
                    ref = poison((n, count), dtype, ctx.dev)
                    dist.all_to_all_single(ref, xs[ctx.rank])
                    torch.cuda.synchronize()
                    check(out, ref, None, dtype, "all_to_all vs torch.distributed")
        rows = [[1 + (2 * s + d) % 3 for d in range(n)] for s in range(n)]
        rows[0][1] = 0  # an empty split
        xs = [gen("f32", (sum(rows[s]), 5), s, seed(), ctx.dev) for s in range(n)]
        me = ctx.rank
        out_splits = [rows[s][me] for s in range(n)]
        out = poison((sum(out_splits), 5), "f32", ctx.dev)
        comm.all_to_all_v_single(out, xs[me], out_splits, rows[me])
        ref = poison((sum(out_splits), 5), "f32", ctx.dev)
        dist.all_to_all_single(ref, xs[me], out_splits, rows[me])
        torch.cuda.synchronize()
        parts = [xs[s][sum(rows[s][:me]):sum(rows[s][:me]) + rows[s][me]] for s in range(n)]
        check(out, torch.cat(parts), None, "f32", "all_to_all_v_single")
        check(out, ref, None, "f32", "all_to_all_v_single vs torch.distributed")


def case_send_recv(ctx):
    for comm in (ctx.comm, ctx.ncomm):
        x = gen("bf16", (12345,), 0, seed(), ctx.dev)
        if ctx.rank == 0:
            comm.send(x, 1)
            back = poison((12345,), "bf16", ctx.dev)
            comm.recv(back, 1)
            torch.cuda.synchronize()
            check(back, x * 2, None, "bf16", "send/recv round trip")
        else:
            buf = poison((12345,), "bf16", ctx.dev)
            comm.recv(buf, 0)
            comm.send(buf * 2, 0)
            torch.cuda.synchronize()
            check(buf, x, None, "bf16", "recv")
        comm.barrier()


def case_bad_inputs(ctx):
    c = ctx.comm
    E = cclx.CclxInvalidArgument
    x = torch.ones(16, device=ctx.dev)
    other = torch.ones(16, device=torch.device("cuda", 1 - ctx.rank))
    cases = [
        (lambda: c.all_reduce(torch.ones(16)), "is on cpu"),
        (lambda: c.all_reduce(other), f"is on cuda:{1 - ctx.rank}"),
        (lambda: c.all_reduce(torch.ones(8, 8, device=ctx.dev).t()), "contiguous"),
        (lambda: c.all_reduce(x, output=torch.ones(15, device=ctx.dev)), "expected 16"),
        (lambda: c.all_reduce(x, cclx.ReduceOp.BXOR), "not supported"),
        (lambda: c.all_reduce(torch.zeros(4, device=ctx.dev, dtype=torch.uint8).view(
            torch.float8_e4m3fn)),
         "not supported"),
        (lambda: c.all_reduce(torch.ones(4, device=ctx.dev, dtype=torch.complex64)),
         "not supported"),
        (lambda: c.all_gather_single(torch.ones(31, device=ctx.dev), x), "expected 32"),
        (lambda: c.broadcast(x, 2), "out of range"),
    ]
    for fn, text in cases:
        try:
            fn()
        except E as e:
            assert text in str(e), f"{e!s} does not mention {text!r}"
        else:
            raise AssertionError(f"no CclxInvalidArgument ({text})")
    y = torch.full((5,), float(ctx.rank + 1), device=ctx.dev)
    c.all_reduce(y)
    torch.cuda.synchronize()
    assert (y == 3).all().item()


def case_finalize_then_use(ctx):
    c = cclx.new_comm("cclx", torch.device("cuda"), name="gpu_fin", timeout=60)
    c.barrier()
    c.finalize()
    try:
        c.all_reduce(torch.ones(4, device=ctx.dev))
    except cclx.CclxUsageError:
        pass
    else:
        raise AssertionError("no CclxUsageError after finalize")


def case_split(ctx):
    sub = ctx.comm.split([1], "solo")
    if ctx.rank == 1:
        assert sub is not None and sub.get_size() == 1 and sub.get_rank() == 0
        t = torch.full((7,), 3.0, device=ctx.dev)
        sub.all_reduce(t)
        torch.cuda.synchronize()
        assert (t == 3.0).all().item()
        sub.finalize()
    else:
        assert sub is None
    ctx.comm.barrier()
