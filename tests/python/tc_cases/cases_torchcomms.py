"""cclx as a torchcomms backend on CPU: torchcomms.new_comm("cclx") and every collective,
point-to-point call and split that torchcomms' Python-backend route carries, on torch tensors of
random data against float64 references built from every rank's inputs (run by
test_torchcomms_backend.py on 3 processes; needs torchcomms)."""
from __future__ import annotations

from datetime import timedelta

import torch
import torchcomms
from torchcomms import ReduceOp

import cclx

DTYPES = (torch.float32, torch.float64, torch.int32, torch.bfloat16)


def data(r: int, n: int, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + r)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
    return torch.randint(-50, 50, (n,), generator=g, dtype=torch.int64).to(dtype)


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    want = want.to(got.dtype) if not got.dtype.is_floating_point else want
    tol = 2e-2 if got.dtype == torch.bfloat16 else 1e-5
    ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    assert ok, f"{what}: got {got[:6].tolist()}, expected {want[:6].tolist()}"


def setup(ctx):
    ctx.comm = torchcomms.new_comm("cclx", torch.device("cpu"), name="tc_cases",
                                   timeout=timedelta(seconds=60),
                                   abort_process_on_timeout_or_error=False,
                                   hints={"lazySetupChannels": "1", "cclx.algo": "auto"})


def teardown(ctx):
    ctx.comm.finalize()


def case_identity(ctx):
    c = ctx.comm
    assert c.get_rank() == ctx.rank and c.get_size() == ctx.size
    assert c.get_backend() == "cclx"
    assert c.get_name() == "tc_cases"
    assert c.get_device().type == "cpu"
    impl = c.get_backend_impl()
    assert type(impl).__name__ == "CclxBackend", type(impl)


def case_all_reduce(ctx):
    n, me = ctx.size, ctx.rank
    for dtype in DTYPES:
        for op, ref in ((ReduceOp.SUM, lambda xs: sum(xs)),
                        (ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values),
                        (ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values)):
            for async_op in (False, True):
                xs = [data(r, 1000, dtype, 1).double() for r in range(n)]
                t = data(me, 1000, dtype, 1)
                ctx.comm.all_reduce(t, op, async_op=async_op).wait()
                close(t, ref(xs), f"all_reduce {dtype} {op.type} async={async_op}")


def case_broadcast_reduce(ctx):
    n, me = ctx.size, ctx.rank
    root = n - 1
    t = data(me, 777, torch.float32, 2)
    ctx.comm.broadcast(t, root, async_op=False)
    close(t, data(root, 777, torch.float32, 2).double(), "broadcast")
    t = data(me, 777, torch.float64, 3)
    ctx.comm.reduce(t, 0, ReduceOp.SUM, async_op=True).wait()
    if me == 0:
        close(t, sum(data(r, 777, torch.float64, 3) for r in range(n)), "reduce")


def case_all_gather(ctx):
    n, me = ctx.size, ctx.rank
    x = data(me, 100, torch.float32, 4)
    outs = [torch.zeros(100) for _ in range(n)]
    ctx.comm.all_gather(outs, x, async_op=False)
    for r in range(n):
        close(outs[r], data(r, 100, torch.float32, 4), f"all_gather[{r}]")
    single = torch.zeros(n * 100)
    ctx.comm.all_gather_single(single, x, async_op=True).wait()
    close(single, torch.cat([data(r, 100, torch.float32, 4) for r in range(n)]),
          "all_gather_single")
    sizes = [r + 3 for r in range(n)]
    outs = [torch.zeros(s) for s in sizes]
    ctx.comm.all_gather_v(outs, data(me, sizes[me], torch.float32, 5), async_op=False)
    for r in range(n):
        close(outs[r], data(r, sizes[r], torch.float32, 5), f"all_gather_v[{r}]")


def case_reduce_scatter(ctx):
    n, me = ctx.size, ctx.rank
    full = [data(r, n * 64, torch.float64, 6) for r in range(n)]
    out = torch.zeros(64, dtype=torch.float64)
    ctx.comm.reduce_scatter_single(out, full[me].clone(), ReduceOp.SUM, async_op=False)
    close(out, sum(full)[me * 64:(me + 1) * 64], "reduce_scatter_single")
    out = torch.zeros(64, dtype=torch.float64)
    ctx.comm.reduce_scatter(out, list(full[me].clone().chunk(n)), ReduceOp.MAX,
                            async_op=True).wait()
    close(out, torch.stack(full).max(0).values[me * 64:(me + 1) * 64], "reduce_scatter")
    sizes = [r + 1 for r in range(n)]
    ins = [data(me * 10 + r, sizes[r], torch.float64, 7) for r in range(n)]
    out = torch.zeros(sizes[me], dtype=torch.float64)
    ctx.comm.reduce_scatter_v(out, ins, ReduceOp.SUM, async_op=False)
    close(out, sum(data(s * 10 + me, sizes[me], torch.float64, 7) for s in range(n)),
          "reduce_scatter_v")


