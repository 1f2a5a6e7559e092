"""cclx.moe.Buffer on CPU processes (run by test_buffer.py at 1, 2, 3, 4 and 8 ranks): the CPU
twin of the MoE kernels against the float64 reference and cclx's FP8 codec bit for bit, on
random and adversarial routing (one expert for all, only rank 0's experts, empty experts, all
of a token's experts on one rank, repeated ids, an expert-less last rank, ids out of range,
ranks without tokens), k = 1..8, hidden sizes odd to 7168, f32 / bf16 / f16, FP8 on and off;
many calls on one buffer with the routing changing; cached mode; entries beyond expert_out;
argument errors; a late rank (its peers fail naming it, outputs NaN)."""
from __future__ import annotations

import time

import torch

import cclx
import cclx.moe as moe
from buffer_ref import DT, check_recv, check_y, experts_of, inputs, round_trip, with_bad_ids


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="moe_buf", timeout=120)


def teardown(ctx):
    ctx.comm.finalize()


def one(ctx, seed, H, k, L, dtype, kind, fp8, Ts=None, B=None, bad_ids=False, calls=1,
        ring_tokens=None):
    """A buffer, `calls` dispatch + combine round trips on it (new routing each), destroyed."""
    N, r = ctx.size, ctx.rank
    E = L * N
    if Ts is None:
        Ts = [5 + (3 * i) % 4 for i in range(N)]
    B = B or max(max(Ts), 1)
    buf = moe.Buffer(ctx.comm, B, H, E, k, DT[dtype], fp8=fp8, ring_tokens=ring_tokens)
    try:
        assert buf.route == "host", buf.route
        for c in range(calls):
            data = inputs(seed + 1000 * c, N, Ts, H, k, E, DT[dtype], kind)
            if bad_ids:
                data = with_bad_ids(data, E, seed + c)
            round_trip(buf, data, r, L, E, B, DT[dtype], fp8)
    finally:
        buf.destroy()


def case_random_bf16_k8(ctx):
    for fp8 in (False, True):
        one(ctx, 2, 133, 8, 8, "bf16", "random", fp8)


def case_random_f32_odd_hidden(ctx):
    for fp8 in (False, True):
        one(ctx, 1, 33, 2, 4, "f32", "random", fp8)


def case_random_f16_k1(ctx):
    for fp8 in (False, True):
        one(ctx, 3, 256, 1, 2, "f16", "random", fp8)


def case_every_k(ctx):
    for k in range(1, 9):
        one(ctx, 10 + k, 65, k, 3, "bf16", "random" if k <= 3 * ctx.size else "dup", k % 2 == 0)


def case_all_tokens_one_expert(ctx):
    for k in (1, 3):
        for fp8 in (False, True):
            one(ctx, 4, 48, k, 2, "f32", "one_expert", fp8)


def case_only_rank0_experts(ctx):
    one(ctx, 5, 40, 3, 4, "bf16", "rank0_only", False)
    one(ctx, 5, 40, 6, 4, "f16", "rank0_only", True)


def case_empty_experts(ctx):
    one(ctx, 6, 72, 2, 4, "f32", "even_experts", False)
    one(ctx, 6, 72, 2, 4, "bf16", "even_experts", True)


def case_experts_of_a_token_on_one_rank(ctx):
    for fp8 in (False, True):
        one(ctx, 7, 130, 4, 4, "bf16", "same_rank", fp8)
    one(ctx, 7, 31, 5, 2, "f32", "same_rank", False)  # k > L: repeated experts too


def case_repeated_ids(ctx):
    one(ctx, 8, 24, 4, 2, "f32", "dup", False)
    one(ctx, 8, 24, 5, 3, "f16", "dup", True)


def case_expertless_last_rank(ctx):
    one(ctx, 9, 50, 3, 2, "bf16", "last_empty", False)


def case_ids_out_of_range(ctx):
    """Dropped, never written out of bounds; the token's combine row NaN, the others exact."""
    one(ctx, 24, 40, 3, 4, "bf16", "random", False, bad_ids=True)
    one(ctx, 25, 130, 4, 4, "f32", "random", True, bad_ids=True)


def case_hidden_7168(ctx):
    for fp8 in (False, True):
        one(ctx, 20, 7168, 8, 8, "bf16", "random", fp8, Ts=[3] * ctx.size)


