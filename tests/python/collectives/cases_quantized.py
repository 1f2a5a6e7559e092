"""Comm.reduce_scatter_quantized on CPU processes (run by test_quantized.py): bit for bit against
an independent numpy model of the rounding (a counter hash of (seed, index, rank), bf16 kept
bits, float32 sums in rank order), within the bf16 rounding bound of a float64 reference, SUM
and AVG, odd counts, in place, determinism per seed, different seeds, unbiased over seeds, torch
tensors, async, and bad arguments (a clear error, nothing written)."""
from __future__ import annotations

import time

import numpy as np

import cclx

try:
    import torch  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - the torch case is skipped by test_quantized.py
    torch = None

OPS = {"SUM": cclx.ReduceOp.SUM, "AVG": cclx.ReduceOp.AVG}
U64 = (1 << 64) - 1


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="rsq", timeout=60)


def teardown(ctx):
    ctx.comm.finalize()


# ------------------------------------------------------------------ the model (numpy, uint64)
def _mix64(z):
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sr_bf16_bits(x, seed, rank):
    """bf16 bits (uint32) of float32 array x (whole send buffer of `rank`) under `seed`."""
    with np.errstate(over="ignore"):
        idx = np.arange(x.size, dtype=np.uint64)
        h = _mix64(np.uint64(seed & U64) + np.uint64(0x9E3779B97F4A7C15) * (idx + np.uint64(1)))
        h = _mix64(h ^ (np.uint64(0xD1B54A32D192ED03) * np.uint64(rank + 1)))
    r = (h >> np.uint64(48)).astype(np.uint64)
    b = x.reshape(-1).view(np.uint32).astype(np.uint64)
    q = ((b + r) >> np.uint64(16)) & np.uint64(0xFFFF)
    nan = (b & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    q[nan] = (b[nan] >> np.uint64(16)) | np.uint64(0x40)
    return q.astype(np.uint32)


def widen(bits):
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def model(xs, seeds, rank, op):
    """What rank `rank` receives: float32, sums in rank order, AVG divides once."""
    n = len(xs)
    count = xs[0].size // n
    acc = None
    for s in range(n):
        v = widen(sr_bf16_bits(xs[s], seeds[s], s))[rank * count:(rank + 1) * count]
        acc = v.copy() if acc is None else (acc + v).astype(np.float32)
    return acc / np.float32(n) if op == "AVG" else acc


def inputs(ctx, count, case_seed):
    return [np.random.default_rng([case_seed, r]).standard_normal(ctx.size * count)
            .astype(np.float32) * np.float32(2.0 ** (r % 3)) for r in range(ctx.size)]


def seeds_for(ctx, base):
    return [base + 7919 * r - 3 for r in range(ctx.size)]  # differ per rank, some negative


def run(ctx, x, op, seed, out=None, **kw):
    out = np.full(x.size // ctx.size, np.nan, np.float32) if out is None else out
    w = ctx.comm.reduce_scatter_quantized(out, x, OPS[op], np.array([seed], np.int64), **kw)
    w.wait()
    return out


def check_bound(ctx, got, xs, op, what):
    """|got - exact| <= sum_r ulp_bf16(x_r) + float32 sums' error (float64 reference)."""
    n, count = ctx.size, got.size
    seg = [x.astype(np.float64)[ctx.rank * count:(ctx.rank + 1) * count] for x in xs]
    exact = sum(seg)
    # One bf16 step of |x|: 2^(floor(log2|x|) - 7); a contribution errs by less than one step.
    steps = sum(np.ldexp(1.0, np.floor(np.log2(np.maximum(np.abs(s), 1e-30))).astype(int) - 7)
                for s in seg)
    tol = steps + n * 2.0 ** -23 * sum(np.abs(s) for s in seg)
    if op == "AVG":
        exact, tol = exact / n, tol / n + np.abs(exact / n) * 2.0 ** -23
    err = np.abs(got.astype(np.float64) - exact)
    bad = np.argwhere(~(err <= tol))
    assert bad.size == 0, f"{what}: element {bad[0]}: {got[bad[0]]} vs {exact[bad[0]]} (tol {tol[bad[0]]})"


# ------------------------------------------------------------------ cases
def case_matches_model_and_bound(ctx):
    for count in (1, 7, 1000, 4099, 200003):
        for op in ("SUM", "AVG"):
            xs = inputs(ctx, count, count * 2 + (op == "AVG"))
            seeds = seeds_for(ctx, 1000 + count)
            x = xs[ctx.rank].copy()
            got = run(ctx, x, op, seeds[ctx.rank])
            what = f"{op} count {count}"
            assert np.array_equal(x, xs[ctx.rank]), what + ": input changed"
            want = model(xs, seeds, ctx.rank, op)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (
                f"{what}: {int(np.sum(got != want))} elements differ from the model, first "
                f"{np.argwhere(got != want)[0]}")
            check_bound(ctx, got, xs, op, what)


def case_in_place(ctx):
    count = 3001
    for op in ("SUM", "AVG"):
        xs = inputs(ctx, count, 77)
        seeds = seeds_for(ctx, 5)
        buf = xs[ctx.rank].copy()
        out = buf[ctx.rank * count:(ctx.rank + 1) * count]  # a view: the own block of the input
        run(ctx, buf, op, seeds[ctx.rank], out=out)
        want = model(xs, seeds, ctx.rank, op)
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32)), f"in place {op}"


