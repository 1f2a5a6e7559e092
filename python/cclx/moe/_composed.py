"""The composed route of cclx.moe.Buffer: the same outputs as the kernels (rank-major receive
slots, expert-major entries, cclx's FP8 codec, the same f32 sums in the same order) from torch
ops on the tokens' device and the communicator's all-to-all(-v), for communicators whose ranks
cannot map each other's memory (several hosts, peer memory off). No host synchronization when
the comm has device_alltoallv_single (_route.a2av); otherwise the split sizes are read on the
host. Buffers are allocated once, in __init__ (docs/design/moe.md, "Routes")."""
from __future__ import annotations

from typing import Any

import torch

from ._route import a2av

BLOCK = 128


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


def _ones(n: int, H: int, dtype: Any, dev: Any) -> Any:
    """[n, H] of all-ones bytes in dtype (cclx's poison: NaN in every float type)."""
    es = torch.empty((), dtype=dtype).element_size()
    return torch.full((n, H * es), 255, dtype=torch.uint8, device=dev).view(dtype)


def quantize(x: Any):
    """cclx's FP8 block codec (core/elements/fp8_codec.h) in torch ops: (codes uint8 [R, H],
    metas float32 [R, nb]; see Recv in buffer.py). Every step one f32 operation, tensor by
    tensor (a division by a Python scalar is a multiply by its reciprocal on CUDA)."""
    x = x.float()
    R, H = x.shape
    nb = (H + BLOCK - 1) // BLOCK
    dev = x.device
    xp = torch.nn.functional.pad(x, (0, nb * BLOCK - H)).view(R, nb, BLOCK)
    zero = torch.zeros((), dtype=torch.float32, device=dev)
    amax = torch.where(torch.isfinite(xp), xp.abs(), zero).amax(-1)
    inf = torch.isinf(xp).any(-1)
    den = torch.where(inf, torch.full((), 416.0, device=dev), torch.full((), 448.0, device=dev))
    d = torch.where(amax > 0, torch.clamp(amax / den, min=2.0 ** -126),
                    torch.ones((), dtype=torch.float32, device=dev))
    q = torch.ones((), dtype=torch.float32, device=dev) / d
    codes = (xp * q.unsqueeze(-1)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    codes = torch.where(torch.isnan(xp), torch.full((), 0x7F, dtype=torch.uint8, device=dev), codes)
    codes = torch.where(torch.isposinf(xp), torch.full((), 0x7E, dtype=torch.uint8, device=dev),
                        codes)
    codes = torch.where(torch.isneginf(xp), torch.full((), 0xFE, dtype=torch.uint8, device=dev),
                        codes)
    meta = d.view(torch.int32) | torch.where(inf, torch.full((), -2 ** 31, dtype=torch.int32,
                                                             device=dev), 0)
    return codes.view(R, nb * BLOCK)[:, :H], meta.view(torch.float32)


class Composed:
    """Buffer's state and calls on the composed route (buf: the Buffer being built)."""

    def __init__(self, buf: Any) -> None:
        self.buf, self.comm = buf, buf.comm
        N, B, H, L, k = buf.num_ranks, buf.max_tokens, buf.hidden, buf.local_experts, buf.top_k
        self.N, self.B, self.H, self.L, self.k, self.E = N, B, H, L, k, buf.num_experts
        self.kk = min(k, L)
        dev = buf.comm.get_device()
        self.dev = dev
        es = torch.empty((), dtype=buf.dtype).element_size()
        self.nb = (H + BLOCK - 1) // BLOCK
        self.data_bytes = _align16(H if buf.fp8 else H * es)
        self.scale_off = self.data_bytes
        self.meta_off = self.data_bytes + (4 * self.nb if buf.fp8 else 0)
        self.width = _align16(self.meta_off + 4 * (1 + 3 * k))  # t, ids, weights, positions
        S = N * B
        i32 = dict(dtype=torch.int32, device=dev)
        v = {}
        if buf.fp8:
            v["x"] = torch.zeros(S, H, dtype=torch.float8_e4m3fn, device=dev)
            v["scales"] = torch.zeros(S, self.nb, dtype=torch.float32, device=dev)
        else:
            v["x"] = torch.zeros(S, H, dtype=buf.dtype, device=dev)
        v["recv_counts"] = torch.zeros(N, **i32)
        v["expert_counts"] = torch.zeros(L, **i32)
        v["expert_offsets"] = torch.zeros(L + 1, **i32)
        v["entry_rows"] = torch.zeros(S * self.kk, **i32)
        self.views = v
        self.slot_entries = torch.full((S, self.kk), -1, dtype=torch.int64, device=dev)
        self.slot_w = torch.zeros(S, self.kk, dtype=torch.float32, device=dev)
        self.recv = torch.empty(S, self.width, dtype=torch.uint8, device=dev)
        self.ids = torch.full((B, k), -1, dtype=torch.int64, device=dev)
        self.w = torch.zeros(B, k, dtype=torch.float32, device=dev)
        self.T = 0
        cap = B * min(N, k)
        self.bytes = sum(t.numel() * t.element_size() for t in list(v.values()) + [
            self.slot_entries, self.slot_w, self.recv, self.ids, self.w]) + cap * self.width

    # --------------------------------------------------------------- dispatch
    def dispatch(self, x: Any, ids: Any, w: Any, cached: bool) -> None:
        N, B, H, L, k, E = self.N, self.B, self.H, self.L, self.k, self.E
        dev = x.device
        T = x.shape[0]
        i64 = dict(dtype=torch.int64, device=dev)
        if not cached:
            nid = ids.to(torch.int64)
            self.ids[:T] = torch.where((nid >= 0) & (nid < E), nid, -1)
            self.w[:T] = w
        self.T = T
        nid, wt = self.ids[:T], self.w[:T]
        ok = nid >= 0
        dest = torch.where(ok, torch.div(nid, L, rounding_mode="floor"), N)
        slot = torch.arange(k, device=dev)
        earlier = slot.unsqueeze(1) > slot.unsqueeze(0)  # [j, j']: j' < j
        first_rank = ok & ~((dest.unsqueeze(2) == dest.unsqueeze(1)) & earlier & ok.unsqueeze(1)).any(-1)
        first_exp = ok & ~((nid.unsqueeze(2) == nid.unsqueeze(1)) & earlier & ok.unsqueeze(1)).any(-1)
        mask = torch.zeros(T, N + 1, dtype=torch.int64, device=dev).scatter_(
            1, torch.where(first_rank, dest, N), 1)[:, :N]
        pos_d = mask.cumsum(0) - mask                                   # [T, N]
        send_counts = mask.sum(0)
        send_off = send_counts.cumsum(0) - send_counts
        oh = torch.zeros(T, E + 1, dtype=torch.int64, device=dev).scatter_(
            1, torch.where(first_exp, nid, E), 1)[:, :E]
        ecnt = oh.sum(0)                                                # [E]
        epos = torch.where(first_exp, (oh.cumsum(0) - oh).gather(1, nid.clamp(min=0)), -1)
        # tokRows of the kernels: the first slot of each rank -> the row index on the way back
        self.comb_idx = torch.where(first_rank, send_off.gather(0, dest.clamp(max=N - 1).flatten())
                                    .view(T, k) + pos_d.gather(1, dest.clamp(max=N - 1)), -1)
        self.tok_nan = (~ok).any(1)
        # one wire row per token: payload, then t, ids, weights, positions (int32 / f32)
        rows = torch.zeros(T, self.width, dtype=torch.uint8, device=dev)
        if T:
            if self.buf.fp8:
                codes, meta = quantize(x)
                rows[:, :H] = codes
                rows[:, self.scale_off:self.scale_off + 4 * self.nb] = meta.view(torch.uint8)
            else:
                rows[:, :x.element_size() * H] = x.contiguous().view(torch.uint8)
            rec = torch.cat([torch.arange(T, **i64).unsqueeze(1), nid, wt.view(torch.int32).long(),
                             epos], 1).to(torch.int32)
            rows[:, self.meta_off:self.meta_off + 4 * (1 + 3 * k)] = rec.view(torch.uint8)
        S_cap = B * min(N, k)
        pos = torch.where(mask.bool(), send_off + pos_d, S_cap)        # [T, N]
        slot_tok = torch.zeros(S_cap + 1, **i64)
        slot_tok.scatter_(0, pos.flatten(), torch.arange(T, **i64).repeat_interleave(N))
        send = rows.index_select(0, slot_tok[:S_cap]) if T else rows.new_zeros(S_cap, self.width)
        self.send_counts = send_counts
        # counts, per-expert counts, rows
        recv_counts = torch.empty(N, **i64)
        self.comm.all_to_all_single(recv_counts, send_counts)
        ecnt_from = torch.empty(N * L, **i64)
        self.comm.all_to_all_single(ecnt_from, ecnt.contiguous())
        a2av(self.comm, self.recv, send, recv_counts, send_counts)
        self.recv_counts = recv_counts
        self._receive(recv_counts, ecnt_from.view(N, L))

    def _receive(self, recv_counts: Any, ecnt: Any) -> None:
        N, B, H, L, k, v = self.N, self.B, self.H, self.L, self.k, self.views
        dev = self.recv.device
        me = self.buf.rank
        i64 = dict(dtype=torch.int64, device=dev)
        roff = recv_counts.cumsum(0) - recv_counts
        s_of = torch.arange(N, **i64).repeat_interleave(B)
        p_of = torch.arange(B, **i64).repeat(N)
        live = p_of < recv_counts[s_of]                                  # [N*B]
        src = torch.where(live, roff[s_of] + p_of, 0)
        rows = self.recv.index_select(0, src)                           # rank-major
        if self.buf.fp8:
            v["x"].view(torch.uint8).copy_(torch.where(live.unsqueeze(1), rows[:, :H],
                                                       v["x"].view(torch.uint8)))
            sc = rows[:, self.scale_off:self.scale_off + 4 * self.nb].contiguous().view(torch.float32)
            v["scales"].copy_(torch.where(live.unsqueeze(1), sc, v["scales"]))
        else:
            es = v["x"].element_size()
            vals = rows[:, :es * H].contiguous().view(v["x"].dtype)
            v["x"].copy_(torch.where(live.unsqueeze(1), vals, v["x"]))
        rec = rows[:, self.meta_off:self.meta_off + 4 * (1 + 3 * k)].contiguous().view(torch.int32)
        rid = rec[:, 1:1 + k].long()
        rw = rec[:, 1 + k:1 + 2 * k].contiguous().view(torch.float32)
        rpos = rec[:, 1 + 2 * k:1 + 3 * k].long()
        ok = (rid >= 0) & live.unsqueeze(1)
        slot = torch.arange(k, device=dev)
        earlier = slot.unsqueeze(1) > slot.unsqueeze(0)
        same = (rid.unsqueeze(2) == rid.unsqueeze(1)) & ok.unsqueeze(1)
        first = ok & ~(same & earlier).any(-1)
        local = first & (torch.div(rid, L, rounding_mode="floor") == me)
        wsum = rw.clone()                                               # ordered f32 sums
        for j2 in range(1, k):
            later = (slot < j2).unsqueeze(0) & same[:, :, j2]
            wsum = torch.where(later, wsum + rw[:, j2:j2 + 1], wsum)
        tot = ecnt.sum(0)                                               # [L]
        offs = torch.cat([torch.zeros(1, **i64), tot.cumsum(0)])
        base = offs[:L].unsqueeze(0) + (ecnt.cumsum(0) - ecnt)          # [N, L]
        lx = (rid - me * L).clamp(0, L - 1)
        entry = torch.where(local, base[s_of].gather(1, lx) + rpos, -1)
        v["recv_counts"].copy_(recv_counts)
        v["expert_counts"].copy_(tot)
        v["expert_offsets"].copy_(offs)
        rowid = torch.arange(N * B, **i64).unsqueeze(1).expand(-1, k)
        cap = v["entry_rows"].shape[0]
        er = torch.zeros(cap + 1, **i64)
        er.scatter_(0, torch.where(local, entry, cap).flatten(), rowid.flatten())
        v["entry_rows"].copy_(er[:cap])
        # the slot's local entries in top-k order
        c = local.long().cumsum(1) - 1
        se = torch.full((N * B, self.kk + 1), -1, **i64)
        se.scatter_(1, torch.where(local, c, self.kk), torch.where(local, entry, -1))
        sw = torch.zeros(N * B, self.kk + 1, dtype=torch.float32, device=dev)
        sw.scatter_(1, torch.where(local, c, self.kk), torch.where(local, wsum, 0.0))
        self.slot_entries.copy_(se[:, :self.kk])
        self.slot_w.copy_(sw[:, :self.kk])
        self.live, self.src = live, src

    # --------------------------------------------------------------- combine
    def combine(self, eo: Any, out: Any) -> Any:
        N, B, H, k = self.N, self.B, self.H, self.k
        dev = eo.device
        se, sw = self.slot_entries, self.slot_w
        rows_in = eo.shape[0]
        bad = ((se >= rows_in) & (se >= 0)).any(1)
        acc = torch.zeros(N * B, H, dtype=torch.float32, device=dev)
        for c in range(self.kk):
            e = se[:, c]
            has = (e >= 0) & (e < rows_in)
            g = eo.index_select(0, e.clamp(0, max(rows_in - 1, 0))).float() if rows_in else acc
            prod = sw[:, c:c + 1] * g
            acc = torch.where(has.unsqueeze(1), prod if c == 0 else acc + prod, acc)
        part = torch.where(bad.unsqueeze(1), _ones(1, H, eo.dtype, dev), acc.to(eo.dtype))
        # back to the owners, packed per source as received (row total_cap: the dump)
        total_cap = self.recv.shape[0]
        back_send = torch.zeros(total_cap + 1, H, dtype=eo.dtype, device=dev)
        back_send.index_copy_(0, torch.where(self.live, self.src, total_cap), part)
        cap_back = B * min(N, k)
        back = torch.empty(cap_back, H, dtype=eo.dtype, device=dev)
        a2av(self.comm, back, back_send[:total_cap], self.send_counts, self.recv_counts)
        T = self.T
        y = torch.zeros(T, H, dtype=torch.float32, device=dev)
        first = torch.ones(T, 1, dtype=torch.bool, device=dev)
        for j in range(k):
            ci = self.comb_idx[:, j]
            has = (ci >= 0).unsqueeze(1)
            g = back.index_select(0, ci.clamp(min=0)).float()
            y = torch.where(has, torch.where(first, g, y + g), y)
            first = first & ~has
        out.copy_(torch.where(self.tok_nan.unsqueeze(1), _ones(1, H, eo.dtype, dev),
                              y.to(eo.dtype)))
        return out
