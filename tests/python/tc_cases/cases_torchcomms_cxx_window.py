"""One-sided windows through torchcomms on cclx's C++ backend, CPU comms (CclxWindow,
src/torchcomms/window.h): new_window, tensor_register (the storage moved into shared memory, its
views following), put at offsets with signal / wait_signal, map_remote_tensor and get_attr,
clone (copy.deepcopy), owning=False, errors that change nothing, deregistration. Data is fresh
random per rank; every byte a put must not touch is checked against its poison value. Run by
test_torchcomms_cxx.py on 3 processes."""
from __future__ import annotations

import copy
from datetime import timedelta

import torch
import torchcomms

POISON = -777


def data(r: int, n: int, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + r)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
    return torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int64).to(dtype)


def raises(fn, *words: str) -> None:
    try:
        fn()
    except RuntimeError as e:
        for w in words:
            assert w in str(e), f"{w!r} not in {e}"
        return
    raise AssertionError(f"no RuntimeError ({words})")


def setup(ctx):
    ctx.comm = torchcomms.new_comm("cclx", torch.device("cpu"), name="tc_win",
                                   timeout=timedelta(seconds=60),
                                   abort_process_on_timeout_or_error=False)


def teardown(ctx):
    ctx.comm.finalize()


def case_put_signal_each_dtype(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    dst, src = (me + 1) % n, (me - 1) % n
    k = 37  # odd: no vector-width luck
    for seed, dtype in enumerate((torch.float32, torch.bfloat16, torch.float64, torch.int64,
                                  torch.int8)):
        buf = torch.full((n * k + 3,), POISON if dtype != torch.int8 else -77, dtype=dtype)
        poison = buf[0].item()
        head = buf[: k]  # a view taken before registration follows the storage's move
        win = c.new_window()
        win.tensor_register(buf)
        assert win.get_size() == buf.numel() * buf.element_size(), win.get_size()
        c.barrier(False)
        x = data(me, k, dtype, seed)
        win.put(x, dst, me * k, False)
        win.signal(dst, False)
        win.wait_signal(src, False)
        want = torch.full_like(buf, poison)
        want[src * k:(src + 1) * k] = data(src, k, dtype, seed)
        assert torch.equal(buf, want), f"{dtype}: window after the put from {src}"
        assert torch.equal(head, buf[:k]), f"{dtype}: a view lost the registered storage"
        c.barrier(False)
        win.tensor_deregister()


def case_map_remote_and_attr(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    buf = data(me, 4 * 5, torch.float32, 11).reshape(4, 5)
    win = c.new_window(buf)
    c.barrier(False)
    for r in range(n):
        attr = win.get_attr(r)
        assert attr.access_type == torchcomms.TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED
        view = win.map_remote_tensor(r)
        assert view.shape == buf.shape and view.dtype == buf.dtype
        assert torch.equal(view, data(r, 20, torch.float32, 11).reshape(4, 5)), f"rank {r}"
    c.barrier(False)
    win.tensor_deregister()


def case_async_works_and_options(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    dst, src = (me + 1) % n, (me - 1) % n
    buf = torch.full((64,), float(POISON))
    win = c.new_window(buf)
    c.barrier(False)
    x = data(me, 16, torch.float32, 21)
    w = win.put(x, dst, 8, True, hints={"cclx.algo": "auto"}, timeout=timedelta(seconds=30))
    assert w.is_completed(), "a CPU put is complete when it returns"
    w.wait()
    win.signal(dst, True).wait()
    win.wait_signal(src, True, timeout=timedelta(seconds=30)).wait()
    assert torch.equal(buf[8:24], data(src, 16, torch.float32, 21))
    assert torch.all(buf[:8] == POISON) and torch.all(buf[24:] == POISON)
    c.barrier(False)
    win.tensor_deregister()


def case_errors_change_nothing(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    dst = (me + 1) % n
    # registration sizes that differ: every rank fails, nothing is registered
    win = c.new_window()
    bad = torch.zeros(10 + (1 if me == n - 1 else 0))
    raises(lambda: win.tensor_register(bad), "tensor_register", "same size")
    raises(lambda: win.put(torch.ones(2), dst, 0, False), "put", "no registered buffer")
    buf = torch.full((10,), float(POISON))
    win.tensor_register(buf)
    c.barrier(False)
    raises(lambda: win.put(torch.ones(2, dtype=torch.float64), dst, 0, False), "put", "dtype")
    raises(lambda: win.put(torch.ones(4), dst, 7, False), "put", "do not fit")
    raises(lambda: win.put(torch.ones(2), n, 0, False), "put")
    raises(lambda: win.map_remote_tensor(n), "map_remote_tensor")
    raises(lambda: win.get_attr(-1), "get_attr")
    c.barrier(False)
    assert torch.all(buf == POISON), "a refused put wrote into a window"
    raises(lambda: c.new_window(torch.ones(3, 3).t()), "contiguous")
    win.tensor_deregister()
    raises(lambda: win.signal(dst, False), "signal", "no registered buffer")
    raises(lambda: win.tensor_deregister(), "tensor_deregister")


def case_clone_and_owning(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    dst, src = (me + 1) % n, (me - 1) % n
    buf = data(me, 12, torch.float32, 31)
    win = c.new_window(buf)
    twin = copy.deepcopy(win)  # collective: a new window over a copy of the registered tensor
    t2 = twin.get_tensor()
    assert t2 is not None and torch.equal(t2, buf) and t2.data_ptr() != buf.data_ptr()
    c.barrier(False)
    twin.put(torch.full((12,), float(me)), dst, 0, False)
    twin.signal(dst, False)
    twin.wait_signal(src, False)
    assert torch.all(t2 == float(src)), "the clone's window did not receive the put"
    assert torch.equal(buf, data(me, 12, torch.float32, 31)), "a put to the clone reached the original"
    c.barrier(False)
    twin.tensor_deregister()
    win.tensor_deregister()
    # owning=False: no reference kept; this rank's map_remote_tensor is a view of the memory
    loose = torch.full((6,), float(me))
    w2 = c.new_window()
    w2.tensor_register(loose, owning=False)
    assert w2.get_tensor() is None
    mine = w2.map_remote_tensor(me)
    assert mine.data_ptr() == loose.data_ptr() and torch.all(mine == float(me))
    c.barrier(False)
    w2.tensor_deregister()
