"""A Llama-shaped transformer with Megatron-style tensor parallelism, in plain torch.

Each rank holds the column-parallel shards of the QKV and gate/up projections and the
row-parallel shards of the attention output and down projections, so every layer ends its
attention block and its MLP with one allreduce of the partial sums (two per layer). The
embedding is replicated (a lookup moves no data between ranks); the LM head is split by
vocabulary and its logits stay sharded.

Sequence parallelism (forward_sp, Megatron-style): the residual stream is split by token rows
over the ranks; each block all-gathers the normalized rows before its column-parallel
projection and reduce-scatters the row-parallel partial sums back to the rows it owns (an
all-gather and a reduce-scatter in place of each allreduce, the same bytes on the wire, and the
norms and residual adds on 1/N of the rows).

Weights and KV-cache contents come from a counter-based hash of (seed, tensor, global index):
every shard is a slice of the same global tensor whatever the number of ranks, so a forward
at N ranks equals the one at 1 rank up to summation order, and nothing is downloaded.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROPE_THETA = 500000.0
NORM_EPS = 1e-5
GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Shape:
    """Model dimensions (all layers alike)."""

    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    layers: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def describe(self) -> str:
        return (f"hidden {self.hidden}, heads {self.heads}, kv heads {self.kv_heads}, "
                f"ffn {self.ffn}, layers {self.layers}, vocab {self.vocab}")


PRESETS: Dict[str, Shape] = {
    "llama3-8b": Shape(hidden=4096, heads=32, kv_heads=8, ffn=14336, layers=32, vocab=128256),
    "llama3-70b": Shape(hidden=8192, heads=64, kv_heads=8, ffn=28672, layers=80, vocab=128256),
}


@dataclasses.dataclass(frozen=True)
class Shard:
    """What one rank of `tp` holds: local sizes and offsets into the global tensors."""

    tp: int
    rank: int
    heads: int          # local query heads
    kv_heads: int       # local KV heads (1, replicated, when tp > kv heads)
    q_off: int          # first global query head
    kv_off: int         # first global KV head
    ffn: int
    ffn_off: int
    vocab: int          # local LM-head rows (vocab / tp rounded up)
    vocab_off: int
    vocab_valid: int    # rows of this shard that are real vocabulary entries


def check_shape(shape: Shape, tp: int) -> None:
    """Raises ValueError unless `shape` can be split over `tp` ranks."""
    if min(shape.hidden, shape.heads, shape.kv_heads, shape.ffn, shape.layers,
           shape.vocab, tp) < 1:
        raise ValueError(f"every dimension must be >= 1 ({shape.describe()}, tp {tp})")
    if shape.hidden % shape.heads:
        raise ValueError(f"hidden {shape.hidden} is not a multiple of heads {shape.heads}")
    if shape.head_dim % 2:
        raise ValueError(f"head dim {shape.head_dim} must be even (rotary embedding)")
    if shape.heads % shape.kv_heads:
        raise ValueError(f"heads {shape.heads} is not a multiple of kv heads {shape.kv_heads}")
    if shape.heads % tp:
        raise ValueError(f"heads {shape.heads} do not split over {tp} ranks")
    if shape.kv_heads % tp and tp % shape.kv_heads:
        raise ValueError(f"kv heads {shape.kv_heads} and {tp} ranks: one must divide the other")
    if shape.ffn % tp:
        raise ValueError(f"ffn {shape.ffn} does not split over {tp} ranks")


def shard(shape: Shape, tp: int, rank: int) -> Shard:
    """Rank `rank`'s part of `shape` at tensor-parallel degree `tp`."""
    check_shape(shape, tp)
    hq = shape.heads // tp
    if shape.kv_heads >= tp:
        hkv = shape.kv_heads // tp
        kv_off = rank * hkv
    else:  # fewer KV heads than ranks: each rank keeps a copy of its group's KV head
        hkv = 1
        kv_off = rank // (tp // shape.kv_heads)
    vl = -(-shape.vocab // tp)
    voff = rank * vl
    return Shard(tp=tp, rank=rank, heads=hq, kv_heads=hkv, q_off=rank * hq, kv_off=kv_off,
                 ffn=shape.ffn // tp, ffn_off=rank * (shape.ffn // tp), vocab=vl,
                 vocab_off=voff, vocab_valid=max(0, min(vl, shape.vocab - voff)))


# ----------------------------------------------------------------------------- arithmetic
def layer_params(shape: Shape, tp: int) -> int:
    """Parameters of one layer held by one rank (projections and the two norms)."""
    s = shard(shape, tp, 0)
    hd = shape.head_dim
    qkv = shape.hidden * (s.heads + 2 * s.kv_heads) * hd
    o = s.heads * hd * shape.hidden
    gate_up = shape.hidden * 2 * s.ffn
    down = s.ffn * shape.hidden
    return qkv + o + gate_up + down + 2 * shape.hidden


def params_per_rank(shape: Shape, tp: int) -> Dict[str, int]:
    """Parameter counts held by one rank: embedding (replicated), LM head shard, layers."""
    s = shard(shape, tp, 0)
    out = {"embedding": shape.vocab * shape.hidden, "lm_head": s.vocab * shape.hidden,
           "per_layer": layer_params(shape, tp), "final_norm": shape.hidden}
    out["layers"] = out["per_layer"] * shape.layers
    out["total"] = out["embedding"] + out["lm_head"] + out["layers"] + out["final_norm"]
    return out


def weight_bytes(shape: Shape, tp: int, esize: int) -> int:
    return params_per_rank(shape, tp)["total"] * esize


def kv_bytes(shape: Shape, tp: int, batch: int, positions: int, esize: int) -> int:
    """KV cache of one rank: K and V for every layer, sequence and position."""
    s = shard(shape, tp, 0)
    return 2 * shape.layers * batch * s.kv_heads * positions * shape.head_dim * esize


def allreduce_per_step(shape: Shape, tokens: int, esize: int) -> Dict[str, int]:
    """The allreduces of one forward step over `tokens` tokens (batch x new tokens): two per
    layer, each of tokens x hidden elements."""
    per_call = tokens * shape.hidden * esize
    calls = 2 * shape.layers
    return {"calls": calls, "bytes_per_call": per_call, "bytes_per_step": calls * per_call}


def activation_bytes(shape: Shape, tp: int, tokens: int, sequences: int, esize: int) -> int:
    """Generous bound of the transient memory of one step over `tokens` tokens of
    `sequences` sequences (logits of one position each, plus float32 copies for checks)."""
    s = shard(shape, tp, 0)
    hd = shape.head_dim
    per_token = (6 * shape.hidden + 2 * (s.heads + 2 * s.kv_heads) * hd + 4 * s.ffn) * esize
    per_token += 8 * shape.hidden  # float32 norm temporaries
    return tokens * per_token + sequences * s.vocab * (esize + 8 * 4)


def fit_layers(shape: Shape, tp: int, esize: int, budget: int, kv_batch: int, kv_pos: int,
               step_tokens: int, reserve: int) -> int:
    """Most layers (<= shape.layers) whose weights, KV cache of kv_batch x kv_pos and one
    step's activations fit `budget` bytes with `reserve` left over; 0 if not even one."""
    p = params_per_rank(shape, tp)
    fixed = ((p["total"] - p["layers"]) * esize
             + activation_bytes(shape, tp, step_tokens, kv_batch, esize) + reserve)
    per_layer = (layer_params(shape, tp) * esize
                 + kv_bytes(dataclasses.replace(shape, layers=1), tp, kv_batch, kv_pos, esize))
    if budget <= fixed:
        return 0
    return int(min(shape.layers, (budget - fixed) // per_layer))


# ----------------------------------------------------------------------------- random fill
_M31 = (1 << 31) - 1
_CHUNK = 1 << 24


def _mix(torch: Any, idx: Any, seed: int) -> Any:
    """Uniform floats in [-1, 1) from int64 indices: an invertible multiply/xor-shift hash on
    31-bit words (products stay below 2^62, so no overflow on any device)."""
    s = (seed * 0x9E3779B1 + 0x7F4A7C15) & _M31
    x = torch.bitwise_and(idx, _M31)
    x.bitwise_xor_(s)
    x.mul_(0x5BD1E995 & _M31)
    x.add_(torch.bitwise_and(torch.bitwise_right_shift(idx, 31), _M31))
    x.bitwise_and_(_M31)
    for shift, mult in ((15, 0x2C1B3C6D), (13, 0x297A2D39), (16, 0x1B873593)):
        x.bitwise_xor_(torch.bitwise_right_shift(x, shift))
        x.mul_(mult)
        x.bitwise_and_(_M31)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 16))
    return x.to(torch.float32).mul_(2.0 / (1 << 31)).sub_(1.0)


def hash_fill_(out: Any, global_shape: Sequence[int], offsets: Sequence[int], seed: int,
               scale: float) -> Any:
    """Fills `out` with the block at `offsets` of a global tensor of `global_shape` whose
    elements are uniform in [-scale, scale) and depend only on (seed, global index)."""
    import torch

    nd = out.dim()
    assert nd == len(global_shape) == len(offsets) and nd >= 1
    gstr = [1] * nd
    for i in range(nd - 2, -1, -1):
        gstr[i] = gstr[i + 1] * int(global_shape[i + 1])
    dev = out.device
    rest = torch.zeros((), dtype=torch.int64, device=dev)
    for i in range(1, nd):
        view = [1] * (nd - 1)
        view[i - 1] = -1
        ax = (torch.arange(out.shape[i], dtype=torch.int64, device=dev) + offsets[i]) * gstr[i]
        rest = rest + ax.view(view)
    rest = rest.reshape(-1)
    step = max(1, _CHUNK // max(1, rest.numel()))
    for r0 in range(0, out.shape[0], step):
        r1 = min(out.shape[0], r0 + step)
        rows = (torch.arange(r0, r1, dtype=torch.int64, device=dev) + offsets[0]) * gstr[0]
        vals = _mix(torch, rows[:, None] + rest[None, :], seed)
        out[r0:r1].copy_(vals.mul_(scale).view(out[r0:r1].shape))
    return out


# ----------------------------------------------------------------------------- the model
Reduce = Callable[[Any], Any]
# out(slot, rows, cols) -> a (rows, cols) tensor the row-parallel projection writes into (slot 0:
# attention output, 1: MLP down projection), e.g. memory a communicator registered beforehand
OutBuf = Callable[[int, int, int], Any]
# Sequence parallelism: gather(rows of this rank) -> rows of every rank (rank order);
# scatter(partial sums of all rows) -> the sums of this rank's rows.
Gather = Callable[[Any], Any]
Scatter = Callable[[Any], Any]

# fused(t, residual, weight) -> (rmsnorm(allreduce(t) + residual) * weight, allreduce(t) +
# residual): the allreduce, the residual add and the next norm in one call
# (Comm.all_reduce_rmsnorm)
Fused = Callable[[Any, Any, Any], Tuple[Any, Any]]


class KVCache:
    """Per-layer K and V of shape (batch, local kv heads, positions, head dim)."""

    def __init__(self, k: List[Any], v: List[Any]) -> None:
        self.k, self.v = k, v

    @property
    def positions(self) -> int:
        return int(self.k[0].shape[2]) if self.k else 0


class TPLlama:
    """One rank's shard of the model. forward() calls `reduce(t)` (in place, sum over the
    tensor-parallel ranks) twice per layer."""

    def __init__(self, shape: Shape, tp: int, rank: int, device: Any, dtype: Any,
                 seed: int = 0, max_positions: int = 8192) -> None:
        import torch

        self.torch = torch
        self.shape = shape
        self.sh = shard(shape, tp, rank)
        self.device = torch.device(device)
        self.dtype = dtype
        self.seed = seed
        H, hd, s = shape.hidden, shape.head_dim, self.sh
        self._tag = 0

        def mat(gshape, offs, lshape, fan_in, out=None):
            # Uniform with variance 1/fan_in: unit-scale outputs for unit-scale inputs.
            t = out if out is not None else torch.empty(lshape, dtype=dtype, device=self.device)
            return hash_fill_(t, gshape, offs, self._next_seed(), math.sqrt(3.0 / fan_in))

        self.embed = hash_fill_(torch.empty((shape.vocab, H), dtype=dtype, device=self.device),
                                (shape.vocab, H), (0, 0), self._next_seed(), 1.0)
        self.layers: List[Dict[str, Any]] = []
        nq, nkv = s.heads * hd, s.kv_heads * hd
        for _ in range(shape.layers):
            qkv = torch.empty((nq + 2 * nkv, H), dtype=dtype, device=self.device)
            mat((shape.heads * hd, H), (s.q_off * hd, 0), None, H, qkv[:nq])
            mat((shape.kv_heads * hd, H), (s.kv_off * hd, 0), None, H, qkv[nq:nq + nkv])
            mat((shape.kv_heads * hd, H), (s.kv_off * hd, 0), None, H, qkv[nq + nkv:])
            gu = torch.empty((2 * s.ffn, H), dtype=dtype, device=self.device)
            mat((shape.ffn, H), (s.ffn_off, 0), None, H, gu[:s.ffn])
            mat((shape.ffn, H), (s.ffn_off, 0), None, H, gu[s.ffn:])
            self.layers.append({
                "attn_norm": torch.ones(H, dtype=dtype, device=self.device),
                "qkv": qkv,
                "o": mat((H, shape.heads * hd), (0, s.q_off * hd), (H, nq), shape.heads * hd),
                "mlp_norm": torch.ones(H, dtype=dtype, device=self.device),
                "gate_up": gu,
                "down": mat((H, shape.ffn), (0, s.ffn_off), (H, s.ffn), shape.ffn),
            })
        self.final_norm = torch.ones(H, dtype=dtype, device=self.device)
        self.lm_head = torch.zeros((s.vocab, H), dtype=dtype, device=self.device)
        if s.vocab_valid:
            mat((shape.vocab, H), (s.vocab_off, 0), None, H, self.lm_head[:s.vocab_valid])
        inv = 1.0 / (ROPE_THETA ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = ang.cos().to(device=self.device, dtype=dtype)
        self.sin = ang.sin().to(device=self.device, dtype=dtype)
        self._gqa_kw = self._probe_gqa()

    def _next_seed(self) -> int:
        self._tag += 1
        return self.seed * 1000003 + self._tag

    def _probe_gqa(self) -> bool:
        """Whether scaled_dot_product_attention takes enable_gqa (else K/V are repeated)."""
        torch = self.torch
        q = torch.zeros((1, 2, 1, 2))
        try:
            torch.nn.functional.scaled_dot_product_attention(q, q[:, :1], q[:, :1],
                                                             enable_gqa=True)
            return True
        except TypeError:
            return False

    # ------------------------------------------------------------------------- inputs
    def new_cache(self, batch: int, positions: int, seed: int = 1) -> KVCache:
        """A KV cache of `positions` slots per sequence holding normal random values (the
        context a decode step attends to); each global KV head has its own generator, so the
        shards of any number of ranks hold the same values."""
        torch, s, shp = self.torch, self.sh, self.shape
        hd = shp.head_dim
        ks, vs = [], []
        for li in range(shp.layers):
            pair = []
            for j in range(2):
                t = torch.empty((batch, s.kv_heads, positions, hd), dtype=self.dtype,
                                device=self.device)
                for h in range(s.kv_heads):
                    g = torch.Generator(device=self.device)
                    g.manual_seed(self.seed * 1000003 + ((seed * 4096 + li) * 2 + j) * 65536
                                  + s.kv_off + h)
                    t[:, h].copy_(torch.randn((batch, positions, hd), generator=g,
                                              device=self.device, dtype=torch.float32))
                pair.append(t)
            ks.append(pair[0])
            vs.append(pair[1])
        return KVCache(ks, vs)

    def tokens(self, batch: int, length: int, seed: int = 2) -> Any:
        """Token ids (batch, length), identical on every rank."""
        torch = self.torch
        u = hash_fill_(torch.empty((batch, length), dtype=torch.float32, device=self.device),
                       (batch, length), (0, 0), seed + (1 << 21), 1.0)
        return ((u + 1.0) * 0.5 * self.shape.vocab).long().clamp_(0, self.shape.vocab - 1)

    # ------------------------------------------------------------------------- forward
    def _norm(self, x: Any, w: Any) -> Any:
        torch = self.torch
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return xf.to(self.dtype) * w

    def _rope(self, x: Any, cos: Any, sin: Any) -> Any:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return self.torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def _attend(self, q: Any, k: Any, v: Any, causal: bool) -> Any:
        """q (B, hq, T, hd), k/v (B, hkv, S, hd) -> (B, hq, T, hd)."""
        F = self.torch.nn.functional
        g = q.shape[1] // k.shape[1]
        if g > 1 and not self._gqa_kw:
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if g > 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def _row_parallel(self, x: Any, w: Any, out: Optional[OutBuf], slot: int) -> Any:
        """x @ w.T, written into out(slot, ...) when given (the same matrix product F.linear
        runs, with the destination chosen by the caller)."""
        if out is None:
            return self.torch.nn.functional.linear(x, w)
        rows, k = x.numel() // x.shape[-1], x.shape[-1]
        buf = out(slot, rows, int(w.shape[0]))
        self.torch.mm(x.reshape(rows, k), w.t(), out=buf)
        return buf.view(*x.shape[:-1], int(w.shape[0]))

    def forward(self, tokens: Any, pos0: int, cache: KVCache, reduce: Optional[Reduce],
                out: Optional[OutBuf] = None, fused: Optional[Fused] = None) -> Tuple[Any, Any]:
        """One step over tokens (B, T) at positions pos0..pos0+T-1. T == 1 (decode) attends to
        cache slots 0..pos0 after writing the new K/V at pos0; T > 1 (prefill, pos0 == 0) writes
        the cache and attends causally. Returns (this rank's logits of the last position
        (B, local vocab), last hidden state (B, hidden)). reduce=None skips the allreduces;
        out places the row-parallel outputs (the allreduces' buffers), see OutBuf. fused: each
        allreduce runs with the residual add and the norm after it (the next layer's attention
        norm, or the final norm after the last layer) as one call, see Fused; reduce is then
        not used."""
        torch = self.torch
        F = torch.nn.functional
        s, hd = self.sh, self.shape.head_dim
        B, T = int(tokens.shape[0]), int(tokens.shape[1])
        nq, nkv = s.heads * hd, s.kv_heads * hd
        if T > 1 and pos0 != 0:
            raise ValueError("prefill starts at position 0")
        if pos0 + T > cache.positions:
            raise ValueError(f"positions {pos0}..{pos0 + T - 1} exceed the cache "
                             f"({cache.positions})")
        cos = self.cos[pos0:pos0 + T][None, :, None, :]
        sin = self.sin[pos0:pos0 + T][None, :, None, :]
        x = F.embedding(tokens, self.embed)
        h = self._norm(x, self.layers[0]["attn_norm"]) if fused is not None and self.layers else x
        for li, w in enumerate(self.layers):
            if fused is None:
                h = self._norm(x, w["attn_norm"])
            qkv = F.linear(h, w["qkv"])
            q = self._rope(qkv[..., :nq].view(B, T, s.heads, hd), cos, sin)
            k = self._rope(qkv[..., nq:nq + nkv].view(B, T, s.kv_heads, hd), cos, sin)
            v = qkv[..., nq + nkv:].view(B, T, s.kv_heads, hd)
            kc, vc = cache.k[li], cache.v[li]
            kc[:, :, pos0:pos0 + T].copy_(k.transpose(1, 2))
            vc[:, :, pos0:pos0 + T].copy_(v.transpose(1, 2))
            if T == 1:
                # Decode: the query heads of one KV head form its "sequence" (no mask needed).
                qg = q.view(B, s.kv_heads, s.heads // s.kv_heads, hd)
                a = self._attend(qg, kc[:, :, :pos0 + 1], vc[:, :, :pos0 + 1], False)
                a = a.reshape(B, 1, nq)
            else:
                a = self._attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True)
                a = a.transpose(1, 2).reshape(B, T, nq)
            o = self._row_parallel(a, w["o"], out, 0)
            if fused is not None:
                h, x = fused(o, x, w["mlp_norm"])
            else:
                if reduce is not None:
                    reduce(o)
                x = x + o
                h = self._norm(x, w["mlp_norm"])
            gu = F.linear(h, w["gate_up"])
            d = self._row_parallel(F.silu(gu[..., :s.ffn]) * gu[..., s.ffn:], w["down"], out, 1)
            if fused is not None:
                nxt = (self.layers[li + 1]["attn_norm"] if li + 1 < len(self.layers)
                       else self.final_norm)
                h, x = fused(d, x, nxt)
                continue
            if reduce is not None:
                reduce(d)
            x = x + d
        last = x[:, -1]
        normed = h[:, -1] if fused is not None and self.layers else self._norm(last, self.final_norm)
        logits = F.linear(normed, self.lm_head)
        return logits, last

    def forward_sp(self, tokens: Any, pos0: int, cache: KVCache, gather: Gather,
                   scatter: Scatter) -> Tuple[Any, Any]:
        """forward() with sequence parallelism: the B x T token rows (padded with zero rows to a
        multiple of the ranks) are split in rank order; gather/scatter run twice per layer, and
        once more at the end for the last positions' hidden states. Same results as forward()
        up to summation order."""
        torch = self.torch
        F = torch.nn.functional
        s, hd, H = self.sh, self.shape.head_dim, self.shape.hidden
        B, T = int(tokens.shape[0]), int(tokens.shape[1])
        nq, nkv = s.heads * hd, s.kv_heads * hd
        if T > 1 and pos0 != 0:
            raise ValueError("prefill starts at position 0")
        if pos0 + T > cache.positions:
            raise ValueError(f"positions {pos0}..{pos0 + T - 1} exceed the cache "
                             f"({cache.positions})")
        rows = B * T
        per = -(-rows // s.tp)
        pad = per * s.tp - rows

        def padded(t: Any) -> Any:  # (B, T, H) -> (rows + pad, H)
            t = t.reshape(rows, H)
            return torch.cat((t, t.new_zeros(pad, H))) if pad else t

        def full(t: Any) -> Any:  # gathered rows -> (B, T, H)
            return t[:rows].view(B, T, H)

        cos = self.cos[pos0:pos0 + T][None, :, None, :]
        sin = self.sin[pos0:pos0 + T][None, :, None, :]
        x = padded(F.embedding(tokens, self.embed))[s.rank * per:(s.rank + 1) * per].contiguous()
        for li, w in enumerate(self.layers):
            h = full(gather(self._norm(x, w["attn_norm"])))
            qkv = F.linear(h, w["qkv"])
            q = self._rope(qkv[..., :nq].view(B, T, s.heads, hd), cos, sin)
            k = self._rope(qkv[..., nq:nq + nkv].view(B, T, s.kv_heads, hd), cos, sin)
            v = qkv[..., nq + nkv:].view(B, T, s.kv_heads, hd)
            kc, vc = cache.k[li], cache.v[li]
            kc[:, :, pos0:pos0 + T].copy_(k.transpose(1, 2))
            vc[:, :, pos0:pos0 + T].copy_(v.transpose(1, 2))
            if T == 1:
                qg = q.view(B, s.kv_heads, s.heads // s.kv_heads, hd)
                a = self._attend(qg, kc[:, :, :pos0 + 1], vc[:, :, :pos0 + 1], False)
                a = a.reshape(B, 1, nq)
            else:
                a = self._attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True)
                a = a.transpose(1, 2).reshape(B, T, nq)
            x = x + scatter(padded(F.linear(a, w["o"])))
            h = full(gather(self._norm(x, w["mlp_norm"])))
            gu = F.linear(h, w["gate_up"])
            x = x + scatter(padded(F.linear(F.silu(gu[..., :s.ffn]) * gu[..., s.ffn:], w["down"])))
        last = full(gather(x))[:, -1]
        logits = F.linear(self._norm(last, self.final_norm), self.lm_head)
        return logits, last

    def masked_logits(self, logits: Any) -> Any:
        """Logits with this shard's padding rows (beyond the vocabulary) at -inf."""
        if self.sh.vocab_valid == self.sh.vocab:
            return logits
        out = logits.float().clone()
        out[:, self.sh.vocab_valid:] = float("-inf")
        return out
