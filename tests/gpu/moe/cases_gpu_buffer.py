"""cclx.moe.Buffer on a GPU (run by test_gpu_buffer.py at 1, 2, 3, 4 and 8 ranks sharing one GPU):
the MoE kernels bit for bit like the CPU twin (a CPU comm of the same ranks running the same
calls) and against the float64 reference (FP8 codes and scales against cclx's codec), on random
and adversarial routing, k = 1..8, hidden sizes odd to 7168, f32 / bf16 / f16, FP8 on and off;
many calls on one buffer; cached mode; a CUDA graph replayed with routing that changes between
replays; no host synchronization in eager calls; a late rank and a rank that never comes (their
peers fail naming them, outputs NaN, later calls raise)."""
from __future__ import annotations

import os
import sys
import time

import torch

import cclx
import cclx.moe as moe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "moe"))
from buffer_ref import (DT, check_recv, check_y, experts_of, inputs,  # noqa: E402
                        with_bad_ids)


# scripts/gpu_verify.py's quick mode (CCLX_TEST_TIME_SCALE 0.4) shrinks the anchors' token count
# (the CPU twin and the float64 references of 128 rows of 7168 dominate the module's time).
SCALE = min(1.0, float(os.environ.get("CCLX_TEST_TIME_SCALE", "1")))


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name="moe_buf_gpu", timeout=120)
    ctx.dev = ctx.comm.get_device()
    ctx.twin = cclx.new_comm("cclx", "cpu", name="moe_buf_twin", timeout=120)


def teardown(ctx):
    ctx.comm.finalize()
    ctx.twin.finalize()


def _pair(ctx, B, H, E, k, dtype, fp8, **shape):
    g = moe.Buffer(ctx.comm, B, H, E, k, dtype, fp8=fp8, **shape)
    t = moe.Buffer(ctx.twin, B, H, E, k, dtype, fp8=fp8, ring_tokens=shape.get("ring_tokens"))
    assert g.route == "kernels", (g.route, g.why)
    assert t.route == "host" and g.bytes == t.bytes
    assert (g.ring_rows, g.ring_round) == (t.ring_rows, t.ring_round)
    if shape.get("num_sms"):
        assert g.blocks == shape["num_sms"], (g.blocks, shape)
    if shape.get("chunk_tokens"):
        assert g.chunk_tokens == shape["chunk_tokens"], (g.chunk_tokens, shape)
    return g, t


def _same(a, b, what):
    a, b = a.cpu(), b.cpu()
    assert a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                              b.contiguous().view(torch.uint8)), what


def _compare(ctx, g, t, data, L, E, B, dtype, fp8, what):
    """One round trip on the GPU buffer and on the twin; every output bit for bit, and against
    the references."""
    r = ctx.rank
    x, ids, w = data[r]
    recv, h = g.dispatch(x.to(ctx.dev), ids.to(ctx.dev), w.to(ctx.dev))
    eo = experts_of(recv, h, r, L, dtype)
    y = g.combine(eo, h)
    trecv, th = t.dispatch(x, ids, w)
    ty = t.combine(experts_of(trecv, th, r, L, dtype), th)
    try:
        for name in ("recv_counts", "expert_counts", "expert_offsets"):
            _same(getattr(h, name), getattr(th, name), f"{what}: {name} vs twin")
        n = int(th.expert_offsets[-1])
        _same(h.entry_rows[:n], th.entry_rows[:n], f"{what}: entry_rows vs twin")
        counts = th.recv_counts.tolist()
        for s, c in enumerate(counts):
            _same(recv.x[s * B:s * B + c], trecv.x[s * B:s * B + c], f"{what}: rows of {s}")
            if fp8:
                _same(recv.scales[s * B:s * B + c], trecv.scales[s * B:s * B + c],
                      f"{what}: scales of {s}")
        _same(y, ty, f"{what}: combine vs twin")
        check_recv(g, recv, h, data, r, L, E, B, fp8)
        check_y(y, x, ids, w, E, fp8, dtype)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def _run(ctx, seed, H, k, L, dtype, kind, fp8, Ts=None, B=None, bad=False, calls=1, **shape):
    N = ctx.size
    E = L * N
    Ts = Ts or [5 + (3 * i) % 4 for i in range(N)]
    B = B or max(max(Ts), 1)
    g, t = _pair(ctx, B, H, E, k, DT[dtype], fp8, **shape)
    try:
        for c in range(calls):
            data = inputs(seed + 1000 * c, N, Ts, H, k, E, DT[dtype], kind)
            if bad:
                data = with_bad_ids(data, E, seed + c)
            _compare(ctx, g, t, data, L, E, B, DT[dtype], fp8,
                     f"{kind} H={H} k={k} L={L} {dtype} fp8={fp8} call {c}")
    finally:
        g.destroy()
        t.destroy()


