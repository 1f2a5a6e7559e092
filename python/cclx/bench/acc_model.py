"""The tensor-parallel transformer forward of cclx-bench accuracy (numpy, float32), with every
collective of the parallel layout going through one `Colls` object: exact cclx collectives, cclx
FP8 (per-call hint low_precision=fp8, per-block scales), or an unscaled saturating e4m3 cast of
the data around an exact collective.

Layouts (weights are full on every rank; each rank slices its part):
  tp      column-parallel QKV and FFN-in, row-parallel attention-out and FFN-out, one allreduce
          after each row-parallel matmul; every rank holds all token rows.
  sp      sequence parallel: token rows sharded; all-gather before QKV and FFN-in, reduce-scatter
          after attention-out and FFN-out (the allreduce split in two).
  a2a     attention over all-to-all (each rank computes Q, K, V of its rows for all heads, an
          all-to-all trades rows for heads and back), FFN as in sp.
A model ends with a collective of its own: the encoder's mean pooling in sp / a2a is an
allreduce of per-rank partial sums, the decoder all-gathers its final rows.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

KINDS = ("allreduce", "reduce-scatter", "all-gather", "all-to-all")
E4M3_MAX = 448.0


def e4m3_cast(x: np.ndarray) -> np.ndarray:
    """Round to the nearest e4m3 (fn) value, ties to even, saturating at +-448, no scale: values
    under 2^-10 become 0, subnormals keep steps of 2^-9. Returned as float32."""
    x = np.asarray(x, dtype=np.float32)
    a = np.minimum(np.abs(x), E4M3_MAX).astype(np.float64)
    _, ex = np.frexp(a)  # a = m * 2^ex, m in [0.5, 1): the binade's exponent is ex - 1
    e = np.maximum(ex - 1, -6)  # below 2^-6 the subnormal step 2^-9 applies
    step = np.ldexp(1.0, e - 3)
    q = np.minimum(np.round(a / step) * step, E4M3_MAX)
    return np.where(np.isnan(x), np.float32(np.nan), np.copysign(q, x)).astype(np.float32)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even), returned as float32 (NaN stays NaN)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000))
    return np.where(np.isnan(x), x, r.view(np.float32))


class Colls:
    """The collectives of one forward. comm None: one rank (every collective is the identity).
    fp8: the kinds that run as cclx FP8; cast: the kinds whose data is cast to e4m3 (unscaled)
    before an exact collective (and the reduced result after, for the reductions); bf16: the
    same with bfloat16 rounding instead (what a bf16 model's collectives carry)."""

    def __init__(self, comm: Any, fp8: Sequence[str] = (), cast: Sequence[str] = (),
                 bf16: Sequence[str] = ()) -> None:
        self.comm = comm
        self.size = 1 if comm is None else comm.get_size()
        self.rank = 0 if comm is None else comm.get_rank()
        self.fp8, self.cast, self.bf16 = set(fp8), set(cast), set(bf16)
        self.bytes: Dict[str, int] = {}  # largest message (bytes per rank) of each kind
        self.calls: Dict[str, int] = {}
        if comm is not None:
            import cclx

            self.SUM = cclx.ReduceOp.SUM

    def _note(self, kind: str, nbytes: int) -> Optional[Dict[str, str]]:
        self.bytes[kind] = max(self.bytes.get(kind, 0), int(nbytes))
        self.calls[kind] = self.calls.get(kind, 0) + 1
        return {"low_precision": "fp8" if kind in self.fp8 else "off"}

    def _in(self, kind: str, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if kind in self.bf16:
            return bf16_round(x)
        return e4m3_cast(x) if kind in self.cast else x

    def _red(self, kind: str, x: np.ndarray) -> np.ndarray:
        """The reduced result as the cast variants store it."""
        if kind in self.bf16:
            return bf16_round(x)
        return e4m3_cast(x) if kind in self.cast else x

    def allreduce(self, x: np.ndarray) -> np.ndarray:
        h = self._note("allreduce", x.nbytes)
        if self.comm is None:
            return x
        t = self._in("allreduce", x).copy()
        self.comm.all_reduce(t, self.SUM, False, h)
        return self._red("allreduce", t)

    def reduce_scatter(self, x: np.ndarray) -> np.ndarray:
        """x: [size * n, ...] partial sums -> this rank's [n, ...] of the sum."""
        h = self._note("reduce-scatter", x.nbytes)
        if self.comm is None:
            return x
        t = self._in("reduce-scatter", x)
        out = np.empty((t.shape[0] // self.size,) + t.shape[1:], np.float32)
        self.comm.reduce_scatter_single(out, t, self.SUM, False, h)
        return self._red("reduce-scatter", out)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        """x: [n, ...] -> [size * n, ...] (rank order)."""
        h = self._note("all-gather", x.nbytes)
        if self.comm is None:
            return x
        t = self._in("all-gather", x)
        out = np.empty((t.shape[0] * self.size,) + t.shape[1:], np.float32)
        self.comm.all_gather_single(out, t, False, h)
        return out

    def all_to_all(self, x: np.ndarray) -> np.ndarray:
        """x: [size, ...], block r to rank r -> [size, ...], block r from rank r."""
        h = self._note("all-to-all", x.nbytes)
        if self.comm is None:
            return x
        t = self._in("all-to-all", x)
        out = np.empty_like(t)
        self.comm.all_to_all_single(out, t, False, h)
        return out


# ----------------------------------------------------------------------------- the model
@dataclasses.dataclass
class Layer:
    """Weights as x @ W (in, out); biases None in a model without them."""
    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    wo: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    n1: tuple  # (gain, bias or None)
    n2: tuple
    bq: Optional[np.ndarray] = None
    bk: Optional[np.ndarray] = None
    bv: Optional[np.ndarray] = None
    bo: Optional[np.ndarray] = None
    b1: Optional[np.ndarray] = None
    b2: Optional[np.ndarray] = None


@dataclasses.dataclass
class Spec:
    heads: int
    pre_norm: bool  # decoder: x + f(norm(x)); encoder (BERT): norm(x + f(x))
    causal: bool
    act: str  # "gelu" (erf form) or "relu"
    norm: str  # "layer" (LayerNorm with bias) or "rms"
    eps: float


def erf(x: np.ndarray) -> np.ndarray:
    """erf to 1.5e-7 absolute (Abramowitz and Stegun 7.1.26); numpy has no erf."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return (s * y).astype(x.dtype)


def act(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "relu":
        return np.maximum(x, 0)
    return (0.5 * x * (1.0 + erf(x / np.float32(math.sqrt(2.0))))).astype(np.float32)


def norm(x: np.ndarray, p: tuple, spec: Spec) -> np.ndarray:
    g, b = p
    if spec.norm == "rms":
        return (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + spec.eps) * g).astype(np.float32)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + spec.eps) * g + b).astype(np.float32)


def _add(x: np.ndarray, b: Optional[np.ndarray]) -> np.ndarray:
    return x if b is None else x + b


class Forward:
    """One rank's part of the model in one layout."""

    def __init__(self, spec: Spec, layers: List[Layer], colls: Colls, layout: str) -> None:
        if layout not in ("tp", "sp", "a2a"):
            raise ValueError(f"unknown layout {layout!r}")
        n = colls.size
        D = layers[0].wq.shape[0]
        F = layers[0].w1.shape[1]
        if spec.heads % n or F % n:
            raise ValueError(f"{n} ranks do not divide {spec.heads} heads and FFN width {F}")
        self.spec, self.layers, self.c, self.layout = spec, layers, colls, layout
        self.n, self.r, self.D, self.F = n, colls.rank, D, F
        self.dh = D // spec.heads
        self.hl = spec.heads // n  # heads of this rank
        self.cols = slice(self.r * D // n, (self.r + 1) * D // n)
        self.fcols = slice(self.r * F // n, (self.r + 1) * F // n)

    # -- pieces
    def _attend(self, q, k, v, valid, nseq):
        """Local heads (h = q.shape[1] // dh) over all rows."""
        T, w = q.shape
        L, h, dh = T // nseq, w // self.dh, self.dh
        q = q.reshape(nseq, L, h, dh).transpose(0, 2, 1, 3)
        k = k.reshape(nseq, L, h, dh).transpose(0, 2, 3, 1)
        v = v.reshape(nseq, L, h, dh).transpose(0, 2, 1, 3)
        s = (q @ k) * np.float32(1.0 / math.sqrt(dh))  # [nseq, h, L, L]
        bad = ~valid[:, None, None, :]
        if self.spec.causal:
            bad = bad | np.triu(np.ones((L, L), bool), 1)[None, None]
        s = np.where(bad, np.float32(-1e30), s)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        return (s @ v).transpose(0, 2, 1, 3).reshape(T, w).astype(np.float32)

    def _pad(self, x, rows):
        if x.shape[0] == rows:
            return x
        return np.concatenate([x, np.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)])

    def _attn_tp(self, L_: Layer, a, valid, nseq, T):
        c = self.cols
        q = _add(a @ L_.wq[:, c], None if L_.bq is None else L_.bq[c])
        k = _add(a @ L_.wk[:, c], None if L_.bk is None else L_.bk[c])
        v = _add(a @ L_.wv[:, c], None if L_.bv is None else L_.bv[c])
        ctx = self._attend(q[:T], k[:T], v[:T], valid, nseq)
        return self._pad(ctx, a.shape[0]) @ L_.wo[c, :]  # partial sums

    def _attn_a2a(self, L_: Layer, a, valid, nseq, T):
        """a: this rank's rows [Tl, D] -> its rows of the attention output [Tl, D]."""
        n, D, Tl = self.n, self.D, a.shape[0]
        q, k, v = (_add(a @ w, b) for w, b in ((L_.wq, L_.bq), (L_.wk, L_.bk), (L_.wv, L_.bv)))
        # block r: the columns of rank r's heads, q | k | v
        send = np.stack([np.concatenate([t[:, r * D // n:(r + 1) * D // n] for t in (q, k, v)], 1)
                         for r in range(n)])
        got = self.c.all_to_all(send).reshape(n * Tl, 3, D // n)  # rows of all ranks, my heads
        ctx = self._attend(got[:T, 0], got[:T, 1], got[:T, 2], valid, nseq)
        back = self.c.all_to_all(self._pad(ctx, n * Tl).reshape(n, Tl, D // n))
        ctx = back.transpose(1, 0, 2).reshape(Tl, D)  # my rows, all heads in order
        return _add(ctx @ L_.wo, L_.bo)

    def _ffn(self, L_: Layer, a):
        f = self.fcols
        u = act(_add(a @ L_.w1[:, f], None if L_.b1 is None else L_.b1[f]), self.spec.act)
        return u @ L_.w2[f, :]  # partial sums

    # -- the whole stack
    def rows(self, T: int) -> int:
        """Rows per rank in sp / a2a (T padded up to a multiple of the rank count)."""
        return -(-T // self.n)

    def local(self, x: np.ndarray) -> np.ndarray:
        """This rank's rows of the full [T, D] (zero rows pad the last shard)."""
        if self.layout == "tp":
            return x
        Tl = self.rows(x.shape[0])
        return self._pad(x, Tl * self.n)[self.r * Tl:(self.r + 1) * Tl].copy()

    def __call__(self, x: np.ndarray, valid: np.ndarray, progress=None) -> np.ndarray:
        """x: this rank's rows (layout tp: all [T, D]; else local(x)); valid [nseq, L]."""
        spec, c = self.spec, self.c
        nseq, L = valid.shape
        T = nseq * L
        for i, L_ in enumerate(self.layers):
            a = norm(x, L_.n1, spec) if spec.pre_norm else x
            if self.layout == "tp":
                y = _add(c.allreduce(self._attn_tp(L_, a, valid, nseq, T)), L_.bo)
            elif self.layout == "sp":
                y = _add(c.reduce_scatter(self._attn_tp(L_, c.all_gather(a), valid, nseq, T)),
                         L_.bo)
            else:
                y = self._attn_a2a(L_, a, valid, nseq, T)
            x = x + y if spec.pre_norm else norm(x + y, L_.n1, spec)
            a = norm(x, L_.n2, spec) if spec.pre_norm else x
            if self.layout == "tp":
                y = _add(c.allreduce(self._ffn(L_, a)), L_.b2)
            else:
                y = _add(c.reduce_scatter(self._ffn(L_, c.all_gather(a))), L_.b2)
            x = (x + y if spec.pre_norm else norm(x + y, L_.n2, spec)).astype(np.float32)
            if progress is not None:
                progress(i)
        return x
