"""Hooks (pre, post, abort; order, arguments, remove()), cclx.hooks (flight recorder, NaN check)
and the communicator settings (rank/size, set_timeout, set_hints, get_options,
get_backend_version, is_aborted). Run by test_hooks.py on 4 processes."""
from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

import cclx
from cclx.hooks import FlightRecorderHook, NanCheckError, NanCheckHook
from refs import gen, np_dtype

OpName = cclx.OpName


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="hooks", timeout=60,
                           abort_process_on_timeout_or_error=False)


def teardown(ctx):
    ctx.comm.finalize()


def _expect(exc, fn, word=""):
    try:
        fn()
    except exc as e:
        assert word.lower() in str(e).lower(), f"{str(e)!r} lacks {word!r}"
        return e
    raise AssertionError(f"no {exc.__name__} ({word})")


def case_properties_and_settings(ctx):
    c = ctx.comm
    assert c.rank == ctx.rank and c.size == ctx.size
    _expect(AttributeError, lambda: setattr(c, "rank", 0))
    _expect(AttributeError, lambda: setattr(c, "size", 9))
    o = c.get_options()
    assert o.name == "hooks" and o.backend == "cclx" and o.timeout.total_seconds() == 60
    assert o.hints == {} and o.enable_reconfigure is False
    assert o.abort_process_on_timeout_or_error is False
    v = c.get_backend_version()
    assert v.startswith("cclx " + cclx.__version__), v
    # Hints: the comm's, replaced by set_hints, overridden per call.
    c.set_hints({"algo": "tree"})
    assert c.get_options().hints == {"algo": "tree"}
    assert c.get_algo(100, cclx.DataType.f32) == "tree"
    c.set_hints({"algo": "flat"})
    assert c.get_algo(1 << 22, cclx.DataType.f32) == "flat"
    assert c.get_algo(1 << 22, cclx.DataType.f32, hints={"algo": "tree"}) == "tree"
    c.set_hints(None)
    assert c.get_options().hints == {}
    # A bad key or value is refused at once and changes nothing (set_hints and set_config).
    c.set_hints({"algo": "flat"})
    _expect(cclx.CclxInvalidArgument, lambda: c.set_hints({"algo": "nonsense"}), "nonsense")
    _expect(cclx.CclxInvalidArgument, lambda: c.set_hints({"no_such_hint": "1"}), "no_such_hint")
    _expect(cclx.CclxInvalidArgument,
            lambda: c.set_config({"low_precision": "fp8", "algo": "nonsense"}), "nonsense")
    assert c.get_options().hints == {"algo": "flat"}
    # set_config sets the keys it names and keeps the others.
    c.set_config({"low_precision": "fp8"})
    assert c.get_options().hints == {"algo": "flat", "low_precision": "fp8"}
    c.set_config({"algo": "tree"})
    assert c.get_options().hints == {"algo": "tree", "low_precision": "fp8"}
    c.set_hints({})
    x = np.ones(4, np.float32)
    c.all_reduce(x)
    assert (x == ctx.size).all()
    _expect(cclx.CclxInvalidArgument, lambda: c.set_timeout(0), "positive")
    # set_timeout: a barrier rank 0 never joins fails after the new timeout, naming rank 0.
    t = cclx.new_comm("cclx", "cpu", name="settimeout", timeout=600,
                           abort_process_on_timeout_or_error=False)
    t.set_timeout(1.5)
    assert abs(t.get_options().timeout.total_seconds() - 1.5) < 1e-9
    if ctx.rank != 0:
        t0 = time.time()
        e = _expect(cclx.CclxTimeoutError, lambda: t.barrier(), "did not arrive")
        assert "[0]" in str(e), e
        assert 1.4 <= time.time() - t0 < 20, time.time() - t0
    c.barrier()
    assert not t.is_aborted()
    t.abort()
    assert t.is_aborted()
    c.barrier()