def case_routing_and_dtypes(ctx):
    for fp8 in (False, True):
        _run(ctx, 1, 33, 2, 4, "f32", "random", fp8)
        _run(ctx, 2, 133, 8, 8, "bf16", "random", fp8)
        _run(ctx, 3, 256, 1, 2, "f16", "one_expert", fp8)
        _run(ctx, 4, 72, 3, 4, "bf16", "rank0_only", fp8, B=9)
        _run(ctx, 5, 40, 5, 2, "f32", "dup", fp8)
        _run(ctx, 6, 130, 4, 4, "bf16", "same_rank", fp8)
        _run(ctx, 7, 72, 2, 4, "f16", "even_experts", fp8)
        _run(ctx, 8, 50, 3, 2, "bf16", "last_empty", fp8)


def case_fp8_partial_vectors(ctx):
    """Hidden sizes whose last 16 values of a row are partial, rows at 16-byte aligned addresses
    and not (T = 6 f32 rows of H = 17: rows 0 and 4 aligned): the FP8 codes and scales of every
    row equal the twin's (a lane holding 1..15 values must not read the next row's)."""
    for dtype in ("f32", "bf16"):
        for H in (17, 33, 129):
            _run(ctx, 60 + H, H, 1, 2, dtype, "random", True, Ts=[6] * ctx.size)


def case_dispatch_rows_in_pieces(ctx):
    """Rows that dispatch sends in pieces, a warp and a flag each (core/moe/layout.h, xParts: a
    batch of B tokens gets up to 1024 / B pieces of whole 512-value quanta): decode batches at
    H = 1000 (2 pieces, the last 488 values), 1537 (4, the last 1 value), 2048 (4 whole) and
    17000 (34 pieces: more than a warp's lanes, whose flags the receive awaits 32 at a time),
    f32 / bf16 / f16, FP8 on and off, repeated ids and ids out of range; a tiled batch of 600
    tokens at H = 1000 (2 pieces; 3 blocks, chunks of 32). Every output bit like the twin and
    the references, over two calls."""
    N = ctx.size
    for seed, H, dtype, kind, fp8, bad in ((40, 1000, "bf16", "random", True, False),
                                           (41, 1000, "f32", "dup", False, True),
                                           (42, 1537, "f16", "random", True, True),
                                           (43, 1537, "bf16", "same_rank", False, False),
                                           (44, 2048, "bf16", "one_expert", True, False),
                                           (45, 2048, "f32", "random", False, False),
                                           (47, 17000, "bf16", "random", True, False),
                                           (48, 17000, "f16", "dup", False, True)):
        _run(ctx, seed, H, 4, 4, dtype, kind, fp8, bad=bad, calls=2)
    Ts = [(600, 513, 577)[i % 3] for i in range(N)]
    _run(ctx, 46, 1000, 4, 4, "bf16", "random", True, Ts=Ts, calls=2, num_sms=3,
         chunk_tokens=32)


