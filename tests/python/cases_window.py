"""One-sided windows on CPU comms: torch tensors (storage moved to shared memory) and numpy
arrays from cclx.empty_shared; ring of puts with signals, many puts then one signal, edges and
out-of-bounds, size and dtype mismatches, a peer that never signals, re-registration, direct
access, async Work, and the KV-transfer example."""
from __future__ import annotations

import os
import runpy

import ml_dtypes
import numpy as np

import cclx

torch = None  # imported by setup() unless the run is numpy-only (CCLX_TEST_ONLY)


def setup(ctx):
    global torch
    only = os.environ.get("CCLX_TEST_ONLY", "")
    if not only or any(c not in ("ring_numpy_bf16_async",) for c in only.split(",")):
        import torch as t

        torch = t
    ctx.comm = cclx.new_comm("cclx", "cpu", name="win", timeout=60)


def _expect(exc, fn, *needles):
    try:
        fn()
    except exc as e:
        for n in needles:
            assert n in str(e), f"{n!r} not in: {e}"
        return str(e)
    raise AssertionError(f"no {exc.__name__}")


def _data(rank, k, n, dtype=None):
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(rank * 1000003 + k)
    return (torch.randn(n, generator=g) * 100).to(dtype)


def case_ring_torch(ctx):
    c, r, n = ctx.comm, ctx.rank, ctx.size
    count = 257
    buf = torch.full((n, count), -1.0)
    win = c.new_window(buf)
    assert buf.untyped_storage().is_shared()
    assert win.transport == "shm" and win.get_size() == n * count * 4
    assert win.shape == [n, count] and win.dtype == torch.float32
    nxt, prv = (r + 1) % n, (r - 1) % n
    for k in range(30):
        win.put(_data(r, k, count), nxt, r * count, async_op=False)
        win.signal(nxt)
        win.wait_signal(prv)
        assert torch.equal(buf[prv], _data(prv, k, count)), k
        for b in range(n):
            if b != prv:
                assert bool((buf[b] == -1.0).all()), (k, b)
        c.barrier()
    # Direct access: every peer's window as mapped here.
    for q in range(n):
        assert win.get_attr(q).access_type == cclx.TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED
        view = win.map_remote_tensor(q)
        assert view.shape == buf.shape and view.dtype == buf.dtype
        assert torch.equal(view[(q - 1) % n], _data((q - 1) % n, 29, count))
    assert win.map_remote_tensor(r) is buf
    c.barrier()
    win.tensor_deregister()
    assert win.get_size() == 0 and win.get_tensor() is None


def case_ring_numpy_bf16_async(ctx):
    c, r, n = ctx.comm, ctx.rank, ctx.size
    count = 1001
    bf16 = ml_dtypes.bfloat16
    buf = cclx.empty_shared((n * count,), bf16)
    win = c.new_window(buf)
    nxt, prv = (r + 1) % n, (r - 1) % n
    for k in range(10):
        src = ((np.arange(count) * (k + 3) + r * 11) % 251).astype(bf16)
        w = win.put(src, nxt, r * count, async_op=True)
        w.wait()
        assert w.is_completed()
        win.signal(nxt, async_op=True).wait()
        win.wait_signal(prv, True).wait()
        want = ((np.arange(count) * (k + 3) + prv * 11) % 251).astype(bf16)
        assert (buf[prv * count:(prv + 1) * count] == want).all(), k
        c.barrier()
    peer = win.map_remote_tensor(nxt)
    assert isinstance(peer, np.ndarray) and peer.shape == buf.shape
    win.tensor_deregister()


def case_many_puts_then_one_signal(ctx):
    c, r, n = ctx.comm, ctx.rank, ctx.size
    count = 50 * 31 + 7
    buf = torch.zeros(count, dtype=torch.float64)
    win = c.new_window(buf)
    full = _data(12, 0, count, torch.float64)
    if r == 0:
        starts = list(range(0, count, 31))
        for i in range(len(starts)):
            s = starts[(i * 16) % len(starts)]  # 16 and 51 are coprime: every piece once
            win.put(full[s:s + 31], 1, s)
        win.signal(1)
    elif r == 1:
        win.wait_signal(0)
        assert torch.equal(buf, full)
    c.barrier()
    win.tensor_deregister()


def case_edges_and_out_of_bounds(ctx):
    c, r, n = ctx.comm, ctx.rank, ctx.size
    count = 100
    buf = torch.full((count,), 7, dtype=torch.int32)
    win = c.new_window(buf)
    peer = (r + 1) % n
    v = torch.arange(1, count + 2, dtype=torch.int32)
    for cnt, off in ((count + 1, 0), (1, count), (2, count - 1)):
        _expect(cclx.CclxInvalidArgument, lambda: win.put(v[:cnt], peer, off), "do not fit")
    _expect(cclx.CclxInvalidArgument, lambda: win.put(v[:1], peer, -1), "target_offset_nelems")
    _expect(cclx.CclxInvalidArgument, lambda: win.put(v[:1], n, 0), "dst_rank")
    _expect(cclx.CclxInvalidArgument, lambda: win.signal(-1), "peer_rank")
    _expect(cclx.CclxInvalidArgument, lambda: win.put(v.double()[:1], peer, 0), "differs")
    c.barrier()
    assert bool((buf == 7).all()), f"a refused put wrote at {(buf != 7).nonzero().flatten()[:8]}"
    c.barrier()  # every rank checked before the valid puts below
    win.put(v[:1], peer, 0)
    win.put(v[1:2], peer, count - 1)
    win.put(v[:0], peer, count)
    win.signal(peer)
    win.wait_signal((r - 1) % n)
    assert int(buf[0]) == 1 and int(buf[count - 1]) == 2 and bool((buf[1:count - 1] == 7).all())
    c.barrier()
    win.tensor_deregister()


