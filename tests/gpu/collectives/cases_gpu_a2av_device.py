"""device_alltoallv_single on CUDA torch tensors (run by test_gpu_a2av_device.py at world size 1,
with 2, 3, 5 and 8 ranks sharing one GPU, and a GPU each where there are two): byte for byte
against a reference each rank builds on the CPU from the same seeds (every rank regenerates every
rank's input and split matrix), the rows past the received ones unchanged; back to back without a
sync; CUDA-graph capture replayed with split sizes changed between replays (at world size 1 too:
one rank is a local kernel); the NCCL path by hint where the comm has NCCL; bad
arguments; split sizes that disagree or exceed the output (the call fails naming the ranks, the
output NaN)."""
from __future__ import annotations

import torch

import cclx

POISON = 0x7B
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8, torch.float64,
          torch.float8_e4m3fn)


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name="a2avdev_gpu", timeout=120)
    ctx.dev = ctx.comm.get_device()
    # Ranks of a GPU of their own have NCCL; ranks sharing one do not.
    ctx.nccl = ctx.size <= torch.cuda.device_count()


def teardown(ctx):
    ctx.comm.finalize()


def rows_matrix(n, seed, hi, zero_frac=0.25):
    g = torch.Generator().manual_seed(seed)
    m = torch.randint(0, hi + 1, (n, n), generator=g, dtype=torch.int64)
    m[torch.rand((n, n), generator=g) < zero_frac] = 0
    return m


def inputs(n, m, row_shape, dtype, seed, slack=0):
    """Every rank's input (CPU): random bytes, m[p].sum() + slack rows of row_shape."""
    es = torch.empty(0, dtype=dtype).element_size()
    per = es
    for d in row_shape:
        per *= d
    out = []
    for p in range(n):
        rows = int(m[p].sum()) + slack
        g = torch.Generator().manual_seed(seed * 131 + p)
        b = torch.randint(0, 256, (rows * per,), dtype=torch.uint8, generator=g)
        out.append(b.view(dtype).reshape((rows,) + tuple(row_shape)))
    return out


def expected(ctx, m, ins):
    me = ctx.rank
    parts = [ins[p][int(m[p, :me].sum()):int(m[p, :me + 1].sum())] for p in range(ctx.size)]
    return torch.cat(parts)


def poisoned(rows, row_shape, dtype, dev):
    t = torch.empty((rows,) + tuple(row_shape), dtype=dtype, device=dev)
    t.view(torch.uint8).fill_(POISON)
    return t


def check(out, want, what):
    got = out.cpu()
    k = want.shape[0]
    assert torch.equal(got[:k].view(torch.uint8), want.view(torch.uint8)), f"{what}: differs"
    assert bool((got[k:].view(torch.uint8) == POISON).all()), f"{what}: wrote past the rows"


def one_call(ctx, m, row_shape, dtype, seed, slack=0, hints=None):
    me, dev = ctx.rank, ctx.dev
    ins = inputs(ctx.size, m, row_shape, dtype, seed, slack)
    x = ins[me].to(dev)
    out = poisoned(int(m[:, me].sum()) + slack, row_shape, dtype, dev)
    w = ctx.comm.device_alltoallv_single(out, x, m[:, me].contiguous().to(dev),
                                         m[me].contiguous().to(dev), hints=hints)
    w.wait()
    torch.cuda.synchronize()
    check(out, expected(ctx, m, ins), f"{dtype} {tuple(row_shape)} rows {m.tolist()}")
    assert torch.equal(x.cpu().view(torch.uint8), ins[me].view(torch.uint8)), "input changed"


def case_equals_reference(ctx):
    n, seed = ctx.size, 100
    for dtype in DTYPES:
        for row_shape, hi in (((1,), 9), ((3, 5), 7), ((4096,), 3), ((100003,), 2)):
            for variant in range(4):
                seed += 1
                m = rows_matrix(n, seed, hi)
                if variant == 1:
                    m.zero_()
                if variant == 2:  # everything to the last rank
                    m.zero_()
                    m[:, n - 1] = torch.arange(1, n + 1)
                one_call(ctx, m, row_shape, dtype, seed, slack=3 if variant == 3 else 0)


def case_back_to_back_no_sync(ctx):
    n, me, dev = ctx.size, ctx.rank, ctx.dev
    pending = []
    for i in range(16):
        seed = 300 + i
        m = rows_matrix(n, seed, 2 + i % 6)
        ins = inputs(n, m, (1 + 31 * (i % 3),), torch.bfloat16, seed)
        out = poisoned(int(m[:, me].sum()), (1 + 31 * (i % 3),), torch.bfloat16, dev)
        ctx.comm.device_alltoallv_single(out, ins[me].to(dev), m[:, me].contiguous().to(dev),
                                         m[me].contiguous().to(dev))
        pending.append((out, expected(ctx, m, ins), i))
    torch.cuda.synchronize()
    for out, want, i in pending:
        check(out, want, f"back-to-back call {i}")