def case_hooks_order_args_and_remove(ctx):
    c, n, me = ctx.comm, ctx.size, ctx.rank
    calls = []
    ha = c.register_pre_hook(lambda name, op_id, args: calls.append(("A", name, op_id, args)))
    hb = c.register_pre_hook(lambda name, op_id, args: calls.append(("B", name, op_id, args)))
    hp = c.register_post_hook(lambda op_id, args: calls.append(("P", args.name, op_id, args)))
    x = np.full(8, me, np.float32)
    w = c.all_reduce(x, cclx.ReduceOp.MAX)
    assert [k[0] for k in calls] == ["A", "B", "P"], calls
    assert all(k[1] is OpName.all_reduce for k in calls)
    assert calls[0][2] == calls[1][2] == calls[2][2]
    pre = calls[0][3]
    assert pre.tensor is x and pre.op is cclx.ReduceOp.MAX and pre.async_op is False
    assert calls[2][3].work is w and calls[2][3].error is None
    first_id = calls[0][2]
    ha.remove()
    ha.remove()  # idempotent
    calls.clear()
    c.barrier()
    assert [k[0] for k in calls] == ["B", "P"] and calls[0][1] is OpName.barrier
    assert calls[0][2] > first_id
    # A failing call: pre-hook, then post-hook with the error, then the exception.
    calls.clear()
    _expect(cclx.CclxInvalidArgument, lambda: c.broadcast(x, n))
    assert [k[0] for k in calls] == ["B", "P"]
    assert isinstance(calls[1][3].error, cclx.CclxInvalidArgument) and calls[1][3].work is None
    # A pre-hook that raises stops the call before it runs.
    hr = c.register_pre_hook(lambda *a: (_ for _ in ()).throw(KeyError("stop")))
    y = np.full(3, 7.0, np.float32)
    _expect(KeyError, lambda: c.all_reduce(y), "stop")
    assert (y == 7.0).all()
    hr.remove()
    hb.remove()
    hp.remove()
    assert c._hooks is None  # back to the hook-free path
    calls.clear()
    c.barrier()
    assert calls == []


def _every_op(c, n, me):
    """Runs every operation once (point to point between rank pairs); returns the comm made by
    split."""
    a = np.arange(4 * n, dtype=np.float32) + me
    b = np.empty(4 * n, np.float32)
    peer = me ^ 1
    if me % 2 == 0:
        c.send(a[:4], peer)
        c.recv(b[:4], peer)
    else:
        c.recv(b[:4], peer)
        c.send(a[:4], peer)
    c.broadcast(a[:4], 0)
    c.all_reduce(a[:4])
    c.reduce(a[:4], 0)
    c.all_gather([np.empty(4, np.float32) for _ in range(n)], a[:4])
    c.all_gather_v([np.empty(r + 1, np.float32) for r in range(n)], a[:me + 1])
    c.all_gather_single(b, a[:4])
    c.reduce_scatter(b[:4], [a[:4]] * n)
    c.reduce_scatter_v(b[:me + 1], [a[:r + 1] for r in range(n)])
    c.reduce_scatter_single(b[:4], a)
    c.all_to_all_single(b, a)
    c.all_to_all_v_single(b, a, [4] * n, [4] * n)
    c.all_to_all([np.empty(2, np.float32) for _ in range(n)], [a[:2] for _ in range(n)])
    c.barrier()
    c.scatter(b[:4], [a[:4]] * n if me == 1 else [], 1)
    c.gather([np.empty(4, np.float32) for _ in range(n)] if me == 2 else [], a[:4], 2)
    c.gather_single(b if me == 0 else None, a[:4], 0)
    bt = c.batch_op_create()
    bt.send(a[:3], (me + 1) % n)
    bt.recv(b[:3], (me - 1) % n)
    bt.issue()
    return c.split(list(range(n)), "sub")


