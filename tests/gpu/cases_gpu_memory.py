"""Communication memory on CUDA comms (run by test_gpu_memory.py at world size 1, with ranks
sharing one GPU, and a GPU each where there are two): tensors from cclx.get_mem_allocator()'s
pool and registered tensors (tensor_register) in collectives, bit for bit against a CPU comm of
the same ranks (the host twin) on random data, back to back without a sync and in CUDA-graph
replay; windows on the allocator's memory (mapped on the peers by file descriptor); bad calls
that raise and change nothing; the pool's memory returned to the driver."""
from __future__ import annotations

import torch

import cclx

POISON = 0x7B


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name="mem_gpu", timeout=120)
    ctx.dev = ctx.comm.get_device()
    ctx.twin = cclx.new_comm("cclx", "cpu", name="mem_twin", timeout=120)
    ctx.pool = torch.cuda.MemPool(cclx.get_mem_allocator())


def teardown(ctx):
    ctx.comm.finalize()
    ctx.twin.finalize()


def rand(ctx, n, dtype, seed):
    g = torch.Generator().manual_seed(seed * 7919 + ctx.rank)
    return (torch.randn(n, generator=g) * 8).to(dtype)


def pooled(ctx, n, dtype):
    with torch.cuda.use_mem_pool(ctx.pool):
        t = torch.empty(n, dtype=dtype, device=ctx.dev)
    t.view(torch.uint8).fill_(POISON)
    return t


def twin_all_reduce(ctx, x):
    want = x.clone()
    ctx.twin.all_reduce(want, cclx.ReduceOp.SUM)
    return want


def case_allocator_is_shared(ctx):
    a = cclx.get_mem_allocator()
    assert ctx.comm.get_mem_allocator() is a and ctx.comm.mem_allocator is a
    assert cclx.get_mem_allocator("nccl") is a
    t = pooled(ctx, 5, torch.float32)
    assert t.is_cuda and t.device == torch.device(ctx.dev)


def case_pool_tensors_in_collectives(ctx):
    """Pool memory, registered or not, in every algorithm a size picks (DDA, NCCL at world size
    1): bit-equal to the host twin (float sums in the same order are not guaranteed across
    algorithms, so integers and a max carry the bit-exact check; floats are compared close)."""
    comm = ctx.comm
    for n in (1, 1001, 65537, 1 << 21):
        for reg in (False, True):
            xi = rand(ctx, n, torch.float32, n).round().to(torch.int32)
            x = pooled(ctx, n, torch.int32)
            x.copy_(xi)
            if reg:
                comm.tensor_register(x)
            comm.all_reduce(x, cclx.ReduceOp.SUM)
            assert torch.equal(x.cpu(), twin_all_reduce(ctx, xi)), (n, reg)
            xf = rand(ctx, n, torch.float32, n + 1)
            y = pooled(ctx, n, torch.float32)
            out = pooled(ctx, n * ctx.size, torch.float32)
            y.copy_(xf)
            comm.all_reduce(y, cclx.ReduceOp.MAX)
            comm.all_gather_single(out, y)
            want = xf.clone()
            ctx.twin.all_reduce(want, cclx.ReduceOp.MAX)
            assert torch.equal(y.cpu(), want), (n, reg)
            assert torch.equal(out.cpu(), want.repeat(ctx.size)), (n, reg)
            if reg:
                comm.tensor_deregister(x)
    assert comm._c.registered_count == 0


def case_registered_back_to_back_and_graph(ctx):
    """Registered buffers (pool and torch's own allocator) in ten calls without a sync, then in
    a captured graph replayed with fresh inputs."""
    comm, n = ctx.comm, 300007
    bufs = [pooled(ctx, n, torch.float32), torch.empty(n, device=ctx.dev)]
    for b in bufs:
        comm.tensor_register(b)
    inputs = [rand(ctx, n, torch.float32, 100 + k).round() for k in range(10)]
    for k, x in enumerate(inputs):
        bufs[k % 2].copy_(x, non_blocking=True)
        comm.all_reduce(bufs[k % 2], cclx.ReduceOp.SUM, async_op=True).wait()
        if k >= 8:
            torch.cuda.synchronize()
            assert torch.equal(bufs[k % 2].cpu(), twin_all_reduce(ctx, x)), k
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        comm.all_reduce(bufs[0], cclx.ReduceOp.SUM)  # warm-up outside capture
        with torch.cuda.graph(g, stream=s):
            comm.all_reduce(bufs[0], cclx.ReduceOp.SUM)
    torch.cuda.synchronize()
    for k in range(3):
        x = rand(ctx, n, torch.float32, 200 + k).round()
        bufs[0].copy_(x)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(bufs[0].cpu(), twin_all_reduce(ctx, x)), f"replay {k}"
    del g
    for b in bufs:
        comm.tensor_deregister(b)


