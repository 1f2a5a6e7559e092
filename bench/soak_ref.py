"""References of bench/soak.py: seeded inputs every rank can regenerate for every other rank, and
the checks of a result against them.

Inputs are slices of one random pool per dtype (the same on every rank, made from the seed) at an
offset that is a function of (seed, call, rank, role), so a rank rebuilds any rank's input of any
call without communicating. Values are exact in their dtype and never zero: floats +-[0.5, 2),
integers +-[1, 9], FP8 small integers.

Reductions are checked twice: exactly against an emulation of the library's element rules
(docs/DESIGN.md: 16-bit floats widened to float, combined over ranks 0..N-1 in that order,
rounded once; PREMUL_SUM's factor applied to each rank's value, AVG divided at the end; integers
wrap like C and AVG truncates), which every algorithm promises bit for bit, and against a float64
reference within the dtype's bound. FP8-compressed calls have no bit rule the script emulates and
are checked against float64 within the codec's bound (half an e4m3 step per quantization).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

try:
    import ml_dtypes  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - bf16 / fp8 are then left out
    ml_dtypes = None

INT_TYPES = ("i8", "u8", "i32", "i64", "u32", "u64")
FLOAT_TYPES = ("f32", "f64", "f16", "bf16")
FP8_TYPES = ("fp8_e4m3", "fp8_e5m2")
# Bound of |got - ref| relative to the sum of |terms| (float64 check of float reductions).
RTOL = {"f32": 1e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 1.6e-2}
UNIT = {"f32": 2.0 ** -24, "f64": 2.0 ** -53, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}
# Large odd multipliers for the input offsets (any fixed values would do).
_K = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5)


def np_dtype(name: str) -> np.dtype:
    table = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8,
             "u8": np.uint8, "i32": np.int32, "i64": np.int64, "u32": np.uint32,
             "u64": np.uint64}
    if name in table:
        return np.dtype(table[name])
    if ml_dtypes is None:
        raise RuntimeError(f"{name} needs ml_dtypes: pip install ml-dtypes")
    return np.dtype({"bf16": ml_dtypes.bfloat16, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
                     "fp8_e5m2": ml_dtypes.float8_e5m2}[name])


def bits(a: np.ndarray) -> np.ndarray:
    """The elements of `a` as unsigned integers of the same width (for bitwise comparison)."""
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def poison(dtype: str, n: int) -> np.ndarray:
    """n elements of 0x7B bytes: a value no correct result holds (the guards' pattern too)."""
    a = np.empty(n, np_dtype(dtype))
    a.view(np.uint8)[...] = 0x7B
    return a


def acc_dtype(name: str) -> np.dtype:
    return np.dtype(np.float64 if name == "f64" else np.float32)


class Pool:
    """One random pool per dtype; input(dtype, n, call, rank, role) is a slice of it."""

    def __init__(self, seed: int, max_bytes: int) -> None:
        self.seed = seed
        self.max_bytes = max_bytes
        self._pools: dict = {}

    def _pool(self, dtype: str) -> np.ndarray:
        p = self._pools.get(dtype)
        if p is None:
            n = 2 * self.max_bytes // np_dtype(dtype).itemsize + 65536
            rng = np.random.default_rng([self.seed, 0x5EED, len(dtype), sum(map(ord, dtype))])
            sign = (rng.integers(0, 2, n, dtype=np.int8) * 2 - 1).astype(np.int8)
            if dtype in INT_TYPES:
                v = rng.integers(1, 10, n, dtype=np.int8)
                p = (v * sign if not dtype.startswith("u") else v).astype(np_dtype(dtype))
            elif dtype in FP8_TYPES:
                p = (rng.integers(1, 8, n, dtype=np.int8) * sign).astype(np.float32)
                p = p.astype(np_dtype(dtype))
            else:
                v = rng.random(n, dtype=np.float32) * np.float32(1.5) + np.float32(0.5)
                p = (v * sign).astype(np_dtype(dtype))
            self._pools[dtype] = p
            p.flags.writeable = False
        return p

    def input(self, dtype: str, n: int, call: int, rank: int, role: int = 0) -> np.ndarray:
        """Rank `rank`'s input `role` of call `call` (read-only view; copy before writing)."""
        h = (self.seed * _K[0] + call * _K[1] + (rank + 7) * _K[2] + (role + 3) * _K[3])
        h ^= h >> 29
        p = self._pool(dtype)
        off = int(h % (p.size - n + 1))
        return p[off:off + n]


def reduce_exact(xs: List[np.ndarray], op: str, dtype: str, factor: float = 1.0) -> np.ndarray:
    """The library's bits: ranks 0..N-1 in order in the accumulator type, rounded once."""
    n = len(xs)
    t = np_dtype(dtype)
    if dtype in INT_TYPES:
        if op == "PREMUL_SUM":  # the factor converted to the integer type (truncated)
            f = t.type(int(factor))
            with np.errstate(over="ignore"):
                xs = [(a * f).astype(t) for a in xs]
            op = "SUM"
        r = xs[0].copy()
        with np.errstate(over="ignore"):
            for a in xs[1:]:
                r = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MIN": np.minimum,
                     "MAX": np.maximum, "BAND": np.bitwise_and, "BOR": np.bitwise_or,
                     "BXOR": np.bitwise_xor}[op](r, a).astype(t)
        if op == "AVG":
            if dtype.startswith("u"):
                r = (r // t.type(n)).astype(t)
            else:
                s = r.astype(np.int64)
                r = (np.sign(s) * (np.abs(s) // n)).astype(t)
        return r
    at = acc_dtype(dtype)
    acc = [a.astype(at) for a in xs]
    if op == "PREMUL_SUM":
        f = at.type(factor)
        acc = [a * f for a in acc]
    r = acc[0].copy()
    with np.errstate(over="ignore", invalid="ignore"):
        for a in acc[1:]:
            if op in ("SUM", "AVG", "PREMUL_SUM"):
                r = r + a
            elif op == "PRODUCT":
                r = r * a
            elif op == "MIN":
                r = np.where(a < r, a, r)
            elif op == "MAX":
                r = np.where(a > r, a, r)
            else:
                raise ValueError(op)
        if op == "AVG":
            r = r / at.type(n)
        return r.astype(t)


def reduce_f64(xs: List[np.ndarray], op: str, factor: float = 1.0
               ) -> Tuple[np.ndarray, np.ndarray]:
    """(float64 result, per-element sum of |terms|) of a float reduction."""
    x = [a.astype(np.float64) for a in xs]
    scale = sum(np.abs(a) for a in x)
    if op in ("SUM", "AVG", "PREMUL_SUM"):
        f = factor if op == "PREMUL_SUM" else 1.0
        r = sum(f * a for a in x)
        scale = scale * abs(f)
        if op == "AVG":
            r, scale = r / len(x), scale / len(x)
    elif op == "PRODUCT":
        r = x[0].copy()
        for a in x[1:]:
            r = r * a
        scale = np.abs(r) * len(x)
    elif op == "MIN":
        r = np.minimum.reduce(x)
        scale = np.abs(r)
    elif op == "MAX":
        r = np.maximum.reduce(x)
        scale = np.abs(r)
    else:
        raise ValueError(op)
    return r, scale


def count_wrong_reduce(got: np.ndarray, xs: List[np.ndarray], op: str, dtype: str,
                       factor: float = 1.0, fp8: bool = False) -> int:
    """Elements of `got` that differ from the exact emulation or leave the float64 bound (FP8
    calls: the float64 bound of the codec only)."""
    if dtype in INT_TYPES:
        return int(np.count_nonzero(bits(got) != bits(reduce_exact(xs, op, dtype, factor))))
    ref, scale = reduce_f64(xs, op, factor)
    g = got.astype(np.float64)
    if fp8:
        return count_fp8(g, ref, scale, xs)
    bad = ~(np.abs(g - ref) <= RTOL[dtype] * scale + 1e-300)
    bad |= bits(got) != bits(reduce_exact(xs, op, dtype, factor))
    return int(np.count_nonzero(bad))


def fp8_ok(g: np.ndarray, ref: np.ndarray, scale: np.ndarray, xs: List[np.ndarray]) -> np.ndarray:
    """FP8 bound: each quantization moves a value by at most half an e4m3 step (2^-4 relative)
    plus half the subnormal step of its block's scale; up to two quantizations per term, the
    rounding of the output type on top. True where `g` (float64) is within it."""
    amax = max(float(np.max(np.abs(a.astype(np.float64)))) if a.size else 0.0 for a in xs)
    tol = 0.14 * scale + 0.07 * np.abs(ref) + len(xs) * amax * 2.0 ** -17 + 1e-30
    return np.abs(g - ref) <= tol


def count_fp8(g: np.ndarray, ref: np.ndarray, scale: np.ndarray, xs: List[np.ndarray]) -> int:
    return int(np.count_nonzero(~fp8_ok(g, ref, scale, xs)))


def count_fp8_or_poison(got: np.ndarray, ref: np.ndarray, scale: np.ndarray,
                        xs: List[np.ndarray]) -> int:
    """Outputs of an FP8 call in an item that failed (the call itself may have completed before
    the failure): each element is within the FP8 bound or all-ones bytes. An input left as it
    was (stale data) is outside the bound."""
    b = bits(got).reshape(-1)
    ones = b == np.iinfo(b.dtype).max
    ok = fp8_ok(got.astype(np.float64).reshape(-1), np.asarray(ref).reshape(-1),
                np.asarray(scale).reshape(-1), xs)
    return int(np.count_nonzero(~ones & ~ok))


def count_wrong_exact(got: np.ndarray, want: np.ndarray) -> int:
    """Data movement: every bit must match."""
    want = np.ascontiguousarray(want)
    return int(np.count_nonzero(bits(got).reshape(-1) != bits(want).reshape(-1)))


def count_not_exact_or_poison(got: np.ndarray, want: Optional[np.ndarray]) -> int:
    """Outputs of a failed call: each element is the exact result or all-ones bytes."""
    b = bits(got).reshape(-1)
    ones = b == np.iinfo(b.dtype).max
    if want is None:
        return int(np.count_nonzero(~ones))
    return int(np.count_nonzero(~ones & (b != bits(np.ascontiguousarray(want)).reshape(-1))))


def rmsnorm_ref(xs: List[np.ndarray], res: np.ndarray, w: np.ndarray, eps: float, dtype: str,
                r_got: np.ndarray, y_got: Optional[np.ndarray]) -> int:
    """Wrong elements of a fused allreduce + residual add + RMSNorm: r against float64 within
    the roundings of the sum and the add; y against the norm of the returned r (y is a function
    of r, docs/design/fused-rmsnorm.md) within a few roundings."""
    u = UNIT[dtype]
    n = len(xs)
    x = [a.astype(np.float64) for a in xs]
    r = sum(x) + res.astype(np.float64)
    a = sum(np.abs(v) for v in x) + np.abs(res.astype(np.float64))
    rg = r_got.astype(np.float64)
    wrong = int(np.count_nonzero(~(np.abs(rg - r) <= (n + 2) * u * a + 1e-30)))
    if y_got is not None:
        inv = 1.0 / np.sqrt((rg * rg).mean(-1, keepdims=True) + eps)
        y = rg * inv * w.astype(np.float64)
        tol = np.abs(y) * (8 * u + 2.0 ** -20) + 1e-30
        wrong += int(np.count_nonzero(~(np.abs(y_got.astype(np.float64) - y) <= tol)))
    return wrong


def rmsnorm_fp8_wrong(r_got: np.ndarray, w: np.ndarray, eps: float, q_got: np.ndarray,
                      s_got: np.ndarray) -> int:
    """Wrong codes of the FP8 variant: scale = amax(|y|) / 448 per token (at least 2^-126; 1
    for a row of zeros), codes * scale within half an e4m3 step of y (y from the returned r)."""
    rg = r_got.astype(np.float64)
    inv = 1.0 / np.sqrt((rg * rg).mean(-1, keepdims=True) + eps)
    y = rg * inv * w.astype(np.float64)
    amax = np.abs(y).max(-1, keepdims=True)
    s_ref = np.where(amax == 0, 1.0, np.maximum(amax / 448.0, 2.0 ** -126))
    s = s_got.astype(np.float64)
    wrong = int(np.count_nonzero(~(np.abs(s - s_ref) <= 1e-2 * s_ref)))
    deq = q_got.astype(np.float64) * s
    tol = 0.07 * np.abs(y) + s * 2.0 ** -9 + 1e-2 * np.abs(y)
    return wrong + int(np.count_nonzero(~(np.abs(deq - y) <= tol)))