def case_every_op_fires_hooks(ctx):
    c = cclx.new_comm("cclx", "cpu", name="allops", timeout=60,
                           abort_process_on_timeout_or_error=False)
    n, me = ctx.size, ctx.rank
    seen = []
    c.register_pre_hook(lambda name, op_id, args: seen.append((name, op_id, args)))
    posts = {}
    c.register_post_hook(lambda op_id, args: posts.__setitem__(op_id, args))
    sub = _every_op(c, n, me)
    c.finalize()
    names = [s[0] for s in seen]
    want = [OpName.send, OpName.recv] if me % 2 == 0 else [OpName.recv, OpName.send]
    want += [OpName.broadcast, OpName.all_reduce, OpName.reduce, OpName.all_gather,
             OpName.all_gather_v, OpName.all_gather_single, OpName.reduce_scatter,
             OpName.reduce_scatter_v, OpName.reduce_scatter_single, OpName.all_to_all_single,
             OpName.all_to_all_v_single, OpName.all_to_all, OpName.barrier, OpName.scatter,
             OpName.gather, OpName.gather_single, OpName.batch_op_issue, OpName.split,
             OpName.finalize]
    assert names == want, names
    ids = [s[1] for s in seen]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert set(posts) == set(ids), "a post-hook is missing"
    args = {s[0]: s[2] for s in seen}
    assert args[OpName.send].peer == (me ^ 1) and args[OpName.recv].peer == (me ^ 1)
    assert args[OpName.scatter].root == 1 and args[OpName.scatter].output is not None
    assert len(args[OpName.gather].output) == (n if me == 2 else 0)
    assert args[OpName.all_gather_v].input.shape == (me + 1,)
    assert len(args[OpName.all_gather_v].output) == n
    assert len(args[OpName.reduce_scatter_v].input) == n
    assert len(args[OpName.all_to_all].input) == n and len(args[OpName.all_to_all].output) == n
    assert args[OpName.all_to_all_v_single].input_split_sizes == [4] * n
    assert args[OpName.batch_op_issue].num_ops == 2
    assert args[OpName.split].ranks == list(range(n)) and args[OpName.split].name == "sub"
    split_post = posts[seen[names.index(OpName.split)][1]]
    assert split_post.new_comm is sub and split_post.work is None
    assert posts[seen[names.index(OpName.barrier)][1]].work is not None
    sub.finalize()


def case_abort_hooks(ctx):
    c = cclx.new_comm("cclx", "cpu", name="aborthooks", timeout=60,
                           abort_process_on_timeout_or_error=False)
    ran = []
    c.register_abort_hook(lambda: ran.append("first"))
    c.register_abort_hook(lambda: (_ for _ in ()).throw(RuntimeError("hook failure")))
    h = c.register_abort_hook(lambda: ran.append("removed"))
    c.register_abort_hook(lambda: ran.append(("last", c._abort_reason)))
    h.remove()
    c._run_abort_hooks("rank 3 never arrived")
    assert ran == ["first", ("last", "rank 3 never arrived")], ran
    c._run_abort_hooks("again")  # once per communicator
    assert len(ran) == 2
    _expect(TypeError, lambda: c.register_abort_hook(42))
    _expect(TypeError, lambda: c.register_pre_hook(None))
    c.abort()
    ctx.comm.barrier()