def case_bad_registration(ctx):
    comm = ctx.comm
    t = pooled(ctx, 64, torch.float32)
    comm.tensor_register(t)
    for fn, word in ((lambda: comm.tensor_register(t), "already registered"),
                     (lambda: comm.tensor_deregister(t[:8]), "registered with"),
                     (lambda: comm.tensor_deregister(torch.ones(4, device=ctx.dev)), "no buffer"),
                     (lambda: comm.tensor_register(torch.ones(4)), "tensor"),
                     (lambda: comm.tensor_register(t[::2]), "contiguous")):
        try:
            fn()
        except cclx.CclxInvalidArgument as e:
            assert word in str(e), f"{str(e)!r} lacks {word!r}"
        else:
            raise AssertionError(f"no CclxInvalidArgument for {word!r}")
        assert comm._c.registered_count == 1
    comm.tensor_deregister(t)


def case_window_on_pool_memory(ctx):
    """A window over the allocator's memory at an offset inside a pool segment: puts on both
    paths, signals, and direct access to every peer's buffer. (One-host windows need 2..8
    ranks: at world size 1 there is no peer to map.)"""
    c, r, n = ctx.comm, ctx.rank, ctx.size
    if n == 1:
        return
    pad = pooled(ctx, 1000 + 64 * r, torch.uint8)  # the window sits at an offset
    for dtype, count, path in ((torch.float32, 1031, "sm"), (torch.bfloat16, 70001, "ce")):
        buf = pooled(ctx, n * count, dtype).view(n, count)
        buf.fill_(-3)
        win = c.new_window(buf)
        nxt, prv = (r + 1) % n, (r - 1) % n
        for k in range(3):
            x = rand(ctx, count, dtype, 300 + k).to(ctx.dev)
            win.put(x, nxt, r * count, False, {"put_path": path})
            win.signal(nxt)
            win.wait_signal(prv)
            g = torch.Generator().manual_seed((300 + k) * 7919 + prv)
            want = (torch.randn(count, generator=g) * 8).to(dtype)
            assert torch.equal(buf[prv].cpu(), want), (dtype, k)
            c.barrier()
        for q in range(n):
            view = win.map_remote_tensor(q)
            assert view.shape == buf.shape and view.dtype == dtype
            g = torch.Generator().manual_seed(302 * 7919 + (q - 1) % n)
            assert torch.equal(view[(q - 1) % n].cpu(), (torch.randn(count, generator=g) * 8)
                               .to(dtype)), q
        torch.cuda.synchronize()
        c.barrier()
        win.tensor_deregister()
    del pad


def case_pool_memory_returns(ctx):
    """Freed pool tensors go back to the driver when the pool is emptied: the device's free
    memory drops by the allocation and recovers (cudaMemGetInfo; checked at world size 1 only,
    where no other process allocates on the GPU meanwhile)."""
    torch.cuda.synchronize()
    pool = torch.cuda.MemPool(cclx.get_mem_allocator())
    free0 = torch.cuda.mem_get_info()[0]
    with torch.cuda.use_mem_pool(pool):
        big = torch.empty(256 << 20, dtype=torch.uint8, device=ctx.dev)
    big.fill_(1)
    torch.cuda.synchronize()
    used = free0 - torch.cuda.mem_get_info()[0]
    del big
    del pool
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    free1 = torch.cuda.mem_get_info()[0]
    if ctx.size == 1:
        assert used >= 256 << 20, f"the pool took {used} bytes for a 256 MiB tensor"
        assert free1 >= free0 - (32 << 20), f"free memory {free0} -> {free1} after emptying"
    ctx.comm.barrier()
