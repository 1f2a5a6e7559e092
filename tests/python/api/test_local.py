"""Single-process tests: types, errors, argument checking on a 1-rank communicator, stores."""
import datetime

import numpy as np
import pytest

import cclx
from refs import gen, np_dtype


@pytest.fixture(scope="module")
def comm(monkeypatch_module):
    c = cclx.new_comm("cclx", "cpu", name="local", timeout=30)
    yield c
    c.finalize()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    for k in ("RANK", "WORLD_SIZE", "TORCHCOMM_RANK", "TORCHCOMM_SIZE", "MASTER_ADDR",
              "MASTER_PORT", "LOCAL_RANK"):
        mp.delenv(k, raising=False)
    yield mp
    mp.undo()


def test_reduce_ops():
    R = cclx.ReduceOp
    assert R.SUM.type == cclx.RedOpType.SUM and R.SUM.factor == 1.0
    p = R.PREMUL_SUM(0.5)
    assert p.type == cclx.RedOpType.PREMUL_SUM and p.factor == 0.5
    assert p == R.PREMUL_SUM(0.5) and p != R.PREMUL_SUM(2.0) and R.MAX != R.MIN
    assert repr(R.BXOR) == "ReduceOp.BXOR" and "PREMUL_SUM" in repr(p)
    for name in ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"):
        assert getattr(R, name).type == getattr(cclx.RedOpType, name)
    with pytest.raises(cclx.CclxInvalidArgument):
        R.PREMUL_SUM(float("nan"))


def test_exception_hierarchy():
    assert issubclass(cclx.CclxTimeoutError, TimeoutError)
    assert issubclass(cclx.CclxTimeoutError, cclx.CclxError)
    assert issubclass(cclx.CclxInvalidArgument, ValueError)
    assert issubclass(cclx.CclxUsageError, cclx.CclxError)
    assert issubclass(cclx.CclxError, RuntimeError)
    assert cclx.CclxTimeoutError.code == int(cclx.Result.Timeout)
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        cclx._C.dtype_from_name("nope")
    assert e.value.code == int(cclx.Result.InvalidArgument) and "nope" in str(e.value)


def test_dtype_of():
    D = cclx.DataType
    assert cclx.dtype_of(np.zeros(2, np.float32)) == D.f32
    assert cclx.dtype_of(np.zeros(2, np.uint8)) == D.u8
    assert cclx.dtype_of(np.zeros(2, np.int64)) == D.i64
    if np_dtype("bf16") is not None:
        assert cclx.dtype_of(np.zeros(2, np_dtype("bf16"))) == D.bf16
        assert cclx.dtype_of(np.zeros(2, np_dtype("fp8_e5m2"))) == D.fp8_e5m2
    with pytest.raises(cclx.CclxInvalidArgument, match="not supported"):
        cclx.dtype_of(np.zeros(2, np.bool_))


def test_new_comm_bad_arguments(monkeypatch_module):
    with pytest.raises(cclx.CclxInvalidArgument, match="backend"):
        cclx.new_comm("gloo", "cpu")
    for dev in ("tpu", "cuda:x", "cpu:3", 7):
        with pytest.raises(cclx.CclxInvalidArgument):
            cclx.new_comm("cclx", dev)
    with pytest.raises(cclx.CclxInvalidArgument, match="timeout"):
        cclx.new_comm("cclx", "cpu", timeout="soon")
    with pytest.raises(cclx.CclxInvalidArgument, match="store"):
        cclx.new_comm("cclx", "cpu", store=42)
    monkeypatch_module.setenv("RANK", "3")
    monkeypatch_module.setenv("WORLD_SIZE", "2")
    with pytest.raises(cclx.CclxInvalidArgument, match="rank"):
        cclx.new_comm("cclx", "cpu")
    monkeypatch_module.delenv("RANK")
    monkeypatch_module.delenv("WORLD_SIZE")


def test_single_rank_collectives(comm):
    assert comm.get_rank() == 0 and comm.get_size() == 1
    for dtype in ("f32", "f16", "i32", "u8"):
        x = gen(dtype, (37,), 0, 5)
        y = x.copy()
        w = comm.all_reduce(y, cclx.ReduceOp.SUM, async_op=True)
        w.wait()
        assert w.is_completed() and (y == x).all()
        out = np.empty_like(x)
        comm.all_gather_single(out, x)
        assert (out == x).all()
    w = comm.barrier(async_op=True)
    w.wait_blocking(timeout=datetime.timedelta(seconds=5))


