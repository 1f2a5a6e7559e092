"""device_alltoallv_single on CPU comms (split sizes as int64 arrays in host memory, in rows),
against references made on every rank from the same seeds: every rank generates every rank's
input and split matrix, so it knows exactly which rows it must receive. Run by
test_a2av_device.py on several world sizes. Every output starts poisoned; the rows past the
received ones must stay as they were."""
from __future__ import annotations

import numpy as np

import cclx
from refs import FP8_TYPES, gen, np_dtype, poison

DTYPES = [d for d in ("f32", "f64", "f16", "bf16", "i8", "u8", "i32", "i64", "u32", "u64")
          if np_dtype(d) is not None] + [d for d in FP8_TYPES if np_dtype(d) is not None]
_seed = [5000]


def seed() -> int:
    _seed[0] += 1
    return _seed[0]


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="a2avdev", timeout=60,
                             abort_process_on_timeout_or_error=False)


def teardown(ctx):
    ctx.comm.finalize()


def _run(ctx, rows, row_shape, dtype, s, slack=(0, 0), inplace=False):
    """One call with split matrix rows[p][q] (rows rank p sends to q); checks this rank's output
    against the reference and that the input and the rows past the received ones are unchanged."""
    n, me = ctx.size, ctx.rank
    rows = np.asarray(rows, dtype=np.int64)
    send_cap = [int(rows[p].sum()) + slack[0] for p in range(n)]
    recv_cap = int(rows[:, me].sum()) + slack[1]
    ins = [gen(dtype, (send_cap[p],) + tuple(row_shape), p, s) for p in range(n)]
    expect = []
    for p in range(n):
        off = int(rows[p, :me].sum())
        expect.append(ins[p][off:off + int(rows[p, me])])
    expect = np.concatenate(expect) if expect else ins[me][:0]
    got_rows = expect.shape[0]
    what = f"{dtype} rows {rows.tolist()} row {row_shape} slack {slack} inplace={inplace}"
    if inplace:
        cap = max(send_cap[me], recv_cap)
        buf = poison((cap,) + tuple(row_shape), dtype)
        buf[:send_cap[me]] = ins[me]
        before = buf.copy()
        w = ctx.comm.device_alltoallv_single(buf, buf, rows[:, me].copy(), rows[me].copy())
        assert w.is_completed()
        assert np.array_equal(buf[:got_rows].view(np.uint8), expect.view(np.uint8)), what
        assert np.array_equal(buf[got_rows:].view(np.uint8), before[got_rows:].view(np.uint8)) or \
            got_rows < send_cap[me], what  # past the output: the input's rows, as they were
        return
    out = poison((recv_cap,) + tuple(row_shape), dtype)
    mine = ins[me].copy()
    w = ctx.comm.device_alltoallv_single(out, mine, rows[:, me].copy(), rows[me].copy())
    assert w.is_completed()
    assert np.array_equal(out[:got_rows].view(np.uint8), expect.view(np.uint8)), what
    assert np.array_equal(out[got_rows:].view(np.uint8),
                          poison(out[got_rows:].shape, dtype).view(np.uint8)), what + " (tail)"
    assert np.array_equal(mine.view(np.uint8), ins[me].view(np.uint8)), what + " (input changed)"


def _random_rows(n, s, hi, zero_frac=0.25):
    rng = np.random.default_rng([s, 31])
    rows = rng.integers(0, hi + 1, size=(n, n))
    rows[rng.random((n, n)) < zero_frac] = 0
    return rows


def case_uniform(ctx):
    n = ctx.size
    for dtype in ("f32", "bf16" if np_dtype("bf16") is not None else "f16", "i64"):
        _run(ctx, np.full((n, n), 3), (8,), dtype, seed())


def case_variable_every_dtype(ctx):
    n = ctx.size
    for dtype in DTYPES:
        for row_shape in ((1,), (3,), (7, 5), (1001,)):
            s = seed()
            _run(ctx, _random_rows(n, s, 6), row_shape, dtype, s)


