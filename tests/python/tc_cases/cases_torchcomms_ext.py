"""cclx's torchcomms backend beyond torchcomms' generic API, on CPU, on the route the runner sets
(CCLX_TORCHCOMMS_ROUTE): comm_dump, set_config, the persistent all-gather, device_alltoallv_single and
reduce_scatter_quantized reached as torchcomm.get_backend_impl().<method> (as NCCLX's tests call
them), and torchcomms' profiler events (record_param_comms), torchcomms' own ProfilerTestBase
included. Run by test_torchcomms_backend.py (Python route) and test_torchcomms_cxx.py (C++
route) on 3 processes; needs torchcomms."""
from __future__ import annotations

import json
import os
import tempfile
import unittest
from datetime import timedelta

import torch
import torchcomms
from torchcomms import ReduceOp

import cclx
import cclx.torchcomms_backend as tb


def data(r: int, n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + r)
    return torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2


def setup(ctx):
    ctx.comm = torchcomms.new_comm("cclx", torch.device("cpu"), name="tc_ext",
                                   timeout=timedelta(seconds=60),
                                   abort_process_on_timeout_or_error=False)
    ctx.impl = ctx.comm.get_backend_impl()


def teardown(ctx):
    ctx.comm.finalize()


def case_route(ctx):
    assert tb.ROUTE == os.environ["CCLX_TORCHCOMMS_ROUTE"], tb.ROUTE
    if tb.ROUTE == "cxx":  # the C++ object, bound by cclx._cclx_torchcomms
        from cclx import _cclx_torchcomms as ext

        assert isinstance(ctx.impl, ext.CclxBackend), type(ctx.impl)
    else:
        assert isinstance(ctx.impl, tb.CclxBackend), type(ctx.impl)


def case_comm_dump(ctx):
    d0 = ctx.impl.comm_dump()
    assert isinstance(d0, dict) and all(isinstance(v, str) for v in d0.values()), d0
    assert d0["rank"] == str(ctx.rank) and d0["size"] == str(ctx.size), d0
    assert d0["failure"] == "none" and d0["in_flight"] == "0", d0
    x = data(ctx.rank, 257, 1).float()
    ctx.comm.all_reduce(x, ReduceOp.SUM, False)
    want = sum(data(r, 257, 1) for r in range(ctx.size))
    assert torch.allclose(x.double(), want, rtol=1e-5, atol=1e-5)
    d1 = ctx.impl.comm_dump()
    assert int(d1["ops_issued"]) == int(d0["ops_issued"]) + 1, (d0, d1)
    assert int(d1["ops_completed"]) == int(d0["ops_completed"]) + 1, (d0, d1)
    assert d1["last_op"].startswith("all_reduce #"), d1
    assert d1["algo.all_reduce"] in ("flat", "lamport", "tree", "fp8", "fp8_oneshot"), d1