def case_every_k(ctx):
    for k in range(1, 9):
        _run(ctx, 10 + k, 65, k, 3, "bf16", "random" if k <= 3 * ctx.size else "dup", k % 2 == 0)


def case_ids_out_of_range_and_empty_ranks(ctx):
    Ts = [(i * 5) % 7 if i != 1 else 0 for i in range(ctx.size)]
    _run(ctx, 20, 40, 3, 4, "bf16", "random", False, bad=True)
    _run(ctx, 21, 130, 4, 4, "f32", "random", True, bad=True, Ts=Ts, B=9)


def case_hidden_7168_256_experts(ctx):
    """The anchors' shape: hidden 7168, top-8, 256 experts (or the next multiple of N), 128
    tokens per rank (times CCLX_TEST_TIME_SCALE below 1, at least 16)."""
    N = ctx.size
    L = max(256 // N, 1)
    T = max(16, round(128 * SCALE))
    for fp8 in (True, False):
        _run(ctx, 30, 7168, 8, L, "bf16", "random", fp8, Ts=[T] * N)


def _cached_round(ctx, g, data, L, E, B, dtype, fp8):
    """A round trip on `g`, then a cached dispatch (its handle, new tokens: -3 x) and combine,
    checked against the references."""
    r = ctx.rank
    x, ids, w = (v.to(ctx.dev) for v in data[r])
    recv, h = g.dispatch(x, ids, w)
    g.combine(experts_of(recv, h, r, L, dtype), h)
    data2 = [((v * -3).to(dtype), i, ww) for v, i, ww in data]
    recv2, h2 = g.dispatch(data2[r][0].to(ctx.dev), handle=h)
    y2 = g.combine(experts_of(recv2, h2, r, L, dtype), h2)
    check_recv(g, recv2, h2, data2, r, L, E, B, fp8)
    check_y(y2, *data2[r], E, fp8, dtype)


def case_chunked_routing(ctx):
    """The dispatch kernel's routing tables a chunk of tokens at a time (chunk_tokens 32 and 64;
    T up to 200 and not a multiple of 32, a rank without tokens, ids out of range), 3 blocks
    per kernel and the default: every output bit like the twin (whose routing is one pass) and
    the references, over two calls; then a cached dispatch over the same chunks."""
    N = ctx.size
    Ts = [200 - 37 * (i % 3) for i in range(N)]
    if N > 2:
        Ts[1] = 0
    for chunk, sms, fp8, kind in ((32, 3, True, "random"), (64, 0, False, "dup"),
                                  (96, 2, False, "one_expert")):
        _run(ctx, 80 + chunk, 72, 4, 4, "bf16", kind, fp8, Ts=Ts, bad=kind == "random",
             calls=2, chunk_tokens=chunk, num_sms=sms)
    L, k, H, B = 4, 4, 40, 150
    E = L * N
    g = moe.Buffer(ctx.comm, B, H, E, k, torch.float32, chunk_tokens=32, num_sms=2)
    try:
        data = inputs(85, N, [B - 3 * (i % 2) for i in range(N)], H, k, E, torch.float32, "random")
        _cached_round(ctx, g, data, L, E, B, torch.float32, False)
    finally:
        g.destroy()


def case_prefill_batch_one_and_several_chunks(ctx):
    """Prefill-sized batches: 4096 tokens per rank (2560 at CCLX_TEST_TIME_SCALE below 1), 256
    experts (or the next multiple of N), top-8, in tiles (a tile per block): FP8 with the
    default launch shape, each tile one chunk of the tables, combine in one round; bf16 on 8
    blocks in chunks of 64 tokens (tiles of several chunks), combine in rounds of 256 through
    a 1024-row ring; every output bit like the twin and the references."""
    N = ctx.size
    L = max(256 // N, 1)
    T = 4096 if SCALE >= 1 else 2560
    for fp8 in (True, False):
        g, t = _pair(ctx, T, 64, L * N, 8, torch.bfloat16, fp8,
                     **({} if fp8 else dict(chunk_tokens=64, num_sms=8, ring_tokens=1024)))
        try:
            tile = -(-T // g.blocks)
            assert g.ring_rows == (T if fp8 else 1024), g.ring_rows
            if fp8:
                assert g.chunk_tokens >= tile, (g.chunk_tokens, tile)
            else:
                assert g.chunk_tokens < tile, (g.chunk_tokens, tile)
            data = inputs(90 + fp8, N, [T - 5 * (i % 3) for i in range(N)], 64, 8, L * N,
                          torch.bfloat16, "random")
            _compare(ctx, g, t, data, L, L * N, T, torch.bfloat16, fp8, f"T={T} fp8={fp8}")
        finally:
            g.destroy()
            t.destroy()


def case_tiles_of_every_length(ctx):
    """Batches longer than one round of a block's warps (512 tokens) go in tiles, a tile per
    block, each block adding the earlier tiles' column sums: ranks just past and at that bound
    (tiled and whole batches in one call), tiles on the default grid (as many blocks as the
    SMs allow, up to 128: a few tokens each), of dozens of tokens (7 blocks) and of several
    chunks (3 blocks, chunks of 32), with repeated and single-expert routing; then graph
    replays of a tiled batch, whole and split. Every output bit like the twin and the
    references."""
    N = ctx.size
    Ts = [(513, 512, 700, 1031, 600, 999, 520, 777)[i % 8] for i in range(N)]
    for seed, fp8, kind, shape in ((60, False, "random", dict()),
                                   (61, True, "dup", dict(num_sms=7)),
                                   (62, False, "one_expert", dict(num_sms=3, chunk_tokens=32))):
        _run(ctx, seed, 72, 4, 5, "bf16", kind, fp8, Ts=Ts, calls=2, **shape)
    L, k, H, B = 4, 4, 40, 600
    for fp8, between in ((True, None), (False, lambda: None)):
        g, t = _pair(ctx, B, H, L * N, k, torch.bfloat16, fp8)
        try:
            _graph_replays(ctx, g, t, L, k, H, B, fp8, ("random", "same_rank", "dup"), 65,
                           between)
        finally:
            torch.cuda.synchronize()
            g.destroy()
            t.destroy()


def case_combine_in_rounds_through_the_ring(ctx):
    """Batches longer than the combine ring, so combine runs in rounds whose ring rows are
    reused: rounds of 2 tokens (ring_tokens=8) on the default grid and on 3 blocks, of 1 token
    (ring_tokens=4) on 2 blocks, ranks of different lengths (one without tokens, one with a
    single token), ids out of range, several calls on one buffer; a 1024-row ring under a
    bound of 1500 (rounds of 256, 6 per call); then graph replays with rounds of 32 tokens,
    whole and split. Every output bit like the twin and the references."""
    N = ctx.size
    Ts = [(40, 17, 0, 33, 40, 1, 29, 38)[i % 8] for i in range(N)]
    for seed, H, k, L, dtype, kind, fp8, bad, shape in (
            (70, 72, 4, 5, "bf16", "random", False, False, dict(ring_tokens=8)),
            (71, 33, 8, 8, "f32", "dup", True, False, dict(ring_tokens=8, num_sms=3)),
            (72, 130, 2, 4, "f16", "one_expert", False, True, dict(ring_tokens=4, num_sms=2)),
            (73, 64, 8, 8, "bf16", "same_rank", True, False, dict(ring_tokens=8))):
        _run(ctx, seed, H, k, L, dtype, kind, fp8, Ts=Ts, bad=bad, calls=2, **shape)
    Tl = [(1500, 1100, 257, 1499)[i % 4] for i in range(N)]
    _run(ctx, 74, 40, 8, 8, "bf16", "random", True, Ts=Tl, B=1500, ring_tokens=1024)
    L, k, H, B = 4, 4, 40, 600
    for fp8, between in ((True, None), (False, lambda: None)):
        g, t = _pair(ctx, B, H, L * N, k, torch.bfloat16, fp8, ring_tokens=128)
        try:
            assert (g.ring_rows, g.ring_round) == (128, 32), (g.ring_rows, g.ring_round)
            _graph_replays(ctx, g, t, L, k, H, B, fp8, ("random", "dup", "one_expert"), 75,
                           between)
        finally:
            torch.cuda.synchronize()
            g.destroy()
            t.destroy()


def case_many_calls_one_buffer(ctx):
    _run(ctx, 40, 96, 4, 4, "bf16", "random", True, calls=6)
    _run(ctx, 41, 24, 2, 2, "f32", "dup", False, calls=4, Ts=[4] * ctx.size)


def case_cached_mode(ctx):
    N, L, k, H, B = ctx.size, 4, 4, 70, 7
    E = L * N
    for fp8 in (False, True):
        g = moe.Buffer(ctx.comm, B, H, E, k, torch.bfloat16, fp8=fp8)
        try:
            data = inputs(50, N, [B] * N, H, k, E, torch.bfloat16, "random")
            _cached_round(ctx, g, data, L, E, B, torch.bfloat16, fp8)
        finally:
            g.destroy()


def _graph_experts(recv, h, rank, L, C, dtype):
    """expert_out for every entry slot without a host read (capturable): entry i's local
    expert from the offsets on the device."""
    x = recv.dequantize(dtype) if recv.scales is not None else recv.x
    i = torch.arange(C, device=x.device, dtype=torch.int32)
    l = torch.searchsorted(h.expert_offsets[1:].contiguous(), i, right=True).clamp(max=L - 1)
    e = (l + rank * L).float().unsqueeze(1)
    rows = x.index_select(0, h.entry_rows.long())
    return (rows.float() * (e + 1) + e).to(dtype)


def _graph_replays(ctx, g, t, L, k, H, B, fp8, kinds, seed, between=None):
    """dispatch + experts + combine of buffer g captured once in a CUDA graph (the dispatch
    split around `between()` when given), replayed with new tokens, ids and weights copied into
    the captured inputs: each replay bit for bit the twin t's eager call and the references."""
    N, r, E = ctx.size, ctx.rank, L * ctx.size
    C = g._views["entry_rows"].shape[0]
    sx = torch.zeros(B, H, dtype=torch.bfloat16, device=ctx.dev)
    sids = torch.zeros(B, k, dtype=torch.int64, device=ctx.dev)
    sw = torch.zeros(B, k, dtype=torch.float32, device=ctx.dev)

    def step():
        if between is None:
            recv, h = g.dispatch(sx, sids, sw)
        else:
            recv, h, hook = g.dispatch(sx, sids, sw, return_recv_hook=True)
            between()
            hook()
        return g.combine(_graph_experts(recv, h, r, L, C, torch.bfloat16), h)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step()
    for rep, kind in enumerate(kinds):
        x, ids, w = inputs(seed + rep, N, [B] * N, H, k, E, torch.bfloat16, kind)[r]
        sx.copy_(x)
        sids.copy_(ids)
        sw.copy_(w)
        graph.replay()
        trecv, th = t.dispatch(x, ids, w)
        ty = t.combine(_graph_experts(trecv, th, r, L, C, torch.bfloat16), th)
        torch.cuda.synchronize()
        _same(y, ty, f"replay {rep} ({kind}) fp8={fp8} split={between is not None}: "
                     "combine vs twin")
        check_y(y, x, ids, w, E, fp8, torch.bfloat16)


def case_cuda_graph_changing_routing(ctx):
    """dispatch + experts + combine captured once, replayed with new routing (_graph_replays;
    L = 4: at one rank every token has k = 4 distinct experts)."""
    L, k, H, B = 4, 4, 136, 6
    for fp8 in (False, True):
        g = moe.Buffer(ctx.comm, B, H, L * ctx.size, k, torch.bfloat16, fp8=fp8)
        t = moe.Buffer(ctx.twin, B, H, L * ctx.size, k, torch.bfloat16, fp8=fp8)
        try:
            _graph_replays(ctx, g, t, L, k, H, B, fp8,
                           ("random", "dup", "same_rank", "one_expert"), 60)
        finally:
            torch.cuda.synchronize()
            g.destroy()
            t.destroy()


def case_recv_hook_split(ctx):
    """dispatch(..., return_recv_hook=True): the send kernel, then other GPU work (a matmul and
    an all_reduce of the comm) on the stream, then hook() (the receive kernel): every output
    bit for bit the twin's unsplit dispatch and the references, eager and in a CUDA graph
    replayed with changing routing; before the hook the buffer refuses combine."""
    N, r, L, k, H, B = ctx.size, ctx.rank, 4, 4, 136, 6
    E = L * N
    a = torch.randn(256, 256, device=ctx.dev)
    ones = torch.ones(8, device=ctx.dev)

    def between():
        torch.mm(a, a)
        ctx.comm.all_reduce(ones, cclx.ReduceOp.MAX)

    for fp8 in (False, True):
        g = moe.Buffer(ctx.comm, B, H, E, k, torch.bfloat16, fp8=fp8)
        t = moe.Buffer(ctx.twin, B, H, E, k, torch.bfloat16, fp8=fp8)
        try:
            data = inputs(80, N, [B - i % 2 for i in range(N)], H, k, E, torch.bfloat16, "random")
            x, ids, w = (v.to(ctx.dev) for v in data[r])
            recv, h, hook = g.dispatch(x, ids, w, return_recv_hook=True)
            try:
                g.combine(torch.zeros(1, H, dtype=torch.bfloat16, device=ctx.dev), h)
                raise AssertionError("combine before the hook was accepted")
            except cclx.CclxUsageError as e:
                assert "recv_later" in str(e), e
            between()
            hook()
            y = g.combine(experts_of(recv, h, r, L, torch.bfloat16), h)
            trecv, th = t.dispatch(*data[r])
            ty = t.combine(experts_of(trecv, th, r, L, torch.bfloat16), th)
            torch.cuda.synchronize()
            _same(y, ty, f"eager split fp8={fp8}: combine vs twin")
            check_recv(g, recv, h, data, r, L, E, B, fp8)
            check_y(y, *data[r], E, fp8, torch.bfloat16)
            _graph_replays(ctx, g, t, L, k, H, B, fp8, ("random", "dup", "one_expert"), 90,
                           between)
        finally:
            torch.cuda.synchronize()
            g.destroy()
            t.destroy()


def case_no_host_sync(ctx):
    """Eager dispatch and combine never wait for the device (torch's sync debug mode raises on
    any synchronizing call)."""
    N, r, L, k, H, B = ctx.size, ctx.rank, 2, 2, 64, 4
    E = L * N
    g = moe.Buffer(ctx.comm, B, H, E, k, torch.bfloat16, fp8=True)
    try:
        data = inputs(70, N, [B] * N, H, k, E, torch.bfloat16, "random")
        x, ids, w = (v.to(ctx.dev) for v in data[r])
        eo = torch.zeros(g._views["entry_rows"].shape[0], H, dtype=torch.bfloat16, device=ctx.dev)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                _, h = g.dispatch(x, ids, w)
                g.combine(eo, h)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    finally:
        g.destroy()


def case_composed_route_on_cuda(ctx):
    """The composed route (what comms across hosts run) on this CUDA comm gives the kernels'
    bits: receive rows, scales, counts, entries, combine."""
    N, r = ctx.size, ctx.rank
    for seed, H, k, L, dtype, kind, fp8 in ((90, 33, 2, 4, "f32", "random", False),
                                            (91, 133, 8, 8, "bf16", "random", True),
                                            (92, 72, 5, 2, "f16", "dup", True)):
        E = L * N
        Ts = [5 + (3 * i) % 4 for i in range(N)]
        B = max(Ts)
        kb = moe.Buffer(ctx.comm, B, H, E, k, DT[dtype], fp8=fp8)
        co = moe.Buffer(ctx.comm, B, H, E, k, DT[dtype], fp8=fp8, route="composed")
        try:
            data = with_bad_ids(inputs(seed, N, Ts, H, k, E, DT[dtype], kind), E, seed)
            x, ids, w = (v.to(ctx.dev) for v in data[r])
            outs = []
            for buf in (kb, co):
                recv, h = buf.dispatch(x, ids, w)
                y = buf.combine(experts_of(recv, h, r, L, DT[dtype]), h)
                cnt = h.recv_counts.tolist()
                rows = torch.cat([recv.x[s * B:s * B + cnt[s]] for s in range(N)])
                sc = torch.cat([recv.scales[s * B:s * B + cnt[s]] for s in range(N)]) \
                    if fp8 else rows
                n = int(h.expert_offsets[-1])
                outs.append((h.expert_offsets.clone(), h.entry_rows[:n].clone(), rows.clone(),
                             sc.clone(), y))
            what = f"{kind} H={H} k={k} {dtype} fp8={fp8}"
            for i, name in enumerate(("expert_offsets", "entry_rows", "rows", "scales",
                                      "combine")):
                _same(outs[0][i], outs[1][i], f"{what}: {name}, kernels vs composed")
        finally:
            torch.cuda.synchronize()
            kb.destroy()
            co.destroy()


def _failure(ctx, name, late_s, split=False):
    """Rank N-1 comes `late_s` seconds late (None: never); the others' dispatch (timeout 2 s;
    split: its send, then its receive hook) fails naming it: NaN rows, counts 0, the next call
    raises."""
    N, r = ctx.size, ctx.rank
    if N < 2:
        return "skipped: needs two ranks"
    comm = cclx.new_comm("cclx", torch.device("cuda"), name=name, timeout=120)
    late = N - 1
    try:
        g = moe.Buffer(comm, 4, 64, 2 * N, 2, torch.bfloat16)
        data = inputs(80, N, [4] * N, 64, 2, 2 * N, torch.bfloat16, "random")
        x, ids, w = (v.to(ctx.dev) for v in data[r])
        if r == late:
            if late_s is None:
                return None
            time.sleep(late_s)
        if split:
            hook = g.dispatch(x, ids, w, timeout=2.0, return_recv_hook=True)[2]
            try:
                hook()
            except cclx.CclxError as e:  # the send's failure, seen before the receive launched
                assert r == late or f"rank {late}" in str(e) or f"[{late}]" in str(e) or \
                    f"rank(s) {late}" in str(e), str(e)
                return None
        else:
            g.dispatch(x, ids, w, timeout=2.0)
        torch.cuda.synchronize()
        raw = g.recv.x.contiguous().view(torch.uint8)
        assert bool((raw == 255).all()), "receive rows are not NaN after the failed dispatch"
        assert int(g._views["expert_counts"].abs().sum().item()) == 0
        try:
            g.dispatch(x, ids, w, timeout=2.0)
            raise AssertionError("the call after a failed dispatch did not raise")
        except cclx.CclxError as e:
            if r != late:
                assert f"rank {late}" in str(e) or f"[{late}]" in str(e) or \
                    f"rank(s) {late}" in str(e), str(e)
    finally:
        comm.abort()
    return None


def case_zz_late_rank(ctx):
    return _failure(ctx, "moe_late", 6.0)


def case_zz_late_rank_split(ctx):
    return _failure(ctx, "moe_late_split", 6.0, split=True)


def case_zzz_rank_never_comes(ctx):
    return _failure(ctx, "moe_gone", None)

