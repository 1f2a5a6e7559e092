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


def case_tensor_register(ctx):
    """tensor_register / tensor_deregister: local, tracked; mistakes raise and change nothing;
    registered arrays still take part in collectives; finalize releases what is left."""
    import gc
    import weakref

    c = cclx.new_comm("cclx", "cpu", name="reg", timeout=30,
                      abort_process_on_timeout_or_error=False)
    E = cclx.CclxInvalidArgument
    rng = np.random.default_rng(1234 + ctx.rank)
    arrays = [rng.standard_normal(1001).astype(np.float32), rng.integers(-50, 50, 7, np.int64),
              rng.standard_normal(333).astype(np.float64)]
    for i, a in enumerate(arrays):
        c.tensor_register(a)
        assert c._c.registered_count == i + 1

    def raises(fn, word):
        before = c._c.registered_count
        try:
            fn()
        except E as e:
            assert word in str(e), f"message {str(e)!r} lacks {word!r}"
        else:
            raise AssertionError(f"no CclxInvalidArgument for the {word!r} case")
        assert c._c.registered_count == before

    raises(lambda: c.tensor_register(arrays[0]), "already registered")
    raises(lambda: c.tensor_register(arrays[0][:10]), "already registered")  # same start
    raises(lambda: c.tensor_deregister(np.ones(4, np.float32)), "no buffer")
    raises(lambda: c.tensor_deregister(arrays[0][:10]), "registered with")
    raises(lambda: c.tensor_register(np.ones(0, np.float32)), "empty")
    raises(lambda: c.tensor_register(np.ones(8, np.float32)[::2]), "contiguous")
    # Registered memory is ordinary memory to the collectives.
    x = arrays[2]
    c.all_reduce(x, cclx.ReduceOp.MAX)
    peers = [np.random.default_rng(1234 + r) for r in range(ctx.size)]
    ref = None
    for g in peers:
        g.standard_normal(1001)
        g.integers(-50, 50, 7, np.int64)
        v = g.standard_normal(333)
        ref = v if ref is None else np.maximum(ref, v)
    assert np.array_equal(x, ref), "all_reduce on a registered array"
    # The communicator keeps a registered array alive until it is deregistered.
    tmp = np.arange(17, dtype=np.int32)
    ref_tmp = weakref.ref(tmp)
    c.tensor_register(tmp)
    del tmp
    gc.collect()
    assert ref_tmp() is not None, "a registered array was freed"
    c.tensor_deregister(ref_tmp())
    gc.collect()
    assert ref_tmp() is None, "a deregistered array is still held"
    c.tensor_deregister(arrays[1])
    assert c._c.registered_count == 2
    # The allocator gives CUDA memory: a CPU communicator has none to give.
    for fn in (c.get_mem_allocator, lambda: c.mem_allocator):
        try:
            fn()
        except cclx.CclxUnsupportedError as e:
            assert "CPU communicator" in str(e)
        else:
            raise AssertionError("get_mem_allocator on a CPU communicator")
    try:
        cclx.get_mem_allocator("gloo")
    except E as e:
        assert "gloo" in str(e)
    else:
        raise AssertionError("get_mem_allocator accepted backend 'gloo'")
    if not cclx.build_info()["cuda"]:
        try:
            cclx.get_mem_allocator()
        except cclx.CclxUnsupportedError as e:
            assert "without CUDA" in str(e)
        else:
            raise AssertionError("get_mem_allocator in a build without CUDA")
    c.finalize()  # releases the two still registered
    assert c._c.registered_count == 0
    try:
        c.tensor_register(arrays[0])
    except cclx.CclxUsageError as e:
        assert "finalized" in str(e)
    else:
        raise AssertionError("tensor_register after finalize")


def case_comm_dump(ctx):
    """comm_dump(): counts, last ops, algorithms, a failure naming the missing rank, and the dump
    of an aborted comm; a refused call changes nothing."""
    c = cclx.new_comm("cclx", "cpu", name="dmp", timeout=30)
    d = c.comm_dump()
    assert d["rank"] == str(ctx.rank) and d["size"] == str(ctx.size), d
    assert d["name"] == "dmp" and d["backend"] == "cclx" and d["transport"] == "shm", d
    assert d["device"] == "cpu", d
    assert d["ops_issued"] == "0" and d["in_flight"] == "0" and d["last_op"] == "none", d
    assert d["failure"] == "none" and d["failure_ranks"] == "" and d["aborted"] == "false", d
    assert not any(k.startswith("algo.") for k in d), d
    rng = np.random.default_rng(7 + ctx.rank)
    x = rng.standard_normal(1001).astype(np.float32)
    want = sum(np.random.default_rng(7 + r).standard_normal(1001) for r in range(ctx.size))
    c.all_reduce(x)
    assert np.allclose(x, want, rtol=1e-5, atol=1e-5)
    out = np.full(ctx.size * 5, np.nan, np.float32)
    c.all_gather_single(out, np.full(5, ctx.rank, np.float32))
    assert (out == np.repeat(np.arange(ctx.size, dtype=np.float32), 5)).all(), out
    c.barrier()
    d = c.comm_dump()
    assert (d["ops_issued"], d["ops_completed"], d["ops_failed"], d["in_flight"]) == \
        ("3", "3", "0", "0"), d
    assert d["last_op"] == "barrier #3" and d["last_completed_op"] == "barrier #3", d
    assert d["in_flight_ops"] == "", d
    assert d["algo.all_reduce"] in ("flat", "lamport", "tree", "fp8", "fp8_oneshot"), d
    assert d["algo.all_gather"] in ("base", "fp8"), d
    try:  # refused before it runs: not counted
        c.all_reduce(np.zeros(4, np.float32), timeout=-1)
    except cclx.CclxError:
        pass
    else:
        raise AssertionError("a negative timeout was accepted")
    assert c.comm_dump()["ops_issued"] == "3"
    if ctx.rank != 0:  # rank 0 skips this barrier: the others time out naming it
        try:
            c.barrier(timeout=2)
        except TimeoutError:
            pass
        else:
            raise AssertionError("barrier without rank 0 did not time out")
        d = c.comm_dump()
        assert d["failure"].startswith("cclxTimeout") and "barrier #4" in d["failure"], d
        assert d["failure_ranks"] == "0", d
        assert (d["ops_issued"], d["ops_failed"], d["in_flight"]) == ("4", "1", "0"), d
        assert d["last_op"] == "barrier #4" and d["last_completed_op"] == "barrier #3", d
    ctx.comm.barrier()
    c.abort()
    d = c.comm_dump()
    assert d["aborted"] == "true" and d["rank"] == str(ctx.rank), d
    ctx.comm.barrier()