def case_set_config(ctx):
    """NCCLX's set_config: cclx's hints merged into the comm's (the algorithm the next call runs
    follows them); an unknown key (NCCLX's ctran names), or a bad value, raises RuntimeError and
    changes nothing."""
    x = data(ctx.rank, 33, 2).float()
    want = sum(data(r, 33, 2) for r in range(ctx.size))
    for bad in ({"sendrecvAlgo": "orig"}, {"algo": "nonsense"},
                {"cclx::algo": "flat", "useCtran": "1"}):
        try:
            ctx.impl.set_config(bad)
        except RuntimeError as e:
            assert list(bad)[-1].split("::")[-1] in str(e) or "nonsense" in str(e), e
        else:
            raise AssertionError(f"set_config({bad}) was accepted")
    ctx.impl.set_config({"cclx::algo": "tree"})
    ctx.comm.all_reduce(x, ReduceOp.SUM, False)
    assert ctx.impl.comm_dump()["algo.all_reduce"] == "tree", ctx.impl.comm_dump()
    ctx.impl.set_config({"algo": "flat"})
    y = data(ctx.rank, 33, 2).float()
    ctx.comm.all_reduce(y, ReduceOp.SUM, False)
    assert ctx.impl.comm_dump()["algo.all_reduce"] == "flat", ctx.impl.comm_dump()
    assert torch.allclose(x.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.allclose(y.double(), want, rtol=1e-5, atol=1e-5)
    ctx.impl.set_config({"algo": "auto"})


def _p_calls(ctx):
    """(init, exec, free): torchcomms' own methods on the C++ route (they reach CclxBackend),
    the backend object's on the Python route (torchcomms routes none of them to Python)."""
    if tb.ROUTE == "cxx":
        c = ctx.comm
        return c.all_gather_p_init, c.all_gather_p_exec, c.all_gather_p_free
    i = ctx.impl
    return i.all_gather_p_init, i.all_gather_p_exec, i.all_gather_p_free


def case_all_gather_p(ctx):
    init, run, free = _p_calls(ctx)
    n = 37  # odd
    out = torch.full((n * ctx.size + 5,), float("nan"))  # larger than one execution needs
    h = init(out)
    for it in range(3):  # the same handle, fresh data each time
        x = data(ctx.rank, n, 10 + it).float()
        w = run(h, x, False)
        if w is not None:
            w.wait()
        want = torch.cat([data(r, n, 10 + it).float() for r in range(ctx.size)])
        assert torch.equal(out[:n * ctx.size], want), (it, out[:4], want[:4])
        assert torch.isnan(out[n * ctx.size:]).all()  # beyond: untouched
    # Bad input changes nothing: an input too large for the output, another dtype.
    before = out.clone()
    for bad in (torch.zeros(n * 2), torch.zeros(n, dtype=torch.float64)):
        try:
            run(h, bad, False)
        except (RuntimeError, cclx.CclxError):
            pass
        else:
            raise AssertionError(f"all_gather_p_exec accepted {bad.shape} {bad.dtype}")
    assert torch.equal(out.nan_to_num(7.0), before.nan_to_num(7.0)), out
    free(h)
    try:
        run(h, torch.zeros(n), False)
    except (RuntimeError, cclx.CclxError) as e:
        assert "free" in str(e) or "handle" in str(e), e
    else:
        raise AssertionError("all_gather_p_exec ran on a freed handle")


def _unsupported_or(fn, check):
    """Runs `fn`: where cclx's core does not run the collective yet, its error must say so
    (the call reached the core); otherwise `check` verifies the result."""
    try:
        fn()
    except (RuntimeError, cclx.CclxError) as e:
        assert "not implemented" in str(e) or "not available" in str(e), e
        return
    check()


def case_device_alltoallv_single(ctx):
    n = ctx.size
    send = [(ctx.rank + p) % 3 + 1 for p in range(n)]  # rows to rank p
    recv = [(p + ctx.rank) % 3 + 1 for p in range(n)]  # rows from rank p (= its send[rank])
    x = torch.cat([torch.full((send[p], 3), 100.0 * ctx.rank + p) for p in range(n)])
    out = torch.full((sum(recv), 3), float("nan"))
    ssz = torch.tensor(send, dtype=torch.int64)
    rsz = torch.tensor(recv, dtype=torch.int64)

    def check():
        want = torch.cat([torch.full((recv[p], 3), 100.0 * p + ctx.rank) for p in range(n)])
        assert torch.equal(out, want), out

    _unsupported_or(lambda: ctx.impl.device_alltoallv_single(out, x, rsz, ssz, False), check)


def case_reduce_scatter_quantized(ctx):
    n = 301
    x = data(ctx.rank, n * ctx.size, 5).float()
    out = torch.full((n,), float("nan"))
    seed = torch.tensor([42], dtype=torch.int64)

    def check():
        full = sum(data(r, n * ctx.size, 5) for r in range(ctx.size))
        want = full[ctx.rank * n:(ctx.rank + 1) * n]
        # bf16 on the wire: each contribution off by at most 2^-8 relative
        assert torch.allclose(out.double(), want, rtol=0, atol=ctx.size * 2.0 * 2 ** -7), out

    _unsupported_or(
        lambda: ctx.impl.reduce_scatter_quantized(out, x, ReduceOp.SUM, seed, False), check)


def _events(prof):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            return [e for e in json.load(f)["traceEvents"]
                    if e.get("name") == "record_param_comms"]
    finally:
        os.remove(path)


def case_profiler_events(ctx):
    """Every operation emits record_param_comms; with torchcomms' TracingGuard (C++ route, or
    the Python route where cclx._cclx_torchcomms is built) the args name the collective and the
    group, as NCCLX's do."""
    x = torch.ones(8)
    lst = [torch.zeros(8) for _ in range(ctx.size)]
    with torch.profiler.profile() as prof:
        ctx.comm.all_reduce(x, ReduceOp.SUM, False)
        ctx.comm.all_gather(lst, x, False)
        ctx.comm.broadcast(x, 0, False)
        ctx.comm.barrier(False)
    ev = _events(prof)
    assert len(ev) >= 4, [e.get("args") for e in ev]
    if tb.ROUTE == "cxx" or tb._ext() is not None:
        names = [e["args"].get("Collective name") for e in ev]
        for want in ("all_reduce", "all_gather", "broadcast", "barrier"):
            assert names.count(want) == 1, names
        for e in ev:
            assert e["args"]["Process Group Name"] == "tc_ext", e["args"]
            assert e["args"]["Group size"] == ctx.size, e["args"]


def _validate(per_coll):
    for name in ("barrier", "send", "recv", "all_reduce", "reduce", "all_gather_single",
                 "all_gather", "gather", "reduce_scatter", "reduce_scatter_single", "scatter",
                 "all_to_all", "all_to_all_single", "all_to_all_v_single", "broadcast"):
        assert len(per_coll[name]) == 1, (name, {k: len(v) for k, v in per_coll.items()})
    if tb.ROUTE == "cxx":  # the barrier's work.wait() (the Python route returns no work)
        assert len(per_coll["wait"]) == 1, {k: len(v) for k, v in per_coll.items()}


def case_torchcomms_profiler_test_base(ctx):
    """torchcomms' generic ProfilerTestBase with backend "cclx" (its collectives on every rank,
    its checks of the events on rank 0, cclx's counts as NCCLX's ProfilerTest checks them)."""
    if tb.ROUTE != "cxx" and tb._ext() is None:
        return "skipped: the Python route without cclx._cclx_torchcomms has no event args"
    try:
        from torchcomms.tests.integration.helpers.ProfilerTest import ProfilerTestBase
    except ImportError as e:
        return f"skipped: torchcomms' test helpers are not installed ({e})"

    class CclxProfilerTest(ProfilerTestBase):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, backend="cclx", device=torch.device("cpu"),
                             validation_func=_validate, **kwargs)

    result = unittest.TextTestRunner(verbosity=0).run(
        CclxProfilerTest(methodName="test_all_operations"))
    assert result.wasSuccessful(), [str(f[1]) for f in result.failures + result.errors]