def case_deterministic_per_seed(ctx):
    count = 20001
    xs = inputs(ctx, count, 9)
    a = run(ctx, xs[ctx.rank].copy(), "SUM", 424242 + ctx.rank)
    b = run(ctx, xs[ctx.rank].copy(), "SUM", 424242 + ctx.rank)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), "same seeds, different results"
    c = run(ctx, xs[ctx.rank].copy(), "SUM", 424243 + ctx.rank)
    frac = float(np.mean(a != c))
    # Random normal data keeps a random fraction of a step: most elements see another draw.
    assert frac > 0.3, f"other seeds change only {frac:.3f} of the elements"


def case_exact_values_stay_exact(ctx):
    count = 1024
    # bf16-representable inputs whose sums are exact in float32: no rounding at all.
    x = (np.arange(ctx.size * count) % 64 - 32).astype(np.float32) * np.float32(0.25)
    got = run(ctx, x, "SUM", 1 + ctx.rank)
    want = (x[ctx.rank * count:(ctx.rank + 1) * count] * ctx.size).astype(np.float32)
    assert np.array_equal(got, want)
    ones = run(ctx, np.ones(ctx.size * count, np.float32), "AVG", 99)
    assert np.array_equal(ones, np.ones(count, np.float32))


def case_unbiased_over_seeds(ctx):
    # 1 + 2^-9 is a quarter of a bf16 step above 1: round-to-nearest would always give 1 (a bias
    # of -2^-9 per contribution); stochastic rounding averages to the value itself.
    count, calls = 4096, 48
    v = np.float32(1.0 + 2.0 ** -9)
    x = np.full(ctx.size * count, v, np.float32)
    total = np.zeros(count, np.float64)
    for k in range(calls):
        total += run(ctx, x, "SUM", 31 * k + 1000 * ctx.rank)
    mean = total / calls
    exact = ctx.size * float(v)
    # Per contribution: 1 w.p. 3/4, 1 + 2^-7 w.p. 1/4: sd 2^-7 * sqrt(3)/4.
    sd = 2.0 ** -7 * np.sqrt(3.0) / 4 * np.sqrt(ctx.size)
    se_all = sd / np.sqrt(calls * count)
    assert abs(float(mean.mean()) - exact) < 6 * se_all, (float(mean.mean()), exact, se_all)
    assert abs(float(mean.mean()) - ctx.size * 1.0) > 100 * se_all  # not round-to-nearest
    # Per element: within 6 standard errors of one element's mean.
    assert np.max(np.abs(mean - exact)) < 6 * sd / np.sqrt(calls) + 2.0 ** -20


def case_specials(ctx):
    count = 16
    x = np.ones(ctx.size * count, np.float32)
    blk = np.arange(ctx.size) * count
    if ctx.rank == 0:
        x[blk + 1] = np.inf
        x[blk + 2] = np.nan
        x[blk + 3] = -np.inf
    got = run(ctx, x, "SUM", 3)
    assert got[1] == np.inf and np.isnan(got[2]) and got[3] == -np.inf, got[:4]
    assert np.all(got[4:] == ctx.size)


def case_torch_tensors_and_async(ctx):
    if torch is None:
        return
    count = 513
    xs = inputs(ctx, count, 123)
    seeds = seeds_for(ctx, 77)
    inp = torch.from_numpy(xs[ctx.rank].copy()).reshape(ctx.size, count)  # 2-D, numel size*count
    out = torch.full((count,), float("nan"))
    seed = torch.tensor([seeds[ctx.rank]], dtype=torch.int64)
    w = ctx.comm.reduce_scatter_quantized(out, inp, cclx.ReduceOp.AVG, seed, async_op=True)
    w.wait()
    want = model(xs, seeds, ctx.rank, "AVG")
    assert np.array_equal(out.numpy().view(np.uint32), want.view(np.uint32))