def case_size_mismatch(ctx):
    c, r, n = ctx.comm, ctx.rank, ctx.size
    win = c.new_window()
    t = torch.zeros(64 if r != n - 1 else 65)
    _expect(cclx.CclxInvalidArgument, lambda: win.tensor_register(t), f"rank {n - 1}: 65 x f32",
            "same size and dtype")
    assert win.get_size() == 0
    _expect(cclx.CclxUsageError, lambda: win.signal(0), "no registered buffer")
    win.tensor_register(torch.zeros(64))
    _expect(cclx.CclxUsageError, lambda: win.tensor_register(torch.zeros(64)), "already")
    win.tensor_deregister()


def case_private_numpy_refused(ctx):
    win = ctx.comm.new_window()
    _expect(cclx.CclxInvalidArgument, lambda: win.tensor_register(np.zeros(32, np.float32)),
            "empty_shared")


def case_reregister(ctx):
    c, r, n = ctx.comm, ctx.rank, ctx.size
    win = c.new_window()
    for k, (shape, dt) in enumerate((((4, 33), torch.float16), ((5,), torch.int64),
                                     ((2, 2, 9), torch.bfloat16))):
        buf = torch.zeros(shape, dtype=dt)
        win.tensor_register(buf)
        x = (torch.arange(buf.numel()) % 97 + r + k).to(dt)
        win.put(x, (r + 1) % n, 0)
        win.signal((r + 1) % n)
        win.wait_signal((r - 1) % n)
        want = (torch.arange(buf.numel()) % 97 + (r - 1) % n + k).to(dt)
        assert torch.equal(buf.flatten(), want), k
        c.barrier()
        win.tensor_deregister()


def case_timeout_names_silent_peer(ctx):
    r, n = ctx.rank, ctx.size
    c2 = cclx.new_comm("cclx", "cpu", name="win_timeout", timeout=60)
    buf = torch.zeros(128)
    win = c2.new_window(buf)
    if r == 1:
        msg = _expect(cclx.CclxTimeoutError, lambda: win.wait_signal(0, timeout=0.5), "[0]",
                      "wait_signal")
        assert bool(torch.isnan(buf).all()), "the window was not poisoned"
        _expect(cclx.CclxUsageError, lambda: win.signal(0), "unusable")
        del msg
    ctx.comm.barrier()  # on the healthy comm: rank 1 is done
    c2.finalize()


def case_closed_comm(ctx):
    c2 = cclx.new_comm("cclx", "cpu", name="win_closed", timeout=60)
    win = c2.new_window(torch.zeros(4))
    win.tensor_deregister()
    c2.finalize()
    _expect(cclx.CclxUsageError, lambda: c2.new_window(), "finalized")
    _expect(cclx.CclxUsageError, lambda: win.tensor_register(torch.zeros(4)), "finalized")


def case_device_window(ctx):
    """get_device_window on a CPU comm: the handle (host memory, the CPU twin), its fields, the
    same address again, counts above it and mismatched counts refused."""
    c, r, n = ctx.comm, ctx.rank, ctx.size
    buf = torch.zeros(4, 64)
    win = c.new_window()
    _expect(cclx.CclxUsageError, lambda: win.get_device_window(), "no registered buffer")
    win.tensor_register(buf)
    _expect(cclx.CclxInvalidArgument, lambda: win.get_device_window(2 + (r == n - 1)),
            "same counts", f"rank {n - 1}: 3 signals")
    h = win.get_device_window(signal_count=2, barrier_count=2)
    assert h != 0 and win.get_device_window(1, 0, 1) == h
    _expect(cclx.CclxInvalidArgument, lambda: win.get_device_window(3), "2 signals")
    info = win.get_device_window_info()
    assert info["rank"] == r and info["num_ranks"] == n and info["size"] == buf.numel() * 4
    assert info["base"] == buf.data_ptr()
    assert (info["signal_count"], info["counter_count"], info["barrier_count"]) == (2, n, 2)
    assert info["peers"][r] == buf.data_ptr() and len(info["resources"]) == n
    assert all(p != 0 for p in info["peers"] + info["resources"])
    c.barrier()
    win.tensor_deregister()
    _expect(cclx.CclxUsageError, lambda: win.get_device_window_info(), "has none")


def case_kv_example(ctx):
    here = os.path.dirname(os.path.abspath(__file__))
    mod = runpy.run_path(os.path.join(here, "..", "..", "examples", "kv_transfer.py"))
    assert mod["main"](["--device", "cpu"], comm=ctx.comm) == 0
