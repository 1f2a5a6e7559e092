"""cclx as a C++ torchcomms backend on CPU (libcclx_torchcomms.so, CCLX_TORCHCOMMS_ROUTE=cxx):
what the Python route cannot carry (PREMUL_SUM with its factor, batch_op_issue, per-call hints,
tensor registration, reconfigure, the device of a split comm, a truthful is_completed()) and the
dtype mapping (bool, complex, types sent as bytes), against references built from every rank's
inputs (run by test_torchcomms_cxx.py on 3 processes; needs torchcomms and the library)."""
from __future__ import annotations

from datetime import timedelta

import torch
import torchcomms
from torchcomms import ReduceOp


def data(r: int, n: int, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + r)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
    if dtype.is_complex:
        return torch.complex(torch.rand(n, generator=g, dtype=torch.float64),
                             torch.rand(n, generator=g, dtype=torch.float64)).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    return torch.randint(-50, 50, (n,), generator=g, dtype=torch.int64).to(dtype)


def close(got: torch.Tensor, want: torch.Tensor, what: str, tol: float = 1e-5) -> None:
    if got.dtype.is_complex:
        ok = torch.allclose(got.to(torch.complex128), want.to(torch.complex128), rtol=tol, atol=tol)
    else:
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    assert ok, f"{what}: got {got[:6].tolist()}, expected {want[:6].tolist()}"


def setup(ctx):
    ctx.comm = torchcomms.new_comm("cclx", torch.device("cpu"), name="tc_cxx",
                                   timeout=timedelta(seconds=60),
                                   abort_process_on_timeout_or_error=False,
                                   hints={"lazySetupChannels": "1", "cclx.algo": "auto"})


def teardown(ctx):
    ctx.comm.finalize()


def case_route_and_identity(ctx):
    import cclx.torchcomms_backend as tb

    c = ctx.comm
    assert tb.ROUTE == "cxx", tb.ROUTE
    # The C++ object (bound by cclx._cclx_torchcomms), not the Python route's class.
    assert not isinstance(c.get_backend_impl(), tb.CclxBackend), type(c.get_backend_impl())
    assert c.get_rank() == ctx.rank and c.get_size() == ctx.size
    assert c.get_backend() == "cclx" and c.get_name() == "tc_cxx"
    assert c.get_device().type == "cpu"
    opts = c.get_options()
    assert opts.timeout == timedelta(seconds=60), opts.timeout
    assert opts.abort_process_on_timeout_or_error is False


def case_premul_sum(ctx):
    n, me = ctx.size, ctx.rank
    for factor in (2.5, torch.tensor(0.5, dtype=torch.float64)):
        t = data(me, 500, torch.float32, 1)
        ctx.comm.all_reduce(t, ReduceOp.PREMUL_SUM(factor), async_op=False)
        f = float(factor)
        close(t, sum(data(r, 500, torch.float32, 1).double() * f for r in range(n)),
              f"all_reduce PREMUL_SUM({f})")
    out = torch.zeros(64, dtype=torch.float64)
    full = [data(r, n * 64, torch.float64, 2) for r in range(n)]
    ctx.comm.reduce_scatter_single(out, full[me].clone(), ReduceOp.PREMUL_SUM(3.0),
                                   async_op=False)
    close(out, (sum(full) * 3.0)[me * 64:(me + 1) * 64], "reduce_scatter_single PREMUL_SUM")