def case_fp8_payload(ctx):
    """Hint low_precision=fp8: the FP8 reduce-scatter's bits (e4m3, per-block scales), the seed
    unused, within the e4m3 bound of the float64 sum, and not the bf16 result."""
    count = 5003
    fp8 = {"low_precision": "fp8"}
    for op in ("SUM", "AVG"):
        xs = inputs(ctx, count, 4242 + len(op))
        x = xs[ctx.rank].copy()
        got = run(ctx, x, op, 1 + ctx.rank, hints=fp8)
        ref = np.full(count, np.nan, np.float32)
        ctx.comm.reduce_scatter_single(ref, x, OPS[op], hints=fp8).wait()
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), f"fp8 {op}: not the FP8 reduce-scatter"
        other = run(ctx, x, op, 99 + ctx.rank, hints=fp8)
        assert np.array_equal(got.view(np.uint32), other.view(np.uint32)), f"fp8 {op}: the seed changed it"
        bf = run(ctx, x, op, 1 + ctx.rank)
        assert not np.array_equal(got, bf), f"fp8 {op}: the bf16 result"
        seg = [v.astype(np.float64)[ctx.rank * count:(ctx.rank + 1) * count] for v in xs]
        exact = sum(seg)
        tol = sum(2.0 ** -4 * np.abs(s_) + 2.0 ** -8 * np.max(np.abs(s_)) for s_ in seg)
        tol = tol + ctx.size * 2.0 ** -22 * sum(np.abs(s_) for s_ in seg)
        if op == "AVG":
            exact, tol = exact / ctx.size, tol / ctx.size
        err = np.abs(got.astype(np.float64) - exact)
        assert np.all(err <= tol), f"fp8 {op}: max error {np.max(err - tol)} beyond the bound"


def case_bad_arguments_change_nothing(ctx):
    count = 8
    out = np.full(count, 5.0, np.float32)
    x = np.ones(ctx.size * count, np.float32)
    seed = np.array([1], np.int64)
    f = ctx.comm.reduce_scatter_quantized
    bad = [
        ("float64 input", lambda: f(np.full(count, 5.0), np.ones(ctx.size * count), cclx.ReduceOp.SUM,
                                    seed), "float32"),
        ("float16 input", lambda: f(out, x.astype(np.float16), cclx.ReduceOp.SUM, seed), ""),
        ("op PRODUCT", lambda: f(out, x, cclx.ReduceOp.PRODUCT, seed), "SUM or AVG"),
        ("op MAX", lambda: f(out, x, cclx.ReduceOp.MAX, seed), "SUM or AVG"),
        ("no seed", lambda: f(out, x, cclx.ReduceOp.SUM, None), "seed"),
        ("int32 seed", lambda: f(out, x, cclx.ReduceOp.SUM, np.array([1], np.int32)), "int64"),
        ("two seeds", lambda: f(out, x, cclx.ReduceOp.SUM, np.array([1, 2], np.int64)), "seed"),
        ("short output", lambda: f(out[:count - 1], x, cclx.ReduceOp.SUM, seed), "output"),
        ("indivisible input", lambda: f(out, x[:-1], cclx.ReduceOp.SUM, seed), ""),
    ]
    for what, call, word in bad:
        try:
            call()
        except cclx.CclxInvalidArgument as e:
            assert word in str(e), f"{what}: message {e!s} does not name {word!r}"
        else:
            raise AssertionError(f"{what}: no error")
        assert np.all(out == 5.0), f"{what}: the output changed"
    # The comm still works afterwards.
    got = run(ctx, x, "SUM", 1)
    assert np.all(got == ctx.size)


def case_missing_rank_is_named(ctx):
    """The last rank never calls: the others get CclxTimeoutError naming it, within the call's
    timeout, and their output is poisoned (never a plausible value)."""
    c = cclx.new_comm("cclx", "cpu", name="rsq_missing", timeout=30)
    last = ctx.size - 1
    if ctx.rank != last:
        count = 1000
        out = np.zeros(count, np.float32)
        t0 = time.time()
        try:
            c.reduce_scatter_quantized(out, np.ones(ctx.size * count, np.float32),
                                       cclx.ReduceOp.SUM, np.array([1], np.int64), timeout=2)
        except cclx.CclxTimeoutError as e:
            assert str(last) in str(e), f"the error does not name rank {last}: {e}"
        else:
            raise AssertionError(f"the call without rank {last} completed")
        assert time.time() - t0 < 20
        assert not np.any(out == ctx.size), "a plausible output after the timeout"
        assert np.all(out.view(np.uint32) == 0xFFFFFFFF), "the output is not poisoned"
    ctx.comm.barrier()  # the last rank keeps `c` alive until the others have seen the timeout
    c.abort()
    ctx.comm.barrier()
