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


def case_comm_dump_cuda(ctx):
    """get_backend_impl().comm_dump() on a CUDA comm: an async op is pending until complete,
    then counted; every op once synchronized."""
    c, impl = ctx.comm, ctx.comm.get_backend_impl()
    d0 = impl.comm_dump()
    assert d0["rank"] == str(ctx.rank) and d0["device"].startswith("cuda"), d0
    x = data(ctx.rank, 1 << 20, torch.float32, 7).cuda()
    w = c.all_reduce(x, ReduceOp.SUM, async_op=True)
    d1 = impl.comm_dump()
    assert int(d1["ops_issued"]) == int(d0["ops_issued"]) + 1, (d0, d1)
    assert d1["last_op"].startswith("all_reduce #"), d1
    w.wait()
    torch.cuda.synchronize()
    same(x, sum(data(r, 1 << 20, torch.float32, 7).double() for r in range(ctx.size)),
         "all_reduce", 1e-4)
    d2 = impl.comm_dump()
    assert d2["in_flight"] == "0" and d2["in_flight_ops"] == "", d2
    assert int(d2["ops_completed"]) == int(d0["ops_completed"]) + 1, (d0, d2)
    assert d2["failure"] == "none" and "algo.all_reduce" in d2, d2


def case_all_gather_p_cuda(ctx):
    """torchcomms' persistent all-gather as AllGatherPTest runs it (output from cclx's
    allocator), on fresh data each execution, the output reused for compute."""
    c, n = ctx.comm, 1025
    pool = torch.cuda.MemPool(torchcomms.get_mem_allocator(c.get_backend()))
    with torch.cuda.use_mem_pool(pool):
        out = torch.full((n * ctx.size,), float("nan"), device="cuda")
    h = c.all_gather_p_init(out)
    c.barrier(False)
    for it in range(3):
        x = data(ctx.rank, n, torch.float32, 20 + it).cuda()
        c.all_gather_p_exec(h, x, async_op=True).wait()
        torch.cuda.synchronize()
        want = torch.cat([data(r, n, torch.float32, 20 + it) for r in range(ctx.size)])
        same(out, want, f"all_gather_p_exec #{it}", 0)
        assert abs(out.sum().item() - want.sum().item()) < 1e-2
    c.all_gather_p_free(h)
    del out


def case_nx_methods_reach_core(ctx):
    """device_alltoallv_single and reduce_scatter_quantized on get_backend_impl(): correct, or
    cclx's "not implemented" from the core (the call reached it)."""
    impl, n, me = ctx.comm.get_backend_impl(), ctx.size, ctx.rank
    send = [(me + p) % 3 + 1 for p in range(n)]
    recv = [(p + me) % 3 + 1 for p in range(n)]
    x = torch.cat([torch.full((send[p], 4), 100.0 * me + p) for p in range(n)]).cuda()
    out = torch.full((sum(recv), 4), float("nan"), device="cuda")
    try:
        impl.device_alltoallv_single(out, x, torch.tensor(recv).cuda(), torch.tensor(send).cuda(),
                                     False)
    except RuntimeError as e:
        assert "not implemented" in str(e), e
    else:
        torch.cuda.synchronize()
        same(out, torch.cat([torch.full((recv[p], 4), 100.0 * p + me) for p in range(n)]),
             "device_alltoallv_single", 0)
    cnt = 513
    xs = data(me, cnt * n, torch.float32, 30).cuda()
    o = torch.full((cnt,), float("nan"), device="cuda")
    try:
        impl.reduce_scatter_quantized(o, xs, ReduceOp.SUM,
                                      torch.tensor([42], dtype=torch.int64).cuda(), False)
    except RuntimeError as e:
        assert "not implemented" in str(e), e
    else:
        torch.cuda.synchronize()
        full = sum(data(r, cnt * n, torch.float32, 30).double() for r in range(n))
        same(o, full[me * cnt:(me + 1) * cnt], "reduce_scatter_quantized", n * 2.0 ** -6)


def case_profiler_events_cuda(ctx):
    """record_param_comms for each operation and the wait of an async one, as NCCLX emits."""
    import json
    import os
    import tempfile

    c = ctx.comm
    x = torch.ones(64, device="cuda")
    with torch.profiler.profile() as prof:
        c.all_reduce(x, ReduceOp.SUM, False)
        c.broadcast(x, 0, True).wait()
        c.barrier(False)
    torch.cuda.synchronize()
    path = tempfile.mktemp(suffix=".json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("name") == "record_param_comms"]
    os.remove(path)
    names = [e["args"].get("Collective name") for e in ev]
    for want in ("all_reduce", "broadcast", "barrier", "wait"):
        assert names.count(want) == 1, names
    assert all(e["args"]["Process Group Name"] == "gpu_tc" for e in ev), ev