def case_row_of_more_pieces_than_lanes(ctx):
    """H 17000 with a few tokens: 34 dispatch pieces a row (core/moe/layout.h), more than a
    warp's 32 lanes, each under its own flag; the twin waits for every one."""
    for fp8 in (False, True):
        one(ctx, 26, 17000, 4, 4, "bf16", "dup", fp8, Ts=[(2, 1, 3)[i % 3] for i in range(ctx.size)])


def case_uneven_tokens_and_empty_ranks(ctx):
    """Different T per rank under one bound (rank 1 none at all), B above every T."""
    Ts = [(i * 5) % 7 if i != 1 else 0 for i in range(ctx.size)]
    one(ctx, 21, 36, 3, 3, "f32", "random", False, Ts=Ts, B=9)
    one(ctx, 22, 36, 3, 3, "bf16", "random", True, Ts=Ts, B=9)


def case_combine_in_rounds_through_the_ring(ctx):
    """Batches longer than the combine ring: rounds of 2 tokens, 4 in the ring (ring_tokens=8),
    of 1 token (ring_tokens=4) and a 1024-row ring under a bound of 1500 (rounds of
    256): ring rows reused many times per call, ranks of different lengths (one with no tokens,
    one with a single token), several calls on one buffer."""
    N = ctx.size
    Ts = [(40, 17, 0, 33, 40, 1, 29, 38)[i % 8] for i in range(N)]
    one(ctx, 80, 72, 4, 5, "bf16", "random", False, Ts=Ts, calls=3, ring_tokens=8)
    one(ctx, 81, 33, 8, 8, "f32", "dup", True, Ts=Ts, calls=2, ring_tokens=8)
    one(ctx, 82, 20, 2, 4, "f16", "one_expert", False, Ts=Ts, bad_ids=True, ring_tokens=4)
    one(ctx, 83, 8, 3, 4, "f32", "random", True, B=1500,
        Ts=[(1500, 1100, 257, 1499)[i % 4] for i in range(N)], ring_tokens=1024)
    for B, ring, want in ((200, 8, (8, 2)), (1500, 8, (48, 12))):  # at most 128 rounds
        buf = moe.Buffer(ctx.comm, B, 8, 2 * N, 3, torch.float32, ring_tokens=ring)
        try:
            assert (buf.ring_rows, buf.ring_round) == want, (buf.ring_rows, buf.ring_round)
        finally:
            buf.destroy()
    for B, want in ((4096, (4096, 4096)), (4097, (4096, 1024))):
        buf = moe.Buffer(ctx.comm, B, 8, 2 * N, 3, torch.float32)
        try:  # the default ring holds a batch of 4096 (one round); a longer one runs rounds
            assert (buf.ring_rows, buf.ring_round) == want, (buf.ring_rows, buf.ring_round)
        finally:
            buf.destroy()


def case_many_calls_changing_routing(ctx):
    """One buffer, eight round trips, new routing and tokens each: the credits and epochs."""
    one(ctx, 30, 72, 4, 4, "bf16", "random", True, calls=8)
    one(ctx, 31, 20, 2, 2, "f32", "dup", False, calls=5, Ts=[4] * ctx.size)


def case_dispatch_twice_then_combine(ctx):
    """Two dispatches in a row (no combine between), then a combine of the second's handle;
    the first handle is refused afterwards."""
    N, r, L, k, H = ctx.size, ctx.rank, 3, 3, 40
    E = L * N
    buf = moe.Buffer(ctx.comm, 6, H, E, k, torch.float32)
    try:
        d1 = inputs(40, N, [5] * N, H, k, E, torch.float32, "random")
        d2 = inputs(41, N, [6] * N, H, k, E, torch.float32, "random")
        _, h1 = buf.dispatch(*d1[r])
        recv, h2 = buf.dispatch(*d2[r])
        y = buf.combine(experts_of(recv, h2, r, L, torch.float32), h2)
        check_recv(buf, recv, h2, d2, r, L, E, 6, False)
        check_y(y, *d2[r], E, False, torch.float32)
        try:
            buf.combine(torch.zeros(1, H), h1)
            raise AssertionError("a replaced handle was accepted")
        except cclx.CclxInvalidArgument as e:
            assert "replaced" in str(e), e
    finally:
        buf.destroy()