def case_flight_recorder(ctx):
    n, me = ctx.size, ctx.rank
    c = cclx.new_comm("cclx", "cpu", name="fr", timeout=60,
                           abort_process_on_timeout_or_error=False)
    path = os.path.join(tempfile.gettempdir(), f"cclx_fr_test_{os.getpid()}_{{rank}}.json")
    fr = FlightRecorderHook(max_entries=6, dump_path=path)
    fr.register_with_comm(c)
    assert fr.is_enabled()
    x = np.ones(256, np.float32)  # 1 KiB
    c.all_reduce(x)
    c.all_gather_v([np.empty(r + 1, np.float64) for r in range(n)], np.ones(me + 1))
    bt = c.batch_op_create()
    bt.send(x, (me + 1) % n)
    bt.recv(np.empty(256, np.float32), (me - 1) % n)
    bt.issue(True).wait()
    e = fr.entries()
    assert [d["profiling_name"] for d in e] == ["cclx:all_reduce", "cclx:all_gather_v",
                                                 "cclx:batch_op_issue"], e
    ar = e[0]
    assert ar["state"] == "completed" and ar["algorithm"] == c.get_algo(256, cclx.DataType.f32)
    assert ar["input_sizes"] == [[256]] and ar["input_dtypes"] == ["float32"]
    assert ar["output_sizes"] == [[256]] and ar["timeout_ms"] == 60000.0
    assert ar["duration_ms"] is not None and ar["duration_ms"] >= 0
    assert e[1]["output_sizes"] == [[r + 1] for r in range(n)] and e[1]["algorithm"] is None
    assert e[2]["async_op"] is True and e[2]["input_sizes"] == [[256]]
    assert e[0]["op_id"] < e[1]["op_id"] < e[2]["op_id"]
    # A failing call (bad root) is recorded as failed, with the error.
    _expect(cclx.CclxInvalidArgument, lambda: c.scatter(x, [x] * n, n))
    bad = fr.entries()[-1]
    assert bad["profiling_name"] == "cclx:scatter" and bad["state"] == "failed", bad
    assert "CclxInvalidArgument" in bad["error"] and "root" in bad["error"], bad
    # The ring keeps the last 6.
    for _ in range(5):
        c.barrier()
    e = fr.entries()
    assert fr.size() == 6 and len(e) == 6 and e[0]["profiling_name"] == "cclx:scatter"
    assert [d["profiling_name"] for d in e[1:]] == ["cclx:barrier"] * 5
    assert fr.entries(include_completed=False) == [bad]
    # A timeout on a comm rank 0 does not join: failed, naming rank 0.
    t = cclx.new_comm("cclx", "cpu", name="frt", timeout=60,
                           abort_process_on_timeout_or_error=False)
    fr.register_with_comm(t)
    if me != 0:
        _expect(cclx.CclxTimeoutError, lambda: t.barrier(timeout=1.5))
        last = fr.entries()[-1]
        assert last["comm"] == "frt" and last["state"] == "failed" and last["timeout_ms"] == 1500.0
        assert "CclxTimeoutError" in last["error"] and "[0]" in last["error"], last
    ctx.comm.barrier()
    # JSON on demand, and on abort (the abort hooks write dump_path).
    doc = json.loads(fr.dump_json())
    assert doc["version"] == "cclx-fr-1" and {m["name"] for m in doc["comms"]} == {"fr", "frt"}
    assert len(doc["entries"]) == fr.size()
    want = path.format(rank=me)
    if os.path.exists(want):
        os.remove(want)
    t._run_abort_hooks("test: rank 0 did not arrive")
    with open(want) as f:
        dumped = json.load(f)
    os.remove(want)
    assert dumped["abort_reason"] == "test: rank 0 did not arrive"
    assert [d["record_id"] for d in dumped["entries"]] == [d["record_id"] for d in fr.entries()]
    fr.reset()
    assert fr.size() == 0
    fr.unregister()
    assert not fr.is_enabled() and c._hooks is None
    c.barrier()
    assert fr.size() == 0
    t.abort()
    c.finalize()


def case_nan_check(ctx):
    c, n = ctx.comm, ctx.size
    # Off by default: a NaN goes through.
    x = np.ones(16, np.float32)
    x[3] = np.nan
    c.all_reduce(x)
    assert np.isnan(x[3]) and x[0] == n
    nc = NanCheckHook()
    h = nc.register_with_comm(c)
    assert nc.is_enabled()
    # Every rank holds a NaN: every rank raises before the collective, which never runs.
    x = np.full(16, 2.0, np.float32)
    x[5] = np.nan
    e = _expect(NanCheckError, lambda: c.all_reduce(x), "NaN")
    assert "index 5" in str(e) and "all_reduce" in str(e), e
    assert x[0] == 2.0
    x[5] = np.inf
    _expect(NanCheckError, lambda: c.all_reduce(x), "NaN/Inf")
    ins = [np.ones(r + 1, np.float64) for r in range(n)]
    ins[n - 1][-1] = -np.inf
    e = _expect(NanCheckError, lambda: c.reduce_scatter_v(np.empty(ctx.rank + 1), ins))
    assert f"input tensor {n - 1}" in str(e), e
    if np_dtype("bf16") is not None:
        b = np.ones(8, np_dtype("bf16"))
        b[7] = np.nan
        _expect(NanCheckError, lambda: c.broadcast(b, 0))
    bt = c.batch_op_create()
    bt.send(np.array([np.nan], np.float32), (ctx.rank + 1) % n)
    bt.recv(np.empty(1, np.float32), (ctx.rank - 1) % n)
    _expect(NanCheckError, lambda: bt.issue())
    # Clean inputs and integers pass; Inf passes when only NaN is checked.
    y = gen("f32", (33,), ctx.rank, 5)
    c.all_reduce(y)
    c.all_reduce(np.full(4, 3, np.int32))
    h.remove()
    h2 = NanCheckHook(check_inf=False).register_with_comm(c)
    z = np.ones(4, np.float64)
    z[0] = np.inf
    c.all_reduce(z)
    assert np.isinf(z[0]) and z[1] == n
    h2.remove()
    assert c._hooks is None
