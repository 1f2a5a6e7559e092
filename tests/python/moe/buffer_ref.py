"""References for cclx.moe.Buffer (shared by the CPU cases and the GPU cases): cclx's FP8 block
codec in torch ops (the bits of core/elements/fp8_codec.h), the rank-major receive slots and the
expert-major entries a rank must get, one dispatch + experts + combine with every check, and
the inputs (moe_ref's, plus ids out of range)."""
from __future__ import annotations

import torch

from moe_ref import check_combine, expert_fn, inputs

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
BLOCK = 128


def codec(x):
    """cclx's FP8 codec of rows x [R, H] (float): (codes uint8 [R, H], metas int32 [R, nb]):
    d = amax / 448 of the block's finite values (/ 416 and the sign bit set when it holds an Inf;
    1 without a finite non-zero; at least 2^-126), codes e4m3(x * (1 / d)) rounded to nearest
    even, saturating; NaN 0x7F; +-Inf 0x7E / 0xFE. Every step one f32 operation."""
    x = x.float()
    R, H = x.shape
    nb = (H + BLOCK - 1) // BLOCK
    xp = torch.nn.functional.pad(x, (0, nb * BLOCK - H)).view(R, nb, BLOCK)
    fin = torch.isfinite(xp)
    amax = torch.where(fin, xp.abs(), torch.zeros((), dtype=torch.float32)).amax(-1)
    inf = torch.isinf(xp).any(-1)
    den = torch.where(inf, torch.tensor(416.0), torch.tensor(448.0))
    d = torch.where(amax > 0, torch.clamp(amax / den, min=2.0 ** -126), torch.tensor(1.0))
    q = torch.tensor(1.0) / d
    y = (xp * q.unsqueeze(-1)).clamp(-448.0, 448.0)
    codes = y.to(torch.float8_e4m3fn).view(torch.uint8).clone()
    codes[torch.isnan(xp)] = 0x7F
    codes[torch.isposinf(xp)] = 0x7E
    codes[torch.isneginf(xp)] = 0xFE
    meta = d.view(torch.int32) | torch.where(inf, torch.tensor(-2 ** 31, dtype=torch.int32), 0)
    return codes.view(R, nb * BLOCK)[:, :H], meta


def with_bad_ids(data, E, seed):
    """Every third token of each rank gets one id out of range (-1 or E + 5 alternately)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for x, ids, w in data:
        ids = ids.clone()
        for t in range(0, ids.shape[0], 3):
            j = int(torch.randint(0, ids.shape[1], (1,), generator=g))
            ids[t, j] = -1 if t % 2 == 0 else E + 5
        out.append((x, ids, w))
    return out


def valid(ids, E):
    return [[int(e) for e in row if 0 <= int(e) < E] for row in ids.tolist()]


def expected(data, rank, L, E, B):
    """What rank `rank` must receive: (slots: per source the token indices it sends here, in
    order; entries: per local expert the rank-major rows s*B + p, in order)."""
    slots, where = [], {}
    for s, (_, ids, _) in enumerate(data):
        mine = [t for t, row in enumerate(valid(ids, E)) if any(e // L == rank for e in row)]
        slots.append(mine)
        for p, t in enumerate(mine):
            where[(s, t)] = s * B + p
    entries = [[] for _ in range(L)]
    for s, (_, ids, _) in enumerate(data):
        for t, row in enumerate(valid(ids, E)):
            for e in dict.fromkeys(row):
                if e // L == rank:
                    entries[e - rank * L].append(where[(s, t)])
    return slots, entries


def experts_of(recv, h, rank, L, dtype, rows=None):
    """expert_out for the entries of a dispatch: f_e of each entry's (dequantized) row; `rows`
    (default: the entries) rows in all."""
    offs = h.expert_offsets.cpu().tolist()
    n = offs[L]
    x = recv.dequantize(dtype) if recv.scales is not None else recv.x
    er = h.entry_rows[:n].long()
    xin = x[er].cpu()
    out = torch.zeros(n if rows is None else rows, x.shape[1], dtype=dtype)
    for l in range(L):
        a, b = offs[l], offs[l + 1]
        out[a:b] = expert_fn(xin[a:b], rank * L + l)
    return out.to(recv.x.device)


def check_recv(buf, recv, h, data, rank, L, E, B, fp8):
    """The receive slots bit for bit (plain: the tokens' bytes; FP8: the codec above) and the
    entries in order."""
    slots, entries = expected(data, rank, L, E, B)
    assert h.recv_counts.cpu().tolist() == [len(s) for s in slots], \
        (h.recv_counts.cpu().tolist(), [len(s) for s in slots])
    assert h.expert_counts.cpu().tolist() == [len(e) for e in entries], "expert_counts"
    offs = h.expert_offsets.cpu().tolist()
    want_offs = [0]
    for e in entries:
        want_offs.append(want_offs[-1] + len(e))
    assert offs == want_offs, (offs, want_offs)
    got_rows = h.entry_rows.cpu()[:offs[-1]].tolist()
    assert got_rows == [r for e in entries for r in e], "entry_rows"
    x = recv.x.cpu()
    sc = recv.scales.cpu() if fp8 else None
    for s, ts in enumerate(slots):
        if not ts:
            continue
        src = data[s][0][ts]
        have = x[s * B:s * B + len(ts)]
        if fp8:
            codes, meta = codec(src)
            assert torch.equal(have.view(torch.uint8), codes), f"FP8 codes from rank {s}"
            assert torch.equal(sc[s * B:s * B + len(ts)].view(torch.int32), meta), \
                f"FP8 scales from rank {s}"
        else:
            assert torch.equal(have.view(torch.uint8), src.view(torch.uint8)), \
                f"rows from rank {s}"


def round_trip(buf, data, rank, L, E, B, dtype, fp8, check=True):
    """One dispatch + experts + combine on `buf`; both calls first, the checks after (a failing
    check on one rank must not leave the others waiting in a collective). Returns (recv, h, y)."""
    x, ids, w = data[rank]
    dev = buf.recv.x.device
    recv, h = buf.dispatch(x.to(dev), ids.to(dev), w.to(dev))
    eo = experts_of(recv, h, rank, L, dtype)
    y = buf.combine(eo, h)
    if check:
        check_recv(buf, recv, h, data, rank, L, E, B, fp8)
        check_y(y, x, ids, w, E, fp8, dtype)
    return recv, h, y


def check_y(y, x, ids, w, E, fp8, dtype):
    """Rows of tokens with an id out of range all-ones bytes (NaN); the others against the
    float64 reference."""
    y = y.cpu()
    bad = ((ids < 0) | (ids >= E)).any(1)
    if bool(bad.any()):
        raw = y[bad].contiguous().view(torch.uint8)
        assert bool((raw == 255).all()), "rows of tokens with an id out of range are not NaN"
    ok = ~bad
    if bool(ok.any()):
        check_combine(y[ok], x[ok], ids[ok], w[ok], fp8, dtype)


__all__ = ["DT", "codec", "with_bad_ids", "expected", "experts_of", "check_recv", "round_trip",
           "check_y", "inputs"]