def case_cached_mode(ctx):
    """dispatch(x2, handle=h): the routing of h with new tokens; combine replays h again."""
    N, r, L, k, H = ctx.size, ctx.rank, 4, 4, 70
    E = L * N
    for fp8 in (False, True):
        buf = moe.Buffer(ctx.comm, 7, H, E, k, torch.bfloat16, fp8=fp8)
        try:
            data = inputs(50, N, [7] * N, H, k, E, torch.bfloat16, "random")
            recv, h = buf.dispatch(*data[r])
            y = buf.combine(experts_of(recv, h, r, L, torch.bfloat16), h)
            check_y(y, *data[r], E, fp8, torch.bfloat16)
            data2 = [((x * -3).to(torch.bfloat16), ids, w) for x, ids, w in data]
            recv2, h2 = buf.dispatch(data2[r][0], handle=h)
            assert h2.num_tokens == h.num_tokens
            y2 = buf.combine(experts_of(recv2, h2, r, L, torch.bfloat16), h2)
            check_recv(buf, recv2, h2, data2, r, L, E, 7, fp8)
            check_y(y2, *data2[r], E, fp8, torch.bfloat16)
        finally:
            buf.destroy()


def case_recv_hook_split(ctx):
    """dispatch(..., return_recv_hook=True) sends only; a collective of the comm runs before
    hook() receives (the overlap it is for); the outputs are the whole dispatch's, bit for bit
    (fresh and cached mode, FP8 on and off). Before the hook the buffer refuses combine and
    another dispatch, changing nothing; a second hook() is refused."""
    N, r, L, k, H = ctx.size, ctx.rank, 4, 4, 70
    E = L * N
    for fp8 in (False, True):
        buf = moe.Buffer(ctx.comm, 7, H, E, k, torch.bfloat16, fp8=fp8)
        try:
            data = inputs(55, N, [7 - i % 3 for i in range(N)], H, k, E, torch.bfloat16, "random")
            recv, h, hook = buf.dispatch(*data[r], return_recv_hook=True)
            assert buf._b.recv_pending
            for call, what in ((lambda: buf.combine(torch.zeros(1, H, dtype=torch.bfloat16), h),
                                "combine"),
                               (lambda: buf.dispatch(*data[r]), "dispatch")):
                try:
                    call()
                    raise AssertionError(f"{what} before the hook was accepted")
                except cclx.CclxUsageError as e:
                    assert "recv_later" in str(e) and "not received" in str(e), e
            t = torch.full((5,), float(r + 1))
            ctx.comm.all_reduce(t, cclx.ReduceOp.SUM)  # other work between send and receive
            assert t.tolist() == [N * (N + 1) / 2] * 5
            hook()
            assert not buf._b.recv_pending
            try:
                hook()
                raise AssertionError("a second hook() was accepted")
            except cclx.CclxUsageError as e:
                assert "no dispatch sent with recv_later" in str(e), e
            check_recv(buf, recv, h, data, r, L, E, 7, fp8)
            y = buf.combine(experts_of(recv, h, r, L, torch.bfloat16), h)
            check_y(y, *data[r], E, fp8, torch.bfloat16)
            data2 = [((x * 5).to(torch.bfloat16), ids, w) for x, ids, w in data]
            recv2, h2, hook2 = buf.dispatch(data2[r][0], handle=h, return_recv_hook=True)
            hook2()
            check_recv(buf, recv2, h2, data2, r, L, E, 7, fp8)
            y2 = buf.combine(experts_of(recv2, h2, r, L, torch.bfloat16), h2)
            check_y(y2, *data2[r], E, fp8, torch.bfloat16)
            round_trip(buf, data, r, L, E, 7, torch.bfloat16, fp8)  # and unsplit again
        finally:
            buf.destroy()


def case_entries_beyond_expert_out(ctx):
    """expert_out with fewer rows than entries: the tokens of the missing entries get NaN rows
    (never a read out of bounds); rows for all entries: exact."""
    N, r, L, k, H = ctx.size, ctx.rank, 2, 2, 24
    E = L * N
    buf = moe.Buffer(ctx.comm, 5, H, E, k, torch.float32)
    try:
        data = inputs(60, N, [5] * N, H, k, E, torch.float32, "one_expert")
        recv, h = buf.dispatch(*data[r])
        n = int(h.expert_offsets[-1])
        eo = experts_of(recv, h, r, L, torch.float32)
        y = buf.combine(eo[:max(n - 1, 0)].contiguous(), h)  # the last entry is missing
        yv = y.view(torch.int32)
        # every token of every rank chose expert 0 (rank 0's): rank 0 has N*5 entries; the last
        # (from rank N-1's last token) is missing: that token's row is NaN on rank N-1
        nan_rows = [t for t in range(5) if bool((yv[t] == -1).all())]
        assert nan_rows == ([4] if r == N - 1 else []), nan_rows
    finally:
        buf.destroy()


