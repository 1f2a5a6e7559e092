"""Comm.all_reduce_rmsnorm on CPU processes (run by test_rmsnorm.py): numpy arrays and torch CPU
tensors (the torch.library custom ops, torch.compile with fullgraph, fake tensors), against a
float64 reference, every algorithm bit for bit alike, FP8 (dynamic and static scales), out= and
in place, async, and argument errors."""
from __future__ import annotations

import numpy as np

import cclx
from refs import e4m3_decode, ml_dtypes

try:
    import torch  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - the torch cases are skipped by test_rmsnorm.py
    torch = None

ALGOS = ("oneshot", "twoshot", "unfused")
ROUNDOFF = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="rmsnorm", timeout=60)


def teardown(ctx):
    ctx.comm.finalize()


def inputs(ctx, tokens, hidden, seed):
    """(every rank's x, residual, weight) as float64, rows scaled by 2^(i % 5 - 2)."""
    rng = np.random.default_rng([seed, 4242])
    rows = np.ldexp(1.0, (np.arange(tokens) % 5) - 2)[:, None]
    xs = [rng.uniform(-2, 2, (tokens, hidden)) * rows for _ in range(ctx.size)]
    res = rng.uniform(-3, 3, (tokens, hidden)) * rows
    w = rng.uniform(0.5, 1.5, hidden)
    return xs, res, w


def reference(xs, res, w, eps, dtype):
    """float64 (r, y) and per-element bounds for them, from the inputs as rounded to dtype."""
    u, n = ROUNDOFF[dtype], len(xs)
    ar = sum(xs)
    r = ar + res
    a = sum(np.abs(x) for x in xs) + np.abs(res)
    inv = 1.0 / np.sqrt((r * r).mean(-1, keepdims=True) + eps)
    y = r * inv * w
    rtol = (n + 2) * u * a
    ytol = (n + 2) * u * a * inv * np.abs(w) + np.abs(y) * (4 * (n + 2) * u + 2.0 ** -20) + 1e-30
    return r, y, rtol, ytol


def np_type(dtype):
    return {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
            "bf16": np.dtype(ml_dtypes.bfloat16) if ml_dtypes else None}[dtype]


def check_close(got, want, tol, what):
    err = np.abs(np.asarray(got, np.float64) - want)
    bad = np.argwhere(~(err <= tol))
    assert bad.size == 0, (f"{what}: element {tuple(bad[0])}: {np.asarray(got, np.float64)[tuple(bad[0])]} "
                           f"vs float64 {want[tuple(bad[0])]} (tolerance {tol[tuple(bad[0])]:.3g})")


def e4m3_step(m):
    m = np.maximum(m, 2.0 ** -6)
    return np.ldexp(1.0, np.floor(np.log2(m)).astype(int) - 3)


def check_fp8(q, s, y, what, static=None):
    """Codes within one e4m3 step of y; dynamic scales = amax(|y|) / 448 exactly."""
    q = np.asarray(q, np.float64)
    s = np.asarray(s, np.float64)
    y = np.asarray(y, np.float64)
    if static is None:
        want = (np.abs(y).max(-1, keepdims=True).astype(np.float32) / np.float32(448)).astype(np.float64)
        assert np.array_equal(s, want), f"{what}: scales {s.ravel()[:4]} != amax/448 {want.ravel()[:4]}"
    else:
        assert (s == np.float32(static)).all(), f"{what}: scales {s.ravel()[:4]} != {static}"
    m = np.minimum(np.abs(y) / s, 448)
    err = np.abs(q * s - y)
    ok = (err <= e4m3_step(m) * s) | (np.abs(y) / s > 448)
    assert ok.all(), f"{what}: {int((~ok).sum())} codes off by more than one e4m3 step"


