"""Independent references for collective tests: deterministic random inputs per rank (never
zero) and float64 / int64 expected results computed with numpy only."""
from __future__ import annotations

import os
import sys
from typing import List

import numpy as np

# The float64 reference of reductions is the one bench/soak.py checks with (bench/soak_ref.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench"))
from soak_ref import reduce_f64  # noqa: E402

try:  # bf16 / fp8 numpy types
    import ml_dtypes  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - optional
    ml_dtypes = None

INT_TYPES = ("i8", "u8", "i32", "i64", "u32", "u64")
FLOAT_TYPES = ("f32", "f64", "f16", "bf16")
FP8_TYPES = ("fp8_e4m3", "fp8_e5m2")


def np_dtype(name: str):
    table = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8,
             "u8": np.uint8, "i32": np.int32, "i64": np.int64, "u32": np.uint32,
             "u64": np.uint64}
    if name in table:
        return np.dtype(table[name])
    if ml_dtypes is None:
        return None
    return np.dtype({"bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
                     "fp8_e5m2": ml_dtypes.float8_e5m2}[name])


def e4m3_decode(codes) -> np.ndarray:
    """float64 values of float8_e4m3fn codes (uint8: sign, 4 exponent bits with bias 7, 3
    mantissa bits; exponent 0 is subnormal; 0x7f / 0xff are NaN, there is no infinity), so FP8
    results are checked the same with or without ml_dtypes."""
    c = np.asarray(codes).view(np.uint8).astype(np.int64)
    e, m = (c >> 3) & 0xF, c & 7
    mag = np.where(e == 0, np.ldexp(m / 8.0, -6), np.ldexp(1.0 + m / 8.0, e - 7))
    mag = np.where((c & 0x7F) == 0x7F, np.nan, mag)
    return np.where(c & 0x80, -mag, mag)


def gen(dtype: str, shape, rank: int, seed: int) -> np.ndarray:
    """Random non-zero values, exactly representable in `dtype`, different per rank."""
    rng = np.random.default_rng([seed, rank, 7919])
    n = int(np.prod(shape)) if shape else 1
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    if dtype in INT_TYPES:
        v = rng.integers(1, 10, n).astype(np.float64)
        if not dtype.startswith("u"):
            v *= sign
    elif dtype in FP8_TYPES:
        v = rng.integers(1, 8, n) * sign  # small integers are exact in both fp8 formats
    else:
        v = (0.5 + 1.5 * rng.random(n)) * sign
    return v.astype(np_dtype(dtype)).reshape(shape)


def rtol(dtype: str) -> float:
    """Bound on |got - ref| relative to the sum of |inputs| for reductions."""
    return {"f32": 1e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 1.6e-2}.get(dtype, 0.0)


def ops_for(dtype: str) -> List[str]:
    if dtype in FP8_TYPES:
        return []
    base = ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]
    return base + (["BAND", "BOR", "BXOR"] if dtype in INT_TYPES else [])


def reduce_ref(inputs: List[np.ndarray], op: str, dtype: str, factor: float = 1.0):
    """(expected, scale): expected in float64 (floats) or the integer dtype (wrapping like C),
    scale = per-element sum of |terms| for the tolerance of float results."""
    if dtype in INT_TYPES:
        x = [a.astype(np.int64) for a in inputs]
        if op == "SUM":
            r = sum(x)
        elif op == "PRODUCT":
            r = x[0].copy()
            for a in x[1:]:
                r = r * a
        elif op == "MIN":
            r = np.minimum.reduce(x)
        elif op == "MAX":
            r = np.maximum.reduce(x)
        elif op == "AVG":
            s = sum(x)
            r = np.sign(s) * (np.abs(s) // len(x))  # C integer division truncates
        elif op == "BAND":
            r = np.bitwise_and.reduce(x)
        elif op == "BOR":
            r = np.bitwise_or.reduce(x)
        elif op == "BXOR":
            r = np.bitwise_xor.reduce(x)
        else:
            raise ValueError(op)
        return r.astype(np_dtype(dtype)), None
    return reduce_f64(inputs, op, factor)


def assert_close(got: np.ndarray, expected, scale, dtype: str, what: str) -> None:
    """Exact for integer and data-movement results; relative to `scale` for float reductions."""
    if scale is None or dtype in INT_TYPES or dtype in FP8_TYPES:
        g = got.view(np.uint8) if dtype in FP8_TYPES else got
        e = np.asarray(expected).astype(got.dtype)
        e = e.view(np.uint8) if dtype in FP8_TYPES else e
        bad = np.flatnonzero(g.reshape(-1) != e.reshape(-1))
        if bad.size:
            i = bad[0]
            raise AssertionError(f"{what}: {bad.size} wrong elements, first at {i}: got "
                                 f"{got.reshape(-1)[i]} expected {np.asarray(expected).reshape(-1)[i]}")
        return
    g = got.astype(np.float64)
    err = np.abs(g - expected)
    lim = rtol(dtype) * scale + 1e-300
    bad = np.flatnonzero(~(err <= lim).reshape(-1))
    if bad.size:
        i = bad[0]
        raise AssertionError(f"{what}: {bad.size} elements out of tolerance, first at {i}: got "
                             f"{g.reshape(-1)[i]!r} expected {expected.reshape(-1)[i]!r}")


def poison(shape, dtype: str) -> np.ndarray:
    """An output buffer full of a value no correct result contains."""
    a = np.empty(shape, dtype=np_dtype(dtype))
    a.view(np.uint8)[...] = 0x7B  # 0x7B7B... : a large value in every type
    return a