def case_argument_errors(ctx):
    N, r = ctx.size, ctx.rank
    for kw, msg in ((dict(num_experts=3 * N + 1 if N > 1 else 0), "multiple of the world size"),
                    (dict(top_k=17), "top_k"), (dict(hidden=0), "hidden"),
                    (dict(max_tokens_per_rank=0), "max_tokens_per_rank"),
                    (dict(num_sms=129), "num_sms"), (dict(num_sms=-1), "num_sms"),
                    (dict(chunk_tokens=-32), "chunk_tokens"),
                    (dict(chunk_tokens=(1 << 20) + 1), "chunk_tokens"),
                    (dict(ring_tokens=3), "ring_tokens"), (dict(ring_tokens=-8), "ring_tokens")):
        args = dict(max_tokens_per_rank=4, hidden=8, num_experts=2 * N, top_k=2)
        args.update(kw)
        try:
            moe.Buffer(ctx.comm, **args)
            raise AssertionError(f"{kw} was accepted")
        except cclx.CclxInvalidArgument as e:
            assert msg in str(e), e
    try:
        moe.Buffer(ctx.comm, 4, 8, 2 * N, 2, dtype=torch.int32)
        raise AssertionError("int32 tokens were accepted")
    except cclx.CclxInvalidArgument as e:
        assert "dtype" in str(e)
    buf = moe.Buffer(ctx.comm, 4, 8, 2 * N, 2, dtype=torch.float32, num_sms=3, chunk_tokens=32)
    # the launch shape is the CUDA kernels' (the twin reports none)
    assert (buf.route, buf.blocks, buf.chunk_tokens) == ("host", 0, 0), (buf.blocks,
                                                                          buf.chunk_tokens)
    try:
        x, ids, w = torch.zeros(5, 8), torch.zeros(5, 2, dtype=torch.int64), torch.ones(5, 2)
        for args, msg in (((x, ids, w), "exceed max_tokens_per_rank"),
                          ((x[:2].bfloat16(), ids[:2], w[:2]), "x must be"),
                          ((x[:2], ids[:2, :1], w[:2]), "topk_ids must be"),
                          ((x[:2], ids[:2].float(), w[:2]), "topk_ids must be"),
                          ((x[:2], ids[:2], w[:2, :1]), "topk_weights must be")):
            try:
                buf.dispatch(*args)
                raise AssertionError(f"{msg}: accepted")
            except cclx.CclxInvalidArgument as e:
                assert msg in str(e), e
        try:
            buf.combine(torch.zeros(1, 8), object())
            raise AssertionError("a foreign handle was accepted")
        except cclx.CclxInvalidArgument as e:
            assert "handle" in str(e)
        # nothing above ran a collective: a round trip still works
        data = inputs(70, N, [3] * N, 8, 2, 2 * N, torch.float32, "random")
        round_trip(buf, data, r, 2, 2 * N, 4, torch.float32, False)
    finally:
        buf.destroy()