def case_all_to_all(ctx):
    n, me = ctx.size, ctx.rank
    x = data(me, n * 8, torch.int32, 8)
    out = torch.zeros(n * 8, dtype=torch.int32)
    ctx.comm.all_to_all_single(out, x, async_op=False)
    want = torch.cat([data(r, n * 8, torch.int32, 8)[me * 8:(me + 1) * 8] for r in range(n)])
    close(out, want, "all_to_all_single")
    # rank s sends s + d + 1 rows to rank d
    send = [me + d + 1 for d in range(n)]
    recv = [s + me + 1 for s in range(n)]
    x = data(me, sum(send) * 2, torch.float32, 9).view(-1, 2)
    out = torch.zeros(sum(recv), 2)
    ctx.comm.all_to_all_v_single(out, x, recv, send, async_op=True).wait()
    parts = []
    for s in range(n):
        xs = data(s, sum(s + d + 1 for d in range(n)) * 2, torch.float32, 9).view(-1, 2)
        off = sum(s + d + 1 for d in range(me))
        parts.append(xs[off:off + s + me + 1])
    close(out.flatten(), torch.cat(parts).flatten(), "all_to_all_v_single")
    ins = [data(me * n + d, d + 2, torch.float32, 10) for d in range(n)]
    outs = [torch.zeros(me + 2) for _ in range(n)]
    ctx.comm.all_to_all(outs, ins, async_op=False)
    for s in range(n):
        close(outs[s], data(s * n + me, me + 2, torch.float32, 10), f"all_to_all[{s}]")


def case_scatter_gather(ctx):
    n, me = ctx.size, ctx.rank
    root = 1 % n
    ins = [data(r, 50, torch.float32, 11) for r in range(n)] if me == root else []
    out = torch.zeros(50)
    ctx.comm.scatter(out, ins, root, async_op=False)
    close(out, data(me, 50, torch.float32, 11), "scatter")
    outs = [torch.zeros(50) for _ in range(n)] if me == root else []
    ctx.comm.gather(outs, data(me, 50, torch.float32, 12), root, async_op=True).wait()
    if me == root:
        for r in range(n):
            close(outs[r], data(r, 50, torch.float32, 12), f"gather[{r}]")


def case_send_recv_barrier(ctx):
    n, me = ctx.size, ctx.rank
    nxt, prv = (me + 1) % n, (me - 1) % n
    x = data(me, 300, torch.float32, 13)
    y = torch.zeros(300)
    if me % 2 == 0:
        ctx.comm.send(x, nxt, async_op=False)
        ctx.comm.recv(y, prv, async_op=False)
    else:
        w = ctx.comm.recv(y, prv, async_op=True)
        ctx.comm.send(x, nxt, async_op=False)
        w.wait()
    close(y, data(prv, 300, torch.float32, 13), "send/recv ring")
    ctx.comm.barrier(async_op=False)
    ctx.comm.barrier(async_op=True).wait()


def case_split(ctx):
    # torchcomms' split: each rank passes the list of its own group (here: even / odd ranks),
    # a rank in no group an empty list (here: the last rank when there are three or more).
    n, me = ctx.size, ctx.rank
    out = n >= 3 and me == n - 1
    ranks = [] if out else [r for r in range(n) if r % 2 == me % 2 and not (n >= 3 and r == n - 1)]
    sub = ctx.comm.split(ranks, "tc_split")
    if out:
        assert sub is None
        return
    assert sub.get_size() == len(ranks) and sub.get_rank() == ranks.index(me)
    t = torch.full((10,), float(me + 1))
    sub.all_reduce(t, ReduceOp.SUM, async_op=False)
    close(t, torch.full((10,), float(sum(r + 1 for r in ranks))), "split all_reduce")
    sub.finalize()


def case_hooks_see_ops(ctx):
    names = []
    h = ctx.comm.register_pre_hook(lambda name, op_id, args: names.append(str(name)))
    ctx.comm.all_reduce(torch.ones(4), ReduceOp.SUM, async_op=False)
    ctx.comm.barrier(async_op=False)
    h.remove()
    assert len(names) == 2 and "all_reduce" in names[0].lower(), names


def case_errors_surface(ctx):
    # A bad argument raises cclx's error through torchcomms (before anything runs), on every
    # rank alike (each makes the same bad call), so the comm stays usable. (A root or peer out
    # of range is torchcomms' own check, which ends the process in the build tested.)
    out = torch.zeros(ctx.size * 4 + 1)
    try:
        ctx.comm.all_gather_single(out, torch.ones(4), async_op=False)
    except cclx.CclxInvalidArgument as e:
        assert "all_gather_single" in str(e), str(e)
    else:
        raise AssertionError("all_gather_single with a wrong output size did not raise")
    assert torch.all(out == 0), "a rejected call wrote its output"
    try:
        ctx.comm.all_reduce(torch.ones(4), ReduceOp.PREMUL_SUM(2.0), async_op=False)
    except Exception as e:  # noqa: BLE001
        assert "PREMUL_SUM" in str(e), str(e)
    else:
        raise AssertionError("PREMUL_SUM did not raise")
    t = torch.ones(8)
    ctx.comm.all_reduce(t, ReduceOp.SUM, async_op=False)
    close(t, torch.full((8,), float(ctx.size)), "all_reduce after the errors")


def case_hints_mapping(ctx):
    from cclx.torchcomms_backend import cclx_hints

    impl = ctx.comm.get_backend_impl()
    got = cclx_hints(impl._comm, {"algo": "tree", "cclx::fp8_algo": "oneshot",
                                  "lazySetupChannels": "1", "cclx.put_path": "sm"})
    assert got == {"algo": "tree", "fp8_algo": "oneshot", "put_path": "sm"}, got
    assert isinstance(impl._comm, cclx.Comm)