def test_argument_errors_write_nothing(comm):
    x = np.arange(1, 11, dtype=np.float32)
    out = np.full(12, -5.0, np.float32)
    with pytest.raises(cclx.CclxInvalidArgument, match="output has 12 elements, expected 10"):
        comm.all_reduce(x, output=out)
    assert (out == -5.0).all() and (x == np.arange(1, 11)).all()
    with pytest.raises(cclx.CclxInvalidArgument, match="contiguous"):
        comm.all_reduce(np.ones((6, 6), np.float32).T)
    with pytest.raises(cclx.CclxInvalidArgument, match="BOR is not supported for dtype f16"):
        comm.all_reduce(np.ones(3, np.float16), cclx.ReduceOp.BOR)
    with pytest.raises(cclx.CclxInvalidArgument, match="root 1 is out of range"):
        comm.broadcast(x, 1)
    with pytest.raises(cclx.CclxInvalidArgument, match="differs"):
        comm.all_gather_single(np.ones(10, np.float64), x)
    with pytest.raises(cclx.CclxInvalidArgument, match="split_sizes"):
        comm.all_to_all_v_single(np.ones(4, np.float32), np.ones(4, np.float32), [3], [4])
    with pytest.raises(cclx.CclxInvalidArgument, match="hints"):
        comm.all_reduce(x, hints=["algo"])


def test_tcp_store_single_process():
    s = cclx.TcpStore("127.0.0.1", 0, True, "solo", 10.0)
    assert s.port > 0
    s.set("a", b"\x00\x01binary")
    s.set("b", "text")
    assert s.get("a") == b"\x00\x01binary" and s.get("b") == b"text"
    assert s.add("n", 5) == 5 and s.add("n", -2) == 3
    assert s.check("a") and not s.check("zz")
    s.erase("a")
    assert not s.check("a")
    with pytest.raises(cclx.CclxTimeoutError):
        s.get("never", 0.2)
    p = cclx.prefix_store(s, "ns/")
    p.set("k", b"v")
    assert s.get("ns/k") == b"v"
    c = cclx.TcpStore("127.0.0.1", s.port, False, "solo", 10.0)
    assert c.get("b") == b"text"


def test_tcp_store_token(monkeypatch):
    """A token is proven, never sent: the same one is admitted, another or none is refused with
    an error naming CCLX_STORE_TOKEN; token=None reads CCLX_STORE_TOKEN; without a token only
    loopback is served."""
    a, b = "a" * 32, "b" * 32
    s = cclx.TcpStore("127.0.0.1", 0, True, "tok-job", 10.0, a)
    s.set("k", b"v")
    assert cclx.TcpStore("127.0.0.1", s.port, False, "tok-job", 10.0, a).get("k") == b"v"
    with pytest.raises(cclx.CclxError, match="CCLX_STORE_TOKEN differs") as e:
        cclx.TcpStore("127.0.0.1", s.port, False, "tok-job", 10.0, b)
    assert a not in str(e.value) and b not in str(e.value)
    with pytest.raises(cclx.CclxError, match="requires a token"):
        cclx.TcpStore("127.0.0.1", s.port, False, "tok-job", 10.0, "")
    monkeypatch.setenv("CCLX_STORE_TOKEN", a)
    assert cclx.TcpStore("127.0.0.1", s.port, False, "tok-job", 10.0).get("k") == b"v"
    monkeypatch.delenv("CCLX_STORE_TOKEN")
    with pytest.raises(cclx.CclxInvalidArgument, match="CCLX_STORE_TOKEN"):
        cclx.TcpStore("0.0.0.0", 0, True, "tok-job", 10.0)
    with pytest.raises(cclx.CclxInvalidArgument, match="at least 16"):
        cclx.TcpStore("127.0.0.1", 0, True, "tok-job", 10.0, "short")
    r = cclx.TcpStore("0.0.0.0", 0, True, "tok-job", 10.0, a)
    assert cclx.TcpStore("127.0.0.1", r.port, False, "tok-job", 10.0, a).add("n", 2) == 2


def test_version_info():
    info = cclx.build_info()
    assert info["version"] == cclx.__version__ and info["commit"]


class _DLPackOnly:
    """An array type cclx knows only through the DLPack protocol."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_generic_dlpack_arrays(comm):
    x = np.arange(1, 8, dtype=np.int32)
    out = np.zeros(7, np.int32)
    comm.all_reduce(_DLPackOnly(x), cclx.ReduceOp.MAX, output=_DLPackOnly(out))
    assert (out == x).all()
    with pytest.raises(cclx.CclxInvalidArgument, match="unsupported element type"):
        comm.all_reduce(_DLPackOnly(np.ones(3, np.int16)))


def test_per_call_timeout_zero_means_the_comms(comm):
    """torchcomms: a per-op timeout of 0 (or None) is the communicator's; negative is an error."""
    x = np.arange(5, dtype=np.float32)
    comm.all_reduce(x, timeout=0).wait()
    comm.all_reduce(x, timeout=datetime.timedelta(0)).wait_blocking(timeout=0)
    with pytest.raises(cclx.CclxInvalidArgument):
        comm.all_reduce(x, timeout=-1)
    np.testing.assert_array_equal(x, np.arange(5, dtype=np.float32))


