"""One-sided windows through torchcomms on cclx's C++ backend, CUDA comms with ranks sharing one
GPU (CUDA IPC between the processes; run by tests/gpu/api/test_gpu_torchcomms.py): a ring of puts
at offsets with signal / wait_signal on side streams, async works, tensors from torch's caching
allocator and from torchcomms.get_mem_allocator("cclx"), map_remote_tensor / get_attr, CUDA-graph
replay of put / signal / wait_signal with fresh data, and refused calls that change nothing.
The CPU twin is tests/python/tc_cases/cases_torchcomms_cxx_window.py."""
from __future__ import annotations

from datetime import timedelta

import torch
import torchcomms

POISON = -5.0


def data(r: int, n: int, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + r)
    return (torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)


def setup(ctx):
    torch.cuda.set_device(0)
    ctx.comm = torchcomms.new_comm("cclx", torch.device("cuda"), name="gpu_tc_win",
                                   timeout=timedelta(seconds=60),
                                   abort_process_on_timeout_or_error=False)


def teardown(ctx):
    ctx.comm.finalize()


def _ring(c, me, n, buf, k, dtype, seed, async_op):
    dst, src = (me + 1) % n, (me - 1) % n
    win = c.new_window()
    win.tensor_register(buf)
    c.barrier(False)
    x = data(me, k, dtype, seed).cuda()
    put_stream, wait_stream = torch.cuda.Stream(), torch.cuda.Stream()
    put_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(put_stream):
        w = win.put(x, dst, me * k + 1, async_op)
        s = win.signal(dst, async_op)
    with torch.cuda.stream(wait_stream):
        win.wait_signal(src, async_op).wait()
        got = buf.clone()
    if async_op:
        w.wait()
        s.wait()
    wait_stream.synchronize()
    put_stream.synchronize()
    want = torch.full_like(got.cpu(), POISON)
    want[src * k + 1:(src + 1) * k + 1] = data(src, k, dtype, seed)
    assert torch.equal(got.cpu(), want), f"{dtype}: window after the put from rank {src}"
    c.barrier(False)
    return win


def case_ring_caching_allocator(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    for seed, (dtype, k, async_op) in enumerate(((torch.float32, 1031, False),
                                                 (torch.bfloat16, 70001, True),
                                                 (torch.float16, 5, True))):
        pad = torch.empty(777 + me, dtype=torch.uint8, device="cuda")  # window at an offset
        buf = torch.full((n * k + 2,), POISON, dtype=dtype, device="cuda")
        win = _ring(c, me, n, buf, k, dtype, seed, async_op)
        win.tensor_deregister()
        del pad


def case_ring_mem_allocator(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    pool = torch.cuda.MemPool(torchcomms.get_mem_allocator("cclx"))
    with torch.cuda.use_mem_pool(pool):
        buf = torch.full((n * 4099 + 2,), POISON, dtype=torch.float32, device="cuda")
    win = _ring(c, me, n, buf, 4099, torch.float32, 9, True)
    for r in range(n):
        assert win.get_attr(r).access_type == \
            torchcomms.TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED
        view = win.map_remote_tensor(r)
        assert view.device == buf.device and view.shape == buf.shape
        # rank r's window holds what rank r-1 put there, at rank r-1's offset
        q = (r - 1) % n
        assert torch.equal(view[q * 4099 + 1:(q + 1) * 4099 + 1].cpu(),
                           data(q, 4099, torch.float32, 9)), f"map_remote_tensor({r})"
        assert torch.all(view[:q * 4099 + 1].cpu() == POISON)
    c.barrier(False)
    win.tensor_deregister()
    del buf


def case_graph_replay(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    dst, src = (me + 1) % n, (me - 1) % n
    k = 333
    buf = torch.full((k,), POISON, device="cuda")
    win = c.new_window(buf)
    x = torch.empty(k, device="cuda")
    got = torch.empty(k, device="cuda")
    c.barrier(False)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            win.put(x, dst, 0, False)
            win.signal(dst, False)
            win.wait_signal(src, False)
            got.copy_(buf)
    torch.cuda.synchronize()
    for it in range(4):
        x.copy_(data(me, k, torch.float32, 40 + it).cuda())
        torch.cuda.synchronize()
        c.barrier(False)  # the peer has read its window from the last replay
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(got.cpu(), data(src, k, torch.float32, 40 + it)), f"replay {it}"
    c.barrier(False)
    win.tensor_deregister()


def case_refused_calls_change_nothing(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    dst = (me + 1) % n
    buf = torch.full((16,), POISON, device="cuda")
    win = c.new_window(buf)
    c.barrier(False)
    for fn, word in ((lambda: win.put(torch.ones(4), dst, 0, False), "put"),  # CPU source
                     (lambda: win.put(torch.ones(4, device="cuda"), dst, 13, False), "fit"),
                     (lambda: win.put(torch.ones(4, device="cuda", dtype=torch.float64), dst, 0,
                                      False), "dtype")):
        try:
            fn()
        except RuntimeError as e:
            assert word in str(e), str(e)
        else:
            raise AssertionError(f"no error ({word})")
    torch.cuda.synchronize()
    c.barrier(False)
    assert torch.all(buf.cpu() == POISON), "a refused put wrote into a window"
    win.tensor_deregister()