def case_zero_rows(ctx):
    n = ctx.size
    _run(ctx, np.zeros((n, n)), (4,), "f32", seed())
    _run(ctx, np.zeros((n, n)), (4,), "f32", seed(), slack=(2, 3))


def case_all_to_one(ctx):
    n = ctx.size
    for target in (0, n - 1):
        rows = np.zeros((n, n), dtype=np.int64)
        rows[:, target] = [5 + p for p in range(n)]
        _run(ctx, rows, (3,), "f16", seed())


def case_capacity_slack(ctx):
    """Buffers larger than the call needs: the rows past the received ones stay poisoned."""
    s = seed()
    _run(ctx, _random_rows(ctx.size, s, 4), (6,), "i32", s, slack=(5, 7))


def case_large_rows(ctx):
    """Messages of many staging slots (the host transport pipelines them)."""
    s = seed()
    _run(ctx, _random_rows(ctx.size, s, 40, zero_frac=0.1), (1037,), "f32", s)


def case_in_place(ctx):
    s = seed()
    _run(ctx, _random_rows(ctx.size, s, 5), (9,), "f64", s, inplace=True)


def case_back_to_back(ctx):
    """Twenty calls with split sizes that change every call, no synchronization in between."""
    for i in range(20):
        s = seed()
        _run(ctx, _random_rows(ctx.size, s, 3 + i % 5), (2 + i % 3,), "u8", s)


def case_torch_tensors(ctx):
    """torch tensors on the CPU: bf16 data, int64 split tensors."""
    import torch
    n, me = ctx.size, ctx.rank
    s = seed()
    rows = torch.tensor(_random_rows(n, s, 5), dtype=torch.int64)
    g = torch.Generator().manual_seed(s)
    ins = [torch.randn(int(rows[p].sum()), 4, 3, generator=g).to(torch.bfloat16) for p in range(n)]
    out = torch.full((int(rows[:, me].sum()) + 2, 4, 3), float("nan"), dtype=torch.bfloat16)
    ctx.comm.device_alltoallv_single(out, ins[me], rows[:, me].contiguous(), rows[me].contiguous())
    parts = [ins[p][int(rows[p, :me].sum()):int(rows[p, :me + 1].sum())] for p in range(n)]
    ref = torch.cat(parts)
    assert torch.equal(out[:ref.shape[0]].view(torch.int16), ref.view(torch.int16))
    assert torch.isnan(out[ref.shape[0]:].float()).all()


def _expect_failure(ctx, rows, caps, needle):
    """A call with split matrix rows and per-rank (send rows, recv rows) capacities must fail on
    every rank with CclxUsageError naming `needle`, its output poisoned (all-ones bytes)."""
    n, me = ctx.size, ctx.rank
    rows = np.asarray(rows, dtype=np.int64)
    send_cap, recv_cap = caps(me)
    out = np.zeros((recv_cap, 3), dtype=np.float32)
    x = np.ones((send_cap, 3), dtype=np.float32)
    try:
        ctx.comm.device_alltoallv_single(out, x, rows[:, me].copy(), rows[me].copy())
    except cclx.CclxUsageError as e:
        assert needle in str(e), str(e)
    else:
        raise AssertionError("the call did not fail")
    assert (out.view(np.uint8) == 0xFF).all(), "output not poisoned"