def case_ops_and_dtypes(ctx):
    n, me = ctx.size, ctx.rank
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                  torch.uint8, torch.int32, torch.int64):
        tol = 2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5
        for op, ref in ((ReduceOp.SUM, lambda xs: sum(xs)),
                        (ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values),
                        (ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values)):
            t = data(me, 200, dtype, 3)
            ctx.comm.all_reduce(t, op, async_op=True).wait()
            want = ref([data(r, 200, dtype, 3).double() for r in range(n)])
            close(t, want.to(dtype), f"all_reduce {dtype} {op.type}", tol)
    t = data(me, 100, torch.float64, 4)
    ctx.comm.all_reduce(t, ReduceOp.AVG, async_op=False)
    close(t, sum(data(r, 100, torch.float64, 4) for r in range(n)) / n, "AVG")
    # bool: SUM is a logical or, PRODUCT a logical and (as c10d)
    b = data(me, 64, torch.bool, 5)
    bs = torch.stack([data(r, 64, torch.bool, 5) for r in range(n)])
    x = b.clone()
    ctx.comm.all_reduce(x, ReduceOp.SUM, async_op=False)
    assert torch.equal(x, bs.any(0)), "bool SUM"
    x = b.clone()
    ctx.comm.all_reduce(x, ReduceOp.PRODUCT, async_op=False)
    assert torch.equal(x, bs.all(0)), "bool PRODUCT"
    # complex: pairs of floats
    z = data(me, 50, torch.complex64, 6)
    ctx.comm.all_reduce(z, ReduceOp.SUM, async_op=False)
    close(z, sum(data(r, 50, torch.complex64, 6).to(torch.complex128) for r in range(n)),
          "complex SUM", 1e-4)
    # int16 has no cclx type: data movement sends its bytes
    s = data(me, 30, torch.int16, 7)
    out = torch.zeros(n * 30, dtype=torch.int16)
    ctx.comm.all_gather_single(out, s, async_op=False)
    assert torch.equal(out, torch.cat([data(r, 30, torch.int16, 7) for r in range(n)]))
    s = data(me, 30, torch.int16, 8)
    ctx.comm.broadcast(s, n - 1, async_op=False)
    assert torch.equal(s, data(n - 1, 30, torch.int16, 8)), "int16 broadcast"
    # a non-contiguous input travels as a contiguous copy
    m = data(me, 40, torch.float32, 9).view(4, 10).t()
    out = torch.zeros(n * 40)
    ctx.comm.all_gather_single(out, m, async_op=False)
    close(out, torch.cat([data(r, 40, torch.float32, 9).view(4, 10).t().reshape(-1)
                          for r in range(n)]), "non-contiguous input")


def case_batch_op_issue(ctx):
    n, me = ctx.size, ctx.rank
    nxt, prv = (me + 1) % n, (me - 1) % n
    a = data(me, 100, torch.float32, 10)
    b = data(me, 33, torch.int64, 11)
    ra = torch.zeros(100)
    rb = torch.zeros(33, dtype=torch.int64)
    batch = ctx.comm.batch_op_create()
    batch.send(a, nxt)
    batch.recv(ra, prv)
    batch.send(b, prv)
    batch.recv(rb, nxt)
    batch.issue(async_op=True).wait()
    close(ra, data(prv, 100, torch.float32, 10), "batch float32 from prev")
    assert torch.equal(rb, data(nxt, 33, torch.int64, 11)), "batch int64 from next"


def case_per_call_hints_and_timeout(ctx):
    t = torch.ones(16)
    ctx.comm.all_reduce(t, ReduceOp.SUM, async_op=False, hints={"cclx.algo": "tree"},
                        timeout=timedelta(seconds=30))
    close(t, torch.full((16,), float(ctx.size)), "all_reduce with hints")
    try:
        ctx.comm.all_reduce(torch.ones(4), ReduceOp.SUM, async_op=False,
                            hints={"cclx.algo": "nonsense"})
    except RuntimeError as e:
        assert "algo" in str(e), str(e)
    else:
        raise AssertionError("a bad cclx hint did not raise")


def case_errors_surface(ctx):
    out = torch.zeros(ctx.size * 4 + 1)
    try:
        ctx.comm.all_gather_single(out, torch.ones(4), async_op=False)
    except RuntimeError as e:
        assert "all_gather_single" in str(e) and "[cclx]" in str(e), str(e)
    else:
        raise AssertionError("all_gather_single with a wrong output size did not raise")
    assert torch.all(out == 0), "a rejected call wrote its output"
    t = torch.ones(8)
    ctx.comm.all_reduce(t, ReduceOp.SUM, async_op=False)
    close(t, torch.full((8,), float(ctx.size)), "all_reduce after the errors")


def case_work_semantics(ctx):
    t = torch.ones(8)
    w = ctx.comm.all_reduce(t, ReduceOp.SUM, async_op=True)
    assert w.is_completed(), "a CPU op is complete when the call returns"
    w.wait()
    w.wait_blocking()
    ctx.comm.barrier(async_op=True).wait()


def case_register_tensor(ctx):
    t = torch.ones(1024)
    ctx.comm.tensor_register(t)
    ctx.comm.all_reduce(t, ReduceOp.SUM, async_op=False)
    close(t, torch.full((1024,), float(ctx.size)), "all_reduce on a registered tensor")
    ctx.comm.tensor_deregister(t)


def case_split_device(ctx):
    n, me = ctx.size, ctx.rank
    ranks = [r for r in range(n) if r % 2 == me % 2]
    sub = ctx.comm.split(ranks, "tc_cxx_split")
    assert sub.get_size() == len(ranks) and sub.get_rank() == ranks.index(me)
    assert sub.get_device().type == "cpu"
    t = torch.full((10,), float(me + 1))
    sub.all_reduce(t, ReduceOp.PREMUL_SUM(2.0), async_op=False)
    close(t, torch.full((10,), 2.0 * sum(r + 1 for r in ranks)), "split PREMUL_SUM")
    sub.finalize()