def case_memory_is_rank_major(ctx):
    """bytes: the rank-major bound (N*B receive rows and N*min(B, 4096) combine ring rows, plus
    the records); at B 4096 a 1024-row ring saves the combine rows of the other 3072 tokens."""
    N = ctx.size
    B, H, k, L = 128, 7168, 8, 4
    buf = moe.Buffer(ctx.comm, B, H, L * N, k, torch.bfloat16, fp8=True)
    try:
        rows = N * B * (H + 4 * ((H + 127) // 128)) + N * B * 2 * H
        assert rows <= buf.bytes <= rows * 1.1 + (1 << 20), (buf.bytes, rows)
        assert buf.recv.x.shape == (N * B, H) and buf.recv.x.dtype == torch.float8_e4m3fn
        assert buf.recv.scales.shape == (N * B, (H + 127) // 128)
    finally:
        buf.destroy()
    B, H = 4096, 512
    sizes = []
    for ring in (1024, None):
        buf = moe.Buffer(ctx.comm, B, H, L * N, k, torch.bfloat16, fp8=True, ring_tokens=ring)
        try:
            assert buf.ring_rows == (ring or 4096), buf.ring_rows
            sizes.append(buf.bytes)
        finally:
            buf.destroy()
    assert sizes[1] - sizes[0] >= N * (B - 1024) * 2 * H, sizes


def _late_rank(ctx, name, seed, split):
    """Rank N-1 comes 4 s late; every other rank's dispatch (timeout 1.5 s; split: its send, then
    its receive hook, whichever waited for the late rank) raises naming it, its receive rows are
    NaN and its counts 0; the next dispatch is refused; the late rank fails too."""
    N, r = ctx.size, ctx.rank
    if N < 2:
        return "skipped: needs two ranks"
    comm = cclx.new_comm("cclx", "cpu", name=name, timeout=60)
    try:
        buf = moe.Buffer(comm, 4, 16, 2 * N, 2, torch.float32)
        data = inputs(seed, N, [4] * N, 16, 2, 2 * N, torch.float32, "random")
        late = N - 1
        if r == late:
            time.sleep(4.0)
        failed = None
        try:
            if split:
                buf.dispatch(*data[r], timeout=1.5, return_recv_hook=True)[2]()
            else:
                buf.dispatch(*data[r], timeout=1.5)
        except cclx.CclxError as e:
            failed = e
        assert failed is not None, "the dispatch succeeded"
        if r != late:
            assert isinstance(failed, cclx.CclxTimeoutError), repr(failed)
            assert f"[{late}]" in str(failed) or f"rank {late}" in str(failed), str(failed)
            raw = buf.recv.x.contiguous().view(torch.uint8)
            assert bool((raw == 255).all()), "receive rows are not NaN"
            assert int(buf._views["expert_counts"].abs().sum()) == 0
        try:
            buf.dispatch(*data[r], timeout=1.5)
            raise AssertionError("a dispatch after the failure was accepted")
        except cclx.CclxError:
            pass
    finally:
        comm.abort()
    return None


def case_zz_late_rank_fails_naming_it(ctx):
    """A rank that does not come within the timeout (_late_rank)."""
    return _late_rank(ctx, "moe_late", 80, split=False)


def case_zz_late_rank_split_fails_naming_it(ctx):
    """The same with the send / receive split."""
    return _late_rank(ctx, "moe_late_split", 81, split=True)


def _same(a, b, what):
    a, b = a.cpu(), b.cpu()
    assert a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                              b.contiguous().view(torch.uint8)), what


def case_composed_route_same_bits(ctx):
    """The composed route (torch ops + all-to-all-v: the route of comms without peer memory)
    gives the twin's bits: receive rows and scales, counts, entries, combine."""
    N, r = ctx.size, ctx.rank
    for seed, H, k, L, dtype, kind, fp8, bad in (
            (90, 33, 2, 4, "f32", "random", False, False),
            (91, 133, 8, 8, "bf16", "random", True, False),
            (92, 72, 5, 2, "f16", "dup", True, True),
            (93, 40, 3, 4, "bf16", "same_rank", False, True)):
        E = L * N
        Ts = [5 + (3 * i) % 4 for i in range(N)]
        B = max(Ts)
        tw = moe.Buffer(ctx.comm, B, H, E, k, DT[dtype], fp8=fp8)
        co = moe.Buffer(ctx.comm, B, H, E, k, DT[dtype], fp8=fp8, route="composed")
        try:
            assert co.route == "composed" and tw.route == "host"
            for c in range(2):
                data = inputs(seed + 7 * c, N, Ts, H, k, E, DT[dtype], kind)
                if bad:
                    data = with_bad_ids(data, E, seed)
                x, ids, w = data[r]
                outs = []
                for buf in (tw, co):
                    recv, h = buf.dispatch(x, ids, w)
                    y = buf.combine(experts_of(recv, h, r, L, DT[dtype]), h)
                    n = int(h.expert_offsets[-1])
                    cnt = h.recv_counts.tolist()
                    rows = torch.cat([recv.x[s * B:s * B + cnt[s]] for s in range(N)])
                    sc = torch.cat([recv.scales[s * B:s * B + cnt[s]] for s in range(N)]) \
                        if fp8 else None
                    outs.append((h.recv_counts.clone(), h.expert_offsets.clone(),
                                 h.entry_rows[:n].clone(), rows.clone(), sc, y))
                what = f"{kind} H={H} k={k} {dtype} fp8={fp8} call {c}"
                for i, name in enumerate(("recv_counts", "expert_offsets", "entry_rows", "rows")):
                    _same(outs[0][i], outs[1][i], f"{what}: {name}")
                if fp8:
                    _same(outs[0][4], outs[1][4], f"{what}: scales")
                _same(outs[0][5], outs[1][5], f"{what}: combine")
                check_y(outs[1][5], x, ids, w, E, fp8, DT[dtype])
        finally:
            tw.destroy()
            co.destroy()
