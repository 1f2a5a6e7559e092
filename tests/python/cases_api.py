"""API cases on fresh communicators: split, finalize, abort, stores, timeouts, errors."""
from __future__ import annotations

import datetime
import os
import time

import numpy as np

import cclx


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="api", timeout=60)


def case_getters(ctx):
    c = ctx.comm
    assert c.get_rank() == ctx.rank and c.get_size() == ctx.size
    assert c.get_name() == "api"
    assert c.get_backend() == "cclx"
    assert str(c.get_device()) == "cpu"
    assert "api" in repr(c)


def case_split(ctx):
    n = ctx.size
    ranks = list(range(n - 1, -1, -2))  # reversed, every other rank: renumbered in list order
    sub = ctx.comm.split(ranks, "odd")
    if ctx.rank in ranks:
        assert sub is not None
        assert sub.get_size() == len(ranks)
        assert sub.get_rank() == ranks.index(ctx.rank)
        x = np.full(33, ctx.rank + 1, np.int64)
        sub.all_reduce(x)
        assert (x == sum(r + 1 for r in ranks)).all(), x
        sub.finalize()
    else:
        assert sub is None
    # The parent still works after the split.
    y = np.full(3, 1.0, np.float64)
    ctx.comm.all_reduce(y)
    assert (y == n).all()


def case_finalize_then_use(ctx):
    c = cclx.new_comm("cclx", "cpu", name="fin", timeout=30)
    x = np.ones(8, np.float32)
    c.all_reduce(x)
    c.finalize()
    assert c.get_rank() == ctx.rank
    for fn in (lambda: c.all_reduce(x), lambda: c.barrier(), lambda: c.finalize(),
               lambda: c.split([0], "s")):
        try:
            fn()
        except cclx.CclxUsageError as e:
            assert "finalized" in str(e) and isinstance(e, cclx.CclxError)
        else:
            raise AssertionError("no CclxUsageError after finalize")
    ctx.comm.barrier()


def case_abort_then_use(ctx):
    c = cclx.new_comm("cclx", "cpu", name="abt", timeout=30)
    c.barrier()
    c.abort()
    c.abort()  # idempotent
    try:
        c.all_reduce(np.ones(4, np.float32))
    except cclx.CclxUsageError as e:
        assert "aborted" in str(e)
    else:
        raise AssertionError("no CclxUsageError after abort")
    ctx.comm.barrier()


def case_timeout_names_missing_rank(ctx):
    """Rank 0 skips a barrier: the others get CclxTimeoutError (also a TimeoutError)."""
    c = cclx.new_comm("cclx", "cpu", name="tmo", timeout=datetime.timedelta(seconds=30))
    if ctx.rank != 0:
        t0 = time.time()
        try:
            c.barrier(timeout=2)
        except TimeoutError as e:
            assert isinstance(e, cclx.CclxTimeoutError) and e.code == int(cclx.Result.Timeout)
        else:
            raise AssertionError("barrier without rank 0 did not time out")
        assert time.time() - t0 < 20
    # Rank 0 keeps `c` alive until the others have seen their timeout, then all abort it.
    ctx.comm.barrier()
    c.abort()
    ctx.comm.barrier()


def case_explicit_store(ctx):
    # Rank 0 serves on a free port and tells the others which one through ctx.comm.
    server = cclx.TcpStore("127.0.0.1", 0, True, "explicit", 30.0) if ctx.rank == 0 else None
    port = np.array([server.port if server else 0], np.int64)
    ctx.comm.broadcast(port, 0)
    store = server or cclx.TcpStore("127.0.0.1", int(port[0]), False, "explicit", 30.0)
    store.set(f"k{ctx.rank}", f"v{ctx.rank}".encode())
    store.wait([f"k{r}" for r in range(ctx.size)], 30.0)
    assert store.get(f"k{(ctx.rank + 1) % ctx.size}") == f"v{(ctx.rank + 1) % ctx.size}".encode()
    assert store.check("k0") and not store.check("nope")
    assert 1 <= store.add("counter", 1) <= ctx.size
    c = cclx.new_comm("cclx", "cpu", name="st", store=store, timeout=30)
    x = np.full(5, 2.0, np.float32)
    c.all_reduce(x, cclx.ReduceOp.PRODUCT)
    assert (x == 2.0 ** ctx.size).all()
    c.finalize()
    ctx.comm.barrier()  # the server (rank 0) outlives the clients' use


def case_two_comms_same_name(ctx):
    a = cclx.new_comm("cclx", "cpu", name="dup", timeout=30)
    b = cclx.new_comm("cclx", "cpu", name="dup", timeout=30)
    x = np.ones(4, np.int32)
    y = np.full(4, 3, np.int32)
    a.all_reduce(x)
    b.all_reduce(y, cclx.ReduceOp.MAX)
    assert (x == ctx.size).all() and (y == 3).all()
    a.finalize()
    b.finalize()


def case_example_program(ctx):
    import runpy

    here = os.path.dirname(os.path.abspath(__file__))
    runpy.run_path(os.path.join(here, "..", "..", "examples", "hello_cpu.py"),
                   run_name="__main__")