def case_graph_changing_split_sizes(ctx):
    n, me, dev = ctx.size, ctx.rank, ctx.dev
    row_shape, dtype, cap = (64,), torch.float32, 9 * n
    x = torch.zeros((cap,) + row_shape, dtype=dtype, device=dev)
    out = poisoned(cap, row_shape, dtype, dev)
    ss = torch.zeros(n, dtype=torch.int64, device=dev)
    rs = torch.zeros(n, dtype=torch.int64, device=dev)
    g = torch.cuda.CUDAGraph()
    # every world size captures: one rank is a local kernel (the split sizes stay on the device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: the staging exists before the capture
        ctx.comm.device_alltoallv_single(out, x, rs, ss)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        ctx.comm.device_alltoallv_single(out, x, rs, ss)
    torch.cuda.synchronize()
    for rep in range(6):
        seed = 500 + rep
        m = rows_matrix(n, seed, 9)
        if rep == 2:
            m.zero_()
        ins = inputs(n, m, row_shape, dtype, seed)
        x.view(torch.uint8).fill_(0)
        x[:ins[me].shape[0]].copy_(ins[me])
        out.view(torch.uint8).fill_(POISON)
        ss.copy_(m[me])
        rs.copy_(m[:, me])
        g.replay()
        torch.cuda.synchronize()
        check(out, expected(ctx, m, ins), f"replay {rep}")


def case_nccl_path_by_hint(ctx):
    """Hint algo=nccl: the split sizes go to the host (where the comm has NCCL)."""
    if not ctx.nccl:
        return
    n = ctx.size
    for dtype in (torch.float32, torch.uint8):
        m = rows_matrix(n, 700, 5)
        one_call(ctx, m, (17,), dtype, 700, slack=2, hints={"algo": "nccl"})


def case_bad_arguments(ctx):
    n, dev = ctx.size, ctx.dev
    x = torch.ones((n, 4), device=dev)
    out = torch.zeros((n, 4), device=dev)
    ok = torch.ones(n, dtype=torch.int64, device=dev)
    bad = [
        ((out, x, ok.cpu(), ok), "cpu"),
        ((out, x, ok, ok.to(torch.int32)), "int64"),
        ((out, x, torch.ones(n + 1, dtype=torch.int64, device=dev), ok), "output_split_sizes"),
        ((torch.zeros((n, 5), device=dev), x, ok, ok), "elements but output rows"),
        ((out.to(torch.float16), x, ok, ok), "dtype"),
    ]
    for args, needle in bad:
        try:
            ctx.comm.device_alltoallv_single(*args)
        except cclx.CclxInvalidArgument as e:
            assert needle in str(e), (needle, str(e))
        else:
            raise AssertionError(f"accepted: {needle}")
    torch.cuda.synchronize()
    assert bool((out == 0).all())


def _failing(ctx, name, spoil, needle):
    """A call on a comm of its own whose split sizes cannot run: every rank gets CclxUsageError
    naming `needle` (at the call, at synchronization or at the next call), rank 0's output NaN."""
    n, me, dev = ctx.size, ctx.rank, ctx.dev
    c = cclx.new_comm("cclx", torch.device("cuda"), name=name, timeout=20,
                      abort_process_on_timeout_or_error=False)
    m = torch.full((n, n), 2, dtype=torch.int64)
    x = torch.ones((2 * n + 1, 3), device=dev)
    out = torch.zeros((2 * n, 3), device=dev)
    ss, rs = m[me].clone(), m[:, me].clone()
    spoil(me, ss, rs)
    try:
        c.device_alltoallv_single(out, x, rs.to(dev), ss.to(dev))
        torch.cuda.synchronize()
        c.barrier()
        torch.cuda.synchronize()
        c.barrier()
    except cclx.CclxError as e:
        assert needle in str(e), str(e)
    else:
        raise AssertionError("the call did not fail")
    torch.cuda.synchronize()
    if me == 0:
        assert bool((out.view(torch.uint8) == 0xFF).all()), "rank 0's output is not NaN"
    try:
        c.abort()
    except cclx.CclxError:
        pass


def case_split_sizes_disagree(ctx):
    if ctx.size < 2:
        return
    _failing(ctx, "a2avdev_mismatch", lambda me, s, r: s.__setitem__(0, 3) if me == 1 else None,
             "disagree")


def case_split_sizes_beyond_output(ctx):
    _failing(ctx, "a2avdev_capacity",
             lambda me, s, r: r.__setitem__(ctx.size - 1, 3) if me == 0 else None,
             "split sizes")