# ----------------------------------------------------------------------------- numpy
def _numpy(ctx, dtype, tokens, hidden, seed):
    t = np_type(dtype)
    assert t is not None, "bf16 needs ml_dtypes (test_rmsnorm.py skips this case without it)"
    xs, res, w = inputs(ctx, tokens, hidden, seed)
    xs = [x.astype(t) for x in xs]
    res, w = res.astype(t), w.astype(t)
    eps = 1e-5
    r64, y64, rtol, ytol = reference([x.astype(np.float64) for x in xs], res.astype(np.float64),
                                     w.astype(np.float64), eps, dtype)
    y, r = ctx.comm.all_reduce_rmsnorm(xs[ctx.rank], res, w, eps)
    assert y.dtype == t and r.dtype == t and y.shape == (tokens, hidden)
    check_close(r, r64, rtol, f"{dtype} residual")
    check_close(y, y64, ytol, f"{dtype} y")
    for algo in ALGOS:
        y2, r2 = ctx.comm.all_reduce_rmsnorm(xs[ctx.rank], res, w, eps,
                                             hints={"fused_algo": algo})
        assert y2.tobytes() == y.tobytes() and r2.tobytes() == r.tobytes(), f"{algo} differs"
    q, s, r3 = ctx.comm.all_reduce_rmsnorm(xs[ctx.rank], res, w, eps, quant="fp8")
    assert s.shape == (tokens, 1) and s.dtype == np.float32
    assert r3.tobytes() == r.tobytes()
    # float8_e4m3fn with ml_dtypes, else the uint8 codes
    assert q.dtype == (np.dtype(ml_dtypes.float8_e4m3fn) if ml_dtypes else np.uint8), q.dtype
    check_fp8(e4m3_decode(q), s, y.astype(np.float64), f"{dtype} fp8")


def case_numpy_f32(ctx): _numpy(ctx, "f32", 9, 1000, 1)
def case_numpy_f16(ctx): _numpy(ctx, "f16", 4, 4096, 2)
def case_numpy_bf16(ctx): _numpy(ctx, "bf16", 33, 128, 3)


def case_numpy_in_place_and_async(ctx):
    xs, res, w = inputs(ctx, 6, 520, 4)
    x, res, w = xs[ctx.rank].astype(np.float32), res.astype(np.float32), w.astype(np.float32)
    y_ref, r_ref = ctx.comm.all_reduce_rmsnorm(x, res, w, 1e-6)
    x2, res2 = x.copy(), res.copy()
    outs = ctx.comm.all_reduce_rmsnorm(x2, res2, w, 1e-6, out=(x2, res2))
    assert outs[0] is x2 and outs[1] is res2
    assert x2.tobytes() == y_ref.tobytes() and res2.tobytes() == r_ref.tobytes()
    (y, r), work = ctx.comm.all_reduce_rmsnorm(x, res, w, 1e-6, async_op=True)
    work.wait()
    assert y.tobytes() == y_ref.tobytes() and r.tobytes() == r_ref.tobytes()


def case_bad_arguments(ctx):
    xs, res, w = inputs(ctx, 4, 64, 5)
    x, res, w = xs[ctx.rank].astype(np.float32), res.astype(np.float32), w.astype(np.float32)
    bad = [
        (dict(quant="int8"), "quant"),
        (dict(scale=np.ones(1, np.float32)), "static scale"),
        (dict(out=(np.empty_like(x),)), "tuple of 2"),
    ]
    for kw, needle in bad:
        try:
            ctx.comm.all_reduce_rmsnorm(x, res, w, 1e-6, **kw)
            raise AssertionError(f"{kw} accepted")
        except cclx.CclxInvalidArgument as e:
            assert needle in str(e), str(e)
    for args, needle in [((x, res, w[:32]), "weight"), ((x, res[:2], w), "residual"),
                         ((x.astype(np.float64), res, w), "dtype")]:
        try:
            ctx.comm.all_reduce_rmsnorm(*args, 1e-6)
            raise AssertionError(f"{needle} accepted")
        except cclx.CclxInvalidArgument as e:
            assert needle in str(e), str(e)
    y, r = ctx.comm.all_reduce_rmsnorm(x, res, w, 1e-6)  # the ranks are still in step
    assert np.isfinite(y).all()


