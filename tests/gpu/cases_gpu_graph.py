"""CUDA-graph capture/replay of every collective with fresh inputs between replays, and
async_op semantics (2 processes, CUDA torch tensors)."""
from __future__ import annotations

import torch

import cclx
from trefs import check, gen, poison, reduce_ref, setup_comms, teardown_comms

_s = [5000]


def seed():
    _s[0] += 1
    return _s[0]


def setup(ctx):
    setup_comms(ctx, "graph")


def teardown(ctx):
    teardown_comms(ctx)


def _graph(fn):
    """Warm up on a side stream (as torch recommends), then capture fn once."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def _replay_check(ctx, g, static_in, make_inputs, expect, what, replays=3):
    for k in range(replays):
        xs = make_inputs()
        static_in.copy_(xs[ctx.rank])
        g.replay()
        torch.cuda.synchronize()
        got, exp, scale, dtype = expect(xs)
        check(got, exp, scale, dtype, f"{what} replay {k}")


def _graph_suite(ctx, comm, dtype, hints=None):
    n, dev = ctx.size, ctx.dev
    name = f"{comm.get_backend()} {dtype} hints={hints}"
    for count in (1, 4099, (1 << 20) + 1):
        # all_reduce in place
        buf = gen(dtype, (count,), ctx.rank, seed(), dev)
        g = _graph(lambda: comm.all_reduce(buf, cclx.ReduceOp.SUM, False, hints))

        def mk(count=count):
            s = seed()
            return [gen(dtype, (count,), r, s, dev) for r in range(n)]

        _replay_check(ctx, g, buf, mk, lambda xs: (buf, *reduce_ref(xs, "SUM", dtype), dtype),
                      f"graph all_reduce {name} {count}")
        # all_reduce out of place
        out = poison((count,), dtype, dev)
        g = _graph(lambda: comm.all_reduce(buf, cclx.ReduceOp.SUM, False, hints, output=out))
        _replay_check(ctx, g, buf, mk, lambda xs: (out, *reduce_ref(xs, "SUM", dtype), dtype),
                      f"graph all_reduce out-of-place {name} {count}")
    count = 3333
    src = gen(dtype, (count,), ctx.rank, seed(), dev)

    def mk1():
        s = seed()
        return [gen(dtype, (count,), r, s, dev) for r in range(n)]

    def mkn():
        s = seed()
        return [gen(dtype, (n * count,), r, s, dev) for r in range(n)]

    # broadcast (root 1), reduce (root 0)
    bout = poison((count,), dtype, dev)
    g = _graph(lambda: comm.broadcast(src, 1, False, hints, output=bout))
    _replay_check(ctx, g, src, mk1, lambda xs: (bout, xs[1], None, dtype), f"graph bcast {name}")
    rout = poison((count,), dtype, dev)
    g = _graph(lambda: comm.reduce(src, 0, cclx.ReduceOp.SUM, False, hints, output=rout))
    _replay_check(ctx, g, src, mk1,
                  lambda xs: (rout, *reduce_ref(xs, "SUM", dtype), dtype) if ctx.rank == 0
                  else (rout, rout.double(), None, "f64"), f"graph reduce {name}")
    # all_gather_single
    gout = poison((n * count,), dtype, dev)
    g = _graph(lambda: comm.all_gather_single(gout, src, False, hints))
    _replay_check(ctx, g, src, mk1, lambda xs: (gout, torch.cat(xs), None, dtype),
                  f"graph all_gather {name}")
    # reduce_scatter_single
    big = gen(dtype, (n * count,), ctx.rank, seed(), dev)
    sout = poison((count,), dtype, dev)
    g = _graph(lambda: comm.reduce_scatter_single(sout, big, cclx.ReduceOp.SUM, False, hints))
    blk = slice(ctx.rank * count, (ctx.rank + 1) * count)

    def rs_exp(xs):
        e, sc = reduce_ref(xs, "SUM", dtype)
        return sout, e[blk], sc[blk], dtype

    _replay_check(ctx, g, big, mkn, rs_exp, f"graph reduce_scatter {name}")
    # all_to_all_single
    aout = poison((n * count,), dtype, dev)
    g = _graph(lambda: comm.all_to_all_single(aout, big, False, hints))
    _replay_check(ctx, g, big, mkn, lambda xs: (
        aout, torch.cat([xs[s].view(n, count)[ctx.rank] for s in range(n)]), None, dtype),
        f"graph all_to_all {name}")
    # send/recv (0 -> 1)
    pbuf = poison((count,), dtype, dev)
    if ctx.rank == 0:
        g = _graph(lambda: comm.send(src, 1, False, hints))
    else:
        g = _graph(lambda: comm.recv(pbuf, 0, False, hints))
    _replay_check(ctx, g, src, mk1, lambda xs: (
        (pbuf, xs[0], None, dtype) if ctx.rank == 1 else (src, xs[0], None, dtype)),
        f"graph send/recv {name}")
    comm.barrier()
    torch.cuda.synchronize()


def case_graph_cclx_bf16(ctx):
    _graph_suite(ctx, ctx.comm, "bf16")


def case_graph_cclx_f32(ctx):
    _graph_suite(ctx, ctx.comm, "f32")


def case_graph_cclx_flat_tree(ctx):
    for algo in ("flat", "lamport", "tree"):
        _graph_suite(ctx, ctx.comm, "f16", {"algo": algo})


def case_graph_nccl_backend(ctx):
    _graph_suite(ctx, ctx.ncomm, "bf16")


def case_async_op_semantics(ctx):
    """An async op runs after work already queued on the caller's stream; Work.wait() orders
    later work on the current stream after it; the Work keeps the tensors alive."""
    dev, n = ctx.dev, ctx.size
    for comm in (ctx.comm, ctx.ncomm):
        s = seed()
        xs = [gen("f32", (1 << 22,), r, s, dev) for r in range(n)]
        exp, scale = reduce_ref([x * 3 for x in xs], "SUM", "f32")
        base = xs[ctx.rank].clone()
        torch.cuda._sleep(20_000_000)  # keep the stream busy so ordering matters
        t = base * 3  # queued after the sleep on the current stream
        w = comm.all_reduce(t, cclx.ReduceOp.SUM, async_op=True)
        assert isinstance(w, cclx.Work)
        w.wait()
        after = t * 1.0  # ordered after the collective by wait()
        torch.cuda.synchronize()
        check(after, exp, scale, "f32", f"{comm.get_backend()} async all_reduce")
        assert w.is_completed()
        w.wait_blocking(timeout=30)
        # A dropped Work: the tensor must stay alive until the op completes.
        u = gen("f32", (1 << 20,), ctx.rank, s, dev)
        comm.all_gather_single(torch.empty(n << 20, device=dev), u, async_op=True)
        del u
        comm.barrier(async_op=True).wait_blocking(timeout=60)
        torch.cuda.synchronize()
        # Many async ops in flight, waited in reverse order.
        ts = [torch.full((1000,), float(i + ctx.rank), device=dev) for i in range(8)]
        works = [comm.all_reduce(t, cclx.ReduceOp.SUM, async_op=True) for t in ts]
        for w in reversed(works):
            w.wait()
        torch.cuda.synchronize()
        for i, t in enumerate(ts):
            assert (t == n * i + sum(range(n))).all().item(), (i, t[:3])
