"""A float64 single-process reference for cclx.moe (shared by the CPU cases and the GPU cases):
every rank regenerates every rank's tokens and routing from a seed, routes them itself, applies
the known expert function f_e(x) = x * (e + 1) + e and combines with the weights. The checks
compare with per-element bounds (the FP8 block codec's and the dtypes' rounding)."""
from __future__ import annotations

import torch

U = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
# Half the spacing of the dtype's subnormals: the absolute error of one rounding near zero, where
# the relative bound u * |v| does not hold (f16 below 2^-14).
TINY = {torch.float32: 2.0 ** -150, torch.bfloat16: 2.0 ** -134, torch.float16: 2.0 ** -25}
ROUTINGS = ("random", "one_expert", "rank0_only", "even_experts", "same_rank", "dup", "last_empty")


def routing(g, T, k, E, N, kind):
    """topk_ids [T, k] int64 for one rank's T tokens."""
    L = E // N
    if T == 0:
        return torch.zeros(0, k, dtype=torch.int64)
    if kind == "random":  # k distinct experts
        return torch.rand(T, E, generator=g).argsort(1)[:, :k]
    if kind == "one_expert":  # every slot to expert 0 (k copies)
        return torch.zeros(T, k, dtype=torch.int64)
    if kind == "rank0_only":  # only rank 0's experts are used: other ranks get nothing
        return torch.rand(T, L, generator=g).argsort(1)[:, :k] if k <= L else \
            torch.randint(0, L, (T, k), generator=g)
    if kind == "even_experts":  # odd experts stay empty
        half = (E + 1) // 2
        return 2 * torch.rand(T, half, generator=g).argsort(1)[:, :k] if k <= half else \
            2 * torch.randint(0, half, (T, k), generator=g)
    if kind == "same_rank":  # all k experts of a token on one (random) rank, distinct when k <= L
        r = torch.randint(0, N, (T, 1), generator=g)
        loc = torch.rand(T, L, generator=g).argsort(1)[:, :k] if k <= L else \
            torch.randint(0, L, (T, k), generator=g)
        return r * L + loc
    if kind == "dup":  # repeated expert ids within a token
        ids = torch.randint(0, E, (T, k), generator=g)
        ids[:, k - k // 2:] = ids[:, :k // 2]
        return ids
    if kind == "last_empty":  # the last rank's experts get no token
        lo = max(1, E - L)
        return torch.randint(0, lo, (T, k), generator=g)
    raise ValueError(kind)


def inputs(seed, N, Ts, H, k, E, dtype, kind):
    """Every rank's (tokens [T_r, H] dtype, topk_ids [T_r, k] int64, weights [T_r, k] f32),
    rows scaled by 2^(t % 7 - 3) so the FP8 blocks see different magnitudes."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for r in range(N):
        T = Ts[r]
        scale = torch.ldexp(torch.ones(T, 1), (torch.arange(T) % 7 - 3)[:, None].float())
        x = ((torch.rand(T, H, generator=g) * 4 - 2) * scale).to(dtype)
        ids = routing(g, T, k, E, N, kind)
        w = torch.rand(T, k, generator=g) + 0.25
        out.append((x, ids, w))
    return out


def expert_fn(x, e):
    """f_e on rows x (computed in f32, returned in x's dtype)."""
    return (x.float() * (e + 1) + e).to(x.dtype)


def apply_experts(x, counts, offsets, rank, L):
    """The rows of dispatch's expert_tokens passed through f_e (zeros elsewhere)."""
    out = torch.zeros_like(x)
    offs = offsets.cpu().tolist()
    for l in range(L):
        a, b = offs[l], offs[l + 1]
        out[a:b] = expert_fn(x[a:b], rank * L + l)
    return out


def expected_blocks(data, rank, L):
    """Per local expert: the list of (source rank, token index) it must receive, in order."""
    blocks = [[] for _ in range(L)]
    for src, (_, ids, _) in enumerate(data):
        for t in range(ids.shape[0]):
            for e in dict.fromkeys(ids[t].tolist()):  # a repeated expert: once, in slot order
                if e // L == rank:
                    blocks[e - rank * L].append((src, t))
    return blocks


def fp8_err(x):
    """Per-element bound of the FP8 block codec on x [R, H]: 2^-4 |x| + 2^-10 d (+ slack)."""
    x = x.double()
    R, H = x.shape
    nb = (H + 127) // 128
    xp = torch.nn.functional.pad(x.abs(), (0, nb * 128 - H)).view(R, nb, 128)
    d = (xp.amax(-1) / 448.0).repeat_interleave(128, 1)[:, :H]
    return x.abs() * (2.0 ** -4 + 2.0 ** -20) + d * 2.0 ** -10


def check_dispatch(got, counts, offsets, data, rank, L, fp8, dtype):
    """expert_tokens against the tokens each expert must see (exact unless FP8; in FP8 within
    the codec's bound plus the rounding to dtype); rows past the last block are zeros."""
    blocks = expected_blocks(data, rank, L)
    got = got.cpu()
    assert counts.cpu().tolist() == [len(b) for b in blocks], (counts.tolist(),
                                                               [len(b) for b in blocks])
    offs = offsets.cpu().tolist()
    for l, b in enumerate(blocks):
        if not b:
            continue
        want = torch.stack([data[s][0][t] for s, t in b])
        have = got[offs[l]:offs[l] + len(b)]
        if not fp8:
            assert torch.equal(have, want), f"expert {l}: rows differ"
        else:
            tol = fp8_err(want) * (1 + U[dtype]) + want.double().abs() * U[dtype] + TINY[dtype]
            err = (have.double() - want.double()).abs()
            assert bool((err <= tol).all()), f"expert {l}: fp8 error {float((err - tol).max())}"
    assert bool((got[offs[L]:] == 0).all()), "rows past the last block are not zeros"


def check_combine(y, x, ids, w, fp8, dtype):
    """y [T, H] against sum_j w_j f_{e_j}(x) in float64."""
    u = U[dtype]
    x64 = x.double()
    ref = torch.zeros_like(x64)
    tol = torch.zeros_like(x64)
    dx = fp8_err(x) + u * x64.abs() * 2 if fp8 else torch.zeros_like(x64)
    for j in range(ids.shape[1]):
        e = ids[:, j:j + 1].double()
        wj = w[:, j:j + 1].double()
        f = x64 * (e + 1) + e
        fa = x64.abs() * (e + 1) + e + (e + 1) * dx  # no cancellation in the bound
        ref += wj * f
        # f_e rounded to dtype after two f32 steps, the weighted partial sums (f32, then dtype
        # on the way back), the owner's f32 sum: a few roundings of the absolute terms each.
        tol += wj.abs() * ((e + 1) * dx + (2 * u + 8 * 2.0 ** -24) * fa)
    # Roundings to the dtype near zero: f_e per slot (weighted), each rank's partial row, the
    # output.
    tol += (w.double().abs().sum(1, keepdim=True) + ids.shape[1] + 1) * TINY[dtype]
    tol += u * ref.abs() + 1e-30
    err = (y.cpu().double() - ref).abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        i = bad.nonzero()[0].tolist()
        raise AssertionError(f"combine element {i}: got {float(y.cpu().double()[i[0], i[1]])} "
                             f"want {float(ref[i[0], i[1]])} tol {float(tol[i[0], i[1]])}")