def case_mismatch(ctx):
    """Rank 1 expects one more row from rank 0 than rank 0 sends: every rank fails naming both;
    the comm stays usable on CPU comms."""
    n = ctx.size
    rows = np.full((n, n), 2, dtype=np.int64)
    recv = rows.copy()
    recv[0, 1] = 3

    def caps(me):
        return int(rows[me].sum()), int(recv[:, me].sum())

    me = ctx.rank
    send_cap, recv_cap = caps(me)
    out = np.zeros((recv_cap, 3), dtype=np.float32)
    x = np.ones((send_cap, 3), dtype=np.float32)
    try:
        ctx.comm.device_alltoallv_single(out, x, recv[:, me].copy(), rows[me].copy())
    except cclx.CclxUsageError as e:
        assert "rank 0 sends 2 rows to rank 1, which expects 3" in str(e), str(e)
    else:
        raise AssertionError("the call did not fail")
    assert (out.view(np.uint8) == 0xFF).all(), "output not poisoned"
    _run(ctx, np.full((n, n), 1), (3,), "f32", seed())  # the comm still works


def case_capacity_error(ctx):
    """Rank n-1's split sizes sum beyond its input's rows: every rank fails naming it."""
    n = ctx.size
    rows = np.full((n, n), 2, dtype=np.int64)
    last = n - 1
    _expect_failure(ctx, rows, lambda me: (2 * n - (1 if me == last else 0), 2 * n),
                    f"rank {last}'s input split sizes sum beyond the {2 * n - 1} rows")
    _expect_failure(ctx, rows, lambda me: (2 * n, 2 * n - (1 if me == 0 else 0)),
                    f"rank 0's output split sizes sum beyond the {2 * n - 1} rows")
    _run(ctx, rows, (3,), "f32", seed())


def case_negative_size(ctx):
    n, me = ctx.size, ctx.rank
    rows = np.full((n, n), 1, dtype=np.int64)
    send = rows[me].copy()
    if me == 1:
        send[0] = -1
    out = np.zeros((n, 3), dtype=np.float32)
    try:
        ctx.comm.device_alltoallv_single(out, np.ones((n, 3), np.float32), rows[:, me].copy(), send)
    except cclx.CclxUsageError as e:
        assert "rank 1's input split size for rank 0 is negative (-1)" in str(e), str(e)
    else:
        raise AssertionError("the call did not fail")


def case_bad_arguments(ctx):
    """Rejected before anything moves, on this rank alone; the output is left as it was."""
    n = ctx.size
    c = ctx.comm
    x = np.ones((n, 4), np.float32)
    out = np.zeros((n, 4), np.float32)
    ok = np.ones(n, np.int64)
    bad = [
        ((out, x, ok.astype(np.int32), ok), "int64"),
        ((out, x, ok, ok.astype(np.float64)), "int64"),
        ((out, x, np.ones(n + 1, np.int64), ok), "output_split_sizes"),
        ((out, x, ok, np.ones((2 * n,), np.int64)[::2]), "contiguous"),
        ((np.zeros((n, 5), np.float32), x, ok, ok), "elements but output rows"),
        ((np.zeros((n, 4), np.float64), x, ok, ok), "dtype"),
        ((out, np.array(1.0, np.float32), ok, ok), "at least one dimension"),
    ]
    for args, needle in bad:
        try:
            c.device_alltoallv_single(*args)
        except cclx.CclxInvalidArgument as e:
            assert needle in str(e), (needle, str(e))
        else:
            raise AssertionError(f"accepted: {needle}")
        assert (out == 0).all()
    _run(ctx, np.full((n, n), 1), (4,), "f32", seed())  # every rank still in step


def case_hooks_see_it(ctx):
    """Pre and post hooks get the call under its own OpName, with torchcomms' argument names."""
    seen = []
    pre = ctx.comm.register_pre_hook(lambda name, i, a: seen.append((name, a.input, a.output)))
    post = ctx.comm.register_post_hook(lambda i, a: seen.append(("post", a.error)))
    try:
        n = ctx.size
        _run(ctx, np.full((n, n), 1), (2,), "f32", seed())
    finally:
        pre.remove()
        post.remove()
    assert len(seen) == 2 and seen[0][0] is cclx.OpName.device_alltoallv_single, seen
    assert seen[0][1].shape[0] == n and seen[1] == ("post", None), seen