# ----------------------------------------------------------------------------- torch
def _torch(ctx, dtype, tokens, hidden, seed):
    tt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    xs, res, w = inputs(ctx, tokens, hidden, seed)
    xs = [torch.from_numpy(x).to(tt) for x in xs]
    res, w = torch.from_numpy(res).to(tt), torch.from_numpy(w).to(tt)
    r64, y64, rtol, ytol = reference([x.double().numpy() for x in xs], res.double().numpy(),
                                     w.double().numpy(), 1e-5, dtype)
    y, r = torch.ops.cclx.all_reduce_rmsnorm(ctx.comm.handle, xs[ctx.rank], res, w, 1e-5)
    check_close(r.double().numpy(), r64, rtol, f"{dtype} residual")
    check_close(y.double().numpy(), y64, ytol, f"{dtype} y")
    y1, r1 = ctx.comm.all_reduce_rmsnorm(xs[ctx.rank], res, w, 1e-5)
    for algo in ALGOS:
        y2, r2 = ctx.comm.all_reduce_rmsnorm(xs[ctx.rank], res, w, 1e-5, hints={"fused_algo": algo})
        for a, b in ((y, y1), (y, y2), (r, r1), (r, r2)):
            assert torch.equal(a.view(torch.uint8) if a.dtype != torch.float32 else a.view(torch.int32),
                               b.view(torch.uint8) if b.dtype != torch.float32 else b.view(torch.int32))
    q, s, r3 = ctx.comm.all_reduce_rmsnorm(xs[ctx.rank], res, w, 1e-5, quant="fp8")
    assert q.dtype == torch.float8_e4m3fn and s.shape == (tokens, 1) and torch.equal(r3, r)
    check_fp8(q.float().numpy(), s.numpy(), y.double().numpy(), f"{dtype} fp8")
    scale = torch.tensor([0.02], dtype=torch.float32)
    q, s, _ = ctx.comm.all_reduce_rmsnorm(xs[ctx.rank], res, w, 1e-5, quant="fp8", scale=scale)
    check_fp8(q.float().numpy(), s.numpy(), y.double().numpy(), f"{dtype} fp8 static", 0.02)


def case_torch_bf16(ctx): _torch(ctx, "bf16", 17, 2048, 6)
def case_torch_f16(ctx): _torch(ctx, "f16", 3, 1003, 7)
def case_torch_f32(ctx): _torch(ctx, "f32", 5, 16384, 8)


def case_torch_compile_fullgraph(ctx):
    c = ctx.comm
    xs, res, w = inputs(ctx, 8, 256, 9)
    x, res, w = (torch.from_numpy(a).to(torch.bfloat16) for a in (xs[ctx.rank], res, w))

    def block(x, res, w):
        y, r = c.all_reduce_rmsnorm(x, res, w, 1e-6)
        q, s, r2 = c.all_reduce_rmsnorm(y * 0.5, r, w, 1e-6, quant="fp8")
        return y, r, q, s, r2

    want = block(x, res, w)
    got = torch.compile(block, backend="aot_eager", fullgraph=True)(x, res, w)
    for a, b in zip(got, want):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), "compiled result differs"


def case_torch_fake_shapes(ctx):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(2, 3, 64, dtype=torch.bfloat16)
        w = torch.empty(64, dtype=torch.bfloat16)
        y, r = torch.ops.cclx.all_reduce_rmsnorm(ctx.comm.handle, x, x, w, 1e-6)
        q, s, r2 = torch.ops.cclx.all_reduce_rmsnorm_fp8(ctx.comm.handle, x, x, w, 1e-6, None)
    assert y.shape == r.shape == q.shape == (2, 3, 64) and s.shape == (2, 3, 1)
    assert y.dtype == torch.bfloat16 and q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
