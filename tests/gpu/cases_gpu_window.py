"""One-sided windows with torch CUDA tensors (2 processes; one GPU each when there are two,
else both on GPU 0, where CUDA IPC works between processes too): tensors of torch's caching
allocator (registered at an offset inside a segment), a ring of puts with signals on both put
paths, direct access, async Work, CUDA-graph replay of put / signal / wait_signal with fresh
data, a source that never signals, and the KV-transfer example."""
from __future__ import annotations

import os
import runpy

import torch

import cclx


def setup(ctx):
    n = torch.cuda.device_count()
    ctx.dev = torch.device("cuda", ctx.rank % n)
    torch.cuda.set_device(ctx.dev)
    ctx.comm = cclx.new_comm("cclx", ctx.dev, name="gwin", timeout=120)


def teardown(ctx):
    ctx.comm.finalize()


def _data(rank, k, n, dtype, dev):
    g = torch.Generator(device="cpu").manual_seed(rank * 7919 + k)
    return (torch.randn(n, generator=g) * 64).to(dtype).to(dev)


def case_ring_caching_allocator(ctx):
    c, r, n, dev = ctx.comm, ctx.rank, ctx.size, ctx.dev
    for dtype, count, path in ((torch.float32, 1031, "sm"), (torch.bfloat16, 70001, "ce"),
                               (torch.int8, 5, "auto"), (torch.float16, 1 << 20, "auto")):
        pad = torch.empty(1000 + r, dtype=torch.uint8, device=dev)  # the window sits at an offset
        buf = torch.full((n, count), -3, dtype=dtype, device=dev)
        win = c.new_window(buf)
        assert win.transport == "ipc" and win.get_size() == buf.numel() * buf.element_size()
        nxt, prv = (r + 1) % n, (r - 1) % n
        for k in range(5):
            win.put(_data(r, k, count, dtype, dev), nxt, r * count, False, {"put_path": path})
            win.signal(nxt)
            win.wait_signal(prv)
            assert torch.equal(buf[prv], _data(prv, k, count, dtype, dev)), (dtype, k)
            others = torch.cat([buf[b] for b in range(n) if b != prv])
            assert bool((others == -3).all()), (dtype, k)
            c.barrier()
        for q in range(n):
            unified = cclx.TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED
            assert win.get_attr(q).access_type == unified
            view = win.map_remote_tensor(q)
            assert view.shape == buf.shape and view.dtype == dtype and view.device == dev
            assert torch.equal(view[(q - 1) % n], _data((q - 1) % n, 4, count, dtype, dev))
        torch.cuda.synchronize()
        c.barrier()
        win.tensor_deregister()
        del pad


def case_async_two_streams(ctx):
    c, r, n, dev = ctx.comm, ctx.rank, ctx.size, ctx.dev
    buf = torch.zeros(n * 4096, device=dev)
    win = c.new_window(buf)
    put_stream, wait_stream = torch.cuda.Stream(), torch.cuda.Stream()
    nxt, prv = (r + 1) % n, (r - 1) % n
    for k in range(10):
        x = _data(r, k, 4096, torch.float32, dev)
        with torch.cuda.stream(put_stream):
            put_stream.wait_stream(torch.cuda.current_stream())
            win.put(x, nxt, r * 4096, async_op=True).wait()
            win.signal(nxt, async_op=True).wait()
        with torch.cuda.stream(wait_stream):
            w = win.wait_signal(prv, async_op=True)
            w.wait()
            got = buf[prv * 4096:(prv + 1) * 4096].clone()
        wait_stream.synchronize()
        assert w.is_completed()
        assert torch.equal(got, _data(prv, k, 4096, torch.float32, dev)), k
        torch.cuda.synchronize()
        c.barrier()
    torch.cuda.synchronize()
    win.tensor_deregister()


def case_graph_replay(ctx):
    c, r, n, dev = ctx.comm, ctx.rank, ctx.size, ctx.dev
    count = 3001
    buf = torch.zeros(n, count, device=dev)
    ack_buf = torch.zeros(1, device=dev)
    win, ack = c.new_window(buf), c.new_window(ack_buf)
    nxt, prv = (r + 1) % n, (r - 1) % n
    src = torch.zeros(count, device=dev)
    got = torch.zeros(count, device=dev)

    def round_():
        ack.wait_signal(nxt)                  # the next rank consumed the previous round
        win.put(src, nxt, r * count)
        win.signal(nxt)
        win.wait_signal(prv)
        got.copy_(buf[prv])
        ack.signal(prv)

    ack.signal(prv)                           # one acknowledgement in hand to start
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        round_()                              # warm-up round, eager
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        round_()
    for k in range(30):
        src.copy_(_data(r, k, count, torch.float32, dev))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(got, _data(prv, k, count, torch.float32, dev)), k
    ack.wait_signal(nxt)
    torch.cuda.synchronize()
    c.barrier()
    torch.cuda.synchronize()
    win.tensor_deregister()
    ack.tensor_deregister()
    del g


def case_kv_example(ctx):
    here = os.path.dirname(os.path.abspath(__file__))
    mod = runpy.run_path(os.path.join(here, "..", "..", "examples", "kv_transfer.py"))
    assert mod["main"](["--device", "cuda"], comm=ctx.comm) == 0


def case_silent_peer_times_out(ctx):
    r, n, dev = ctx.rank, ctx.size, ctx.dev
    c2 = cclx.new_comm("cclx", dev, name="gwin_timeout", timeout=120)
    buf = torch.zeros(256, device=dev)
    win = c2.new_window(buf)
    if r == 1:
        w = win.wait_signal(0, timeout=1.0)
        try:
            w.wait_blocking(30)  # the kernel gives up after 1 s; the host waits longer
        except cclx.CclxTimeoutError as e:
            assert "rank(s) 0" in str(e), str(e)
        else:
            raise AssertionError("no timeout")
        assert bool(torch.isnan(buf).all()), "the window was not poisoned"
    ctx.comm.barrier()
    torch.cuda.synchronize()
