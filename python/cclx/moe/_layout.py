"""The wire rows of cclx.moe and the block-FP8 codec in torch ops (device agnostic: the same code
runs on CPU and CUDA tensors, with no host synchronization).

A dispatched row is bytes (uint8), 16-byte aligned, one per (token, destination rank):

    plain: [H values of the token's dtype][pad to 16][k int32 expert ids][k f32 weights][pad]
    fp8:   [H e4m3 codes][pad to 16][ceil(H/128) f32 block scales][k int32 ids][k f32 weights][pad]

Expert ids are global (0..E-1); a top-k slot whose id was out of range is written as NONE. The
FP8 blocks are those of cclx's FP8 collectives (docs/design/fp8.md): 128 consecutive values of a
row, scale d = amax/448 (amax over the finite values; d = 1 for a block without a nonzero finite
value, d >= 2^-126), codes e4m3fn(x * (1/d)) rounded to nearest even and saturated at +-448
(Inf becomes +-448*d), NaN stays NaN; decode code * d.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

BLOCK = 128
FP8_MAX = 448.0
MIN_SCALE = 2.0 ** -126
NONE = 2 ** 31 - 1  # a top-k slot with no expert (its id was out of range)
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def align16(n: int) -> int:
    return (n + 15) // 16 * 16


@dataclasses.dataclass(frozen=True)
class Layout:
    """Sizes of one dispatch: T tokens of width H, top-k, N ranks, E experts (L per rank);
    `bound` the most tokens any rank dispatches (rows from one source rank)."""
    T: int
    H: int
    k: int
    N: int
    E: int
    bound: int
    esize: int
    fp8: bool

    @property
    def L(self) -> int:
        return self.E // self.N

    @property
    def nb(self) -> int:
        return (self.H + BLOCK - 1) // BLOCK

    @property
    def data_bytes(self) -> int:  # codes or values, padded
        return align16(self.H if self.fp8 else self.H * self.esize)

    @property
    def meta(self) -> int:  # byte offset of the k expert ids
        return self.data_bytes + (4 * self.nb if self.fp8 else 0)

    @property
    def width(self) -> int:  # bytes per row
        return align16(self.meta + 8 * self.k)

    @property
    def cap_send(self) -> int:  # rows this rank sends at most: each token once per rank
        return self.T * min(self.N, self.k)

    @property
    def cap_recv(self) -> int:  # rows this rank receives at most: `bound` from each rank
        return self.N * self.bound

    @property
    def cap_out(self) -> int:  # per-expert rows at most: a received row is in <= min(k, L) blocks
        return self.cap_recv * min(self.k, self.L)


def quantize(x: Any):
    """x [R, H] float -> (codes [R, nb*128] float8_e4m3fn, scales [R, nb] float32), the block
    codec above (the padding of the last block is zeros)."""
    R, H = x.shape
    nb = (H + BLOCK - 1) // BLOCK
    xp = torch.nn.functional.pad(x.float(), (0, nb * BLOCK - H)).view(R, nb, BLOCK)
    amax = torch.where(torch.isfinite(xp), xp.abs(), 0.0).amax(-1)
    # amax / 448 as a true division of two tensors: dividing by a Python scalar is a
    # multiplication by its rounded reciprocal on CUDA but a division on the CPU (different bits).
    d = torch.where(amax > 0, torch.clamp(amax / torch.full_like(amax, FP8_MAX), min=MIN_SCALE),
                    1.0)
    q = torch.clamp(xp * (1.0 / d).unsqueeze(-1), -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(R, nb * BLOCK), d


def dequantize(codes: Any, scales: Any, H: int, dtype: Any):
    """codes [R, >=nb*128 or H] e4m3, scales [R, nb] -> [R, H] in dtype (code * d, in f32)."""
    R = codes.shape[0]
    nb = scales.shape[1]
    c = codes[:, :H].float()
    if nb * BLOCK != H:
        c = torch.nn.functional.pad(c, (0, nb * BLOCK - H))
    v = c.view(R, nb, BLOCK) * scales.unsqueeze(-1)
    return v.view(R, nb * BLOCK)[:, :H].to(dtype)


def pack(tokens: Any, eids: Any, weights: Any, lay: Layout):
    """One wire row per token: [T, width] uint8 (eids int32 [T, k], weights f32 [T, k])."""
    T, H = tokens.shape
    rows = torch.zeros(T, lay.width, dtype=torch.uint8, device=tokens.device)
    if T == 0:
        return rows
    if lay.fp8:
        q, d = quantize(tokens)
        rows[:, :H] = q[:, :H].view(torch.uint8)
        rows[:, lay.data_bytes:lay.meta] = d.view(torch.uint8).view(T, 4 * lay.nb)
    else:
        rows[:, :H * lay.esize] = tokens.contiguous().view(torch.uint8).view(T, H * lay.esize)
    m, k = lay.meta, lay.k
    rows[:, m:m + 4 * k] = eids.to(torch.int32).contiguous().view(torch.uint8).view(T, 4 * k)
    rows[:, m + 4 * k:m + 8 * k] = weights.to(torch.float32).contiguous().view(
        torch.uint8).view(T, 4 * k)
    return rows


def unpack_meta(rows: Any, lay: Layout):
    """(expert ids int64 [R, k], weights f32 [R, k]) of wire rows [R, width]."""
    m, k = lay.meta, lay.k
    eids = rows[:, m:m + 4 * k].view(torch.int32).to(torch.int64)
    w = rows[:, m + 4 * k:m + 8 * k].view(torch.float32)
    return eids, w


def unpack_tokens(rows: Any, lay: Layout, dtype: Any):
    """The tokens of wire rows [R, width] as [R, H] in dtype (FP8 rows dequantized)."""
    H = lay.H
    if lay.fp8:
        codes = rows[:, :H].view(torch.float8_e4m3fn)
        scales = rows[:, lay.data_bytes:lay.meta].view(torch.float32)
        return dequantize(codes, scales, H, dtype)
    return rows[:, :H * lay.esize].view(dtype)