@pytest.mark.parametrize("hints,text", [
    ({"algoo": "tree"}, "unknown hint 'algoo' (valid hints: algo, low_precision, fp8_algo, fused_algo, put_path)"),
    ({"low_precision": "fp4"}, "hint low_precision='fp4' is not one of fp8, off"),
    ({"fp8_algo": "bogus"}, "hint fp8_algo='bogus' is not one of auto, oneshot, twoshot"),
    ({"algo": "bogus"}, "hint algo='bogus' is not one of auto, flat, lamport, tree, nccl, dda"),
])
def test_bad_hints_rejected_everywhere(comm, monkeypatch_module, hints, text):
    """Every collective and new_comm check hints against one table, before anything runs."""
    x = np.arange(1, 9, dtype=np.float32)
    out = np.full(8, -3.0, np.float32)
    calls = [
        lambda: comm.all_reduce(x, hints=hints, output=out),
        lambda: comm.reduce(x, 0, hints=hints, output=out),
        lambda: comm.broadcast(x, 0, hints=hints, output=out),
        lambda: comm.all_gather_single(out, x, hints=hints),
        lambda: comm.all_gather([out], x, hints=hints),
        lambda: comm.reduce_scatter_single(out, x, hints=hints),
        lambda: comm.reduce_scatter(out, [x], hints=hints),
        lambda: comm.all_to_all_single(out, x, hints=hints),
        lambda: comm.all_to_all_v_single(out, x, [8], [8], hints=hints),
        lambda: comm.barrier(hints=hints),
        lambda: comm.get_algo(8, cclx.DataType.f32, hints=hints),
    ]
    for call in calls:
        with pytest.raises(cclx.CclxInvalidArgument) as e:
            call()
        assert str(e.value) == text
    assert (out == -3.0).all() and (x == np.arange(1, 9)).all()
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        cclx.new_comm("cclx", "cpu", name="bad_hints", hints=hints)
    assert str(e.value) == text
    comm.all_reduce(x, hints={"algo": "tree", "low_precision": "off", "fp8_algo": "auto"})


def test_messages_name_the_python_arguments(comm):
    x = np.ones(4, np.float32)
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        comm.send(x, 0)
    assert str(e.value) == "send: dst 0 is this rank"
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        comm.recv(x, 0)
    assert str(e.value) == "recv: src 0 is this rank"
    # A wrong output size is the output's fault; an input that does not split is the input's.
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        comm.reduce_scatter_single(np.ones(3, np.float32), x)
    assert str(e.value) == "reduce_scatter_single: output has 3 elements, expected 4"
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        comm.all_gather_single(np.ones(5, np.float32), x)
    assert str(e.value) == "all_gather_single: output has 5 elements, expected 4"


def test_torch_reduce_op_accepted(comm):
    dist = pytest.importorskip("torch.distributed")
    x = np.array([3, 5, 6], np.int32)
    for op in ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"):
        y = x.copy()
        if op == "AVG":
            y = y.astype(np.float32)
        comm.all_reduce(y, getattr(dist.ReduceOp, op))  # one rank: the identity
        assert (y == x).all(), op
    comm.all_reduce(x, dist.ReduceOp(dist.ReduceOp.MAX))
    comm.reduce_scatter_single(np.empty(3, np.int32), x, dist.ReduceOp.SUM)
    assert comm.get_algo(16, cclx.DataType.f32, dist.ReduceOp.SUM) == comm.get_algo(
        16, cclx.DataType.f32)
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        comm.all_reduce(x, "sum")
    assert str(e.value) == ("all_reduce: op must be a cclx.ReduceOp (e.g. cclx.ReduceOp.SUM) or a "
                            "torch.distributed.ReduceOp, not 'sum'")
    with pytest.raises(cclx.CclxInvalidArgument, match="PREMUL_SUM"):
        comm.all_reduce(x.astype(np.float32), dist._make_nccl_premul_sum(2.0))


def test_master_defaults(monkeypatch_module):
    """MASTER_ADDR/MASTER_PORT default to 127.0.0.1:29500 (docs/USAGE.md), as in the C++ core."""
    from cclx import _rendezvous as rdv

    assert rdv._master() == ("127.0.0.1", 29500)
    monkeypatch_module.setenv("MASTER_PORT", "1234")
    assert rdv._master() == ("127.0.0.1", 1234)
    monkeypatch_module.delenv("MASTER_PORT")


def test_launch_env_is_one_rule(monkeypatch):
    """The Python package reads the launcher's environment by the C++ core's rule
    (cclx::launchEnv): pairs, TORCHCOMM_* first, no mixing of the two pairs, 0 of 1 by default."""
    from cclx import _rendezvous as rdv
    for k in ("RANK", "WORLD_SIZE", "TORCHCOMM_RANK", "TORCHCOMM_SIZE", "MASTER_ADDR",
              "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert rdv.rank_size() == (0, 1)
    assert rdv._master() == ("127.0.0.1", 29500)
    monkeypatch.setenv("TORCHCOMM_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(cclx.CclxInvalidArgument, match="TORCHCOMM_SIZE"):
        rdv.rank_size()
    monkeypatch.setenv("TORCHCOMM_SIZE", "3")
    assert rdv.rank_size() == (1, 3)
    monkeypatch.delenv("TORCHCOMM_RANK")
    monkeypatch.delenv("TORCHCOMM_SIZE")
    monkeypatch.setenv("RANK", "1")
    assert rdv.rank_size() == (1, 2)
    monkeypatch.setenv("MASTER_PORT", "x")
    with pytest.raises(cclx.CclxInvalidArgument, match="MASTER_PORT"):
        rdv._master()
