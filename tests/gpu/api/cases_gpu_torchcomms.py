"""cclx's C++ torchcomms backend on CUDA with ranks sharing one GPU (run by
tests/gpu/api/test_gpu_torchcomms.py): CUDA tensors against float64 references, CPU tensors on
the CUDA comm (device twins, src/torchcomms/staging.h: exact results, complete on return, a
refused call leaves the output untouched), and c10d's init_process_group("cclx") under
use_torchcomms: one CUDA comm that takes CUDA and CPU tensors."""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
import torchcomms
from torchcomms import ReduceOp


def data(r: int, n: int, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + r)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
    return torch.randint(-50, 50, (n,), generator=g, dtype=torch.int64).to(dtype)


def same(got: torch.Tensor, want: torch.Tensor, what: str, tol: float = 1e-5) -> None:
    got = got.cpu()
    ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol) \
        if got.dtype.is_floating_point else torch.equal(got, want.to(got.dtype))
    assert ok, f"{what}: got {got[:6].tolist()}, expected {want[:6].tolist()}"


def setup(ctx):
    torch.cuda.set_device(0)
    dist.config.use_torchcomms = True
    dist.init_process_group(backend="cclx", rank=ctx.rank, world_size=ctx.size)
    store = dist.PrefixStore("direct", dist.distributed_c10d._get_default_store())
    ctx.comm = torchcomms.new_comm("cclx", torch.device("cuda"), name="gpu_tc", store=store,
                                   timeout=timedelta(seconds=60),
                                   abort_process_on_timeout_or_error=False)


def teardown(ctx):
    ctx.comm.finalize()
    dist.destroy_process_group()


def case_route(ctx):
    import cclx.torchcomms_backend as tb
    assert tb.ROUTE == "cxx", tb.ROUTE
    assert ctx.comm.get_device().type == "cuda"


def case_cuda_tensors(ctx):
    n, me, c = ctx.size, ctx.rank, ctx.comm
    for dtype, cnt in ((torch.float32, 1023), (torch.bfloat16, 4097), (torch.int32, 333)):
        x = data(me, cnt, dtype, 1)
        want = sum(data(r, cnt, dtype, 1).double() for r in range(n))
        t = x.cuda()
        c.all_reduce(t, ReduceOp.SUM, async_op=False)
        same(t, want, f"all_reduce {dtype}", 1e-2 if dtype == torch.bfloat16 else 1e-5)
    x = data(me, 257, torch.float32, 2).cuda()
    out = torch.full((257 * n,), float("nan"), device="cuda")
    c.all_gather_single(out, x, async_op=True).wait()
    same(out, torch.cat([data(r, 257, torch.float32, 2) for r in range(n)]), "all_gather_single")


def case_cpu_tensors_on_cuda_comm(ctx):
    n, me, c = ctx.size, ctx.rank, ctx.comm
    for dtype in (torch.float32, torch.int32, torch.int8):
        for cnt in (4, 1023, 1 << 20):
            x = data(me, cnt, dtype, 3)
            want = sum(data(r, cnt, dtype, 3).to(torch.int64 if not dtype.is_floating_point
                                                  else torch.float64) for r in range(n))
            t = x.clone()
            c.tensor_register(t)
            w = c.all_reduce(t, ReduceOp.SUM, async_op=True)
            assert w.is_completed(), "a call with CPU tensors is complete when it returns"
            w.wait()
            same(t, want.to(dtype), f"cpu all_reduce {dtype} x{cnt}")
            c.tensor_deregister(t)
            b = x.clone() if me == 1 % n else torch.zeros_like(x)
            c.broadcast(b, 1 % n, async_op=False)
            same(b, data(1 % n, cnt, dtype, 3), f"cpu broadcast {dtype} x{cnt}")
    x = data(me, 301, torch.float32, 4)
    out = torch.full((301 * n,), float("nan"))
    c.all_gather_single(out, x, async_op=False)
    same(out, torch.cat([data(r, 301, torch.float32, 4) for r in range(n)]), "cpu all_gather")
    big = data(me, 64 * n, torch.float32, 5)
    rs = torch.full((64,), float("nan"))
    c.reduce_scatter_single(rs, big, ReduceOp.SUM, async_op=False)
    full = sum(data(r, 64 * n, torch.float32, 5).double() for r in range(n))
    same(rs, full[64 * me:64 * (me + 1)], "cpu reduce_scatter_single")
    a2a = torch.full((8 * n,), float("nan"))
    c.all_to_all_single(a2a, data(me, 8 * n, torch.float32, 6), async_op=False)
    same(a2a, torch.cat([data(r, 8 * n, torch.float32, 6)[8 * me:8 * (me + 1)]
                         for r in range(n)]), "cpu all_to_all_single")
    # mixed: a CPU input, a CUDA output
    mo = torch.full((301 * n,), float("nan"), device="cuda")
    c.all_gather_single(mo, x, async_op=False)
    same(mo, torch.cat([data(r, 301, torch.float32, 4) for r in range(n)]), "mixed all_gather")


def case_cpu_refused_call_changes_nothing(ctx):
    out = torch.full((7,), -3.0)  # not size x input: refused before anything runs
    try:
        ctx.comm.all_gather_single(out, torch.ones(5), async_op=False)
    except RuntimeError as e:
        assert "all_gather_single" in str(e), e
    else:
        raise AssertionError("a wrongly sized all_gather_single was accepted")
    assert torch.equal(out, torch.full((7,), -3.0)), out


def case_c10d_one_cuda_comm_for_both_devices(ctx):
    n, me = ctx.size, ctx.rank
    be = dist.group.WORLD._get_backend(torch.device("cuda"))
    assert be is dist.group.WORLD._get_backend(torch.device("cpu"))
    g = torch.full((33,), float(me + 1), device="cuda")
    dist.all_reduce(g)
    h = torch.full((33,), float(me + 1))
    dist.all_reduce(h)
    want = torch.full((33,), float(n * (n + 1) // 2))
    same(g, want, "c10d cuda all_reduce")
    same(h, want, "c10d cpu all_reduce")
    nxt, prv = (me + 1) % n, (me - 1) % n
    s = torch.full((17,), float(me), device="cuda")
    r = torch.full((17,), -1.0, device="cuda")
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, s, nxt), dist.P2POp(dist.irecv, r, prv)]):
        w.wait()
    same(r, torch.full((17,), float(prv)), "c10d batch_isend_irecv ring")
