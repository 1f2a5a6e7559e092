"""Comm.reduce_scatter_quantized on CUDA tensors (run by test_gpu_quantized.py at world size 1, and
with 2+ ranks sharing one GPU or one GPU each): bit for bit against a CPU comm of the same ranks
(the host twin, the same rounding definition) on the peer kernel and on the NCCL sequence (hint
algo=nccl where the comm has NCCL), SUM and AVG, odd counts, in place, CUDA graph capture and
replay with fresh inputs and a changed seed tensor, the FP8 payload (hint low_precision=fp8), and a
seed in the wrong place."""
from __future__ import annotations

import torch

import cclx

OPS = {"SUM": cclx.ReduceOp.SUM, "AVG": cclx.ReduceOp.AVG}


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name="rsq_gpu", timeout=120)
    ctx.dev = ctx.comm.get_device()
    ctx.twin = cclx.new_comm("cclx", "cpu", name="rsq_twin", timeout=120)


def teardown(ctx):
    ctx.comm.finalize()
    ctx.twin.finalize()


def inputs(ctx, count, seed):
    """This rank's float32 input (size x count) on the CPU: normal values, rows scaled apart."""
    g = torch.Generator().manual_seed(seed * 131 + ctx.rank)
    return torch.randn(ctx.size * count, generator=g) * 2.0 ** (ctx.rank % 3)


def twin(ctx, x, op, seed):
    out = torch.full((x.numel() // ctx.size,), float("nan"))
    ctx.twin.reduce_scatter_quantized(out, x.cpu(), OPS[op], torch.tensor([seed], dtype=torch.int64))
    return out


def same(got, want, what):
    a = got.cpu().view(torch.int32)
    b = want.view(torch.int32)
    if not torch.equal(a, b):
        i = (a != b).nonzero()[0].item()
        raise AssertionError(f"{what}: {int((a != b).sum())} elements differ, first {i}: "
                             f"{got.cpu()[i].item()} vs twin {want[i].item()}")


def gpu_call(ctx, out, x, op, seed_t, hints=None):
    ctx.comm.reduce_scatter_quantized(out, x, OPS[op], seed_t, hints=hints).wait()
    torch.cuda.synchronize()


def case_matches_host_twin(ctx):
    for hints in (None, {"algo": "nccl"}):
        for count in (1, 7, 4099, (1 << 20) + 3):
            for op in ("SUM", "AVG"):
                x = inputs(ctx, count, count + len(op))
                seed = 1000 + 7 * ctx.rank + count
                out = torch.full((count,), float("nan"), device=ctx.dev)
                xd = x.to(ctx.dev)
                gpu_call(ctx, out, xd, op, torch.tensor([seed], dtype=torch.int64, device=ctx.dev),
                         hints)
                what = f"{op} count {count} hints {hints}"
                assert torch.equal(xd.cpu(), x), what + ": input changed"
                same(out, twin(ctx, x, op, seed), what)


def case_in_place(ctx):
    count = 65537
    for op in ("SUM", "AVG"):
        x = inputs(ctx, count, 3)
        buf = x.to(ctx.dev)
        out = buf[ctx.rank * count:(ctx.rank + 1) * count]
        gpu_call(ctx, out, buf, op, torch.tensor([5 + ctx.rank], dtype=torch.int64, device=ctx.dev))
        same(out, twin(ctx, x, op, 5 + ctx.rank), f"in place {op}")


def case_graph_replay_with_new_seed(ctx):
    count = 40961
    x0 = inputs(ctx, count, 11)
    sin = x0.to(ctx.dev)
    out = torch.full((count,), float("nan"), device=ctx.dev)
    seed_t = torch.tensor([1], dtype=torch.int64, device=ctx.dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture (staging grows here)
        ctx.comm.reduce_scatter_quantized(out, sin, cclx.ReduceOp.SUM, seed_t)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ctx.comm.reduce_scatter_quantized(out, sin, cclx.ReduceOp.SUM, seed_t)
    torch.cuda.synchronize()
    results = {}
    for k, (data, seed) in enumerate([(12, 100), (12, 101), (13, 100), (12, 100)]):
        x = inputs(ctx, count, data)
        sin.copy_(x)
        seed_t.fill_(seed + 17 * ctx.rank)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        same(out, twin(ctx, x, "SUM", seed + 17 * ctx.rank), f"replay {k} (data {data}, seed {seed})")
        results[k] = out.cpu().clone()
    assert torch.equal(results[0], results[3]), "the same seed and data replayed differently"
    assert not torch.equal(results[0], results[1]), "a new seed value did not reach the kernel"


def case_fp8_payload(ctx):
    """Hint low_precision=fp8: the FP8 reduce-scatter (the twin runs the same), the seed unused.
    At world size 1 the GPU has no FP8 kernel (it needs 2 ranks) and the case has nothing to
    compare."""
    if ctx.size < 2:
        return
    fp8 = {"low_precision": "fp8"}
    for count in (5, 4099, (1 << 18) + 1):
        for op in ("SUM", "AVG"):
            x = inputs(ctx, count, 31 + count)
            out = torch.full((count,), float("nan"), device=ctx.dev)
            gpu_call(ctx, out, x.to(ctx.dev), op,
                     torch.tensor([7], dtype=torch.int64, device=ctx.dev), fp8)
            want = torch.full((count,), float("nan"))
            ctx.twin.reduce_scatter_quantized(want, x, OPS[op], torch.tensor([8], dtype=torch.int64),
                                              hints=fp8)
            same(out, want, f"fp8 {op} count {count}")


def case_seed_in_the_wrong_place(ctx):
    count = 16
    x = torch.ones(ctx.size * count, device=ctx.dev)
    out = torch.full((count,), 5.0, device=ctx.dev)
    for what, seed in (("CPU seed", torch.tensor([1], dtype=torch.int64)),
                       ("int32 seed", torch.tensor([1], dtype=torch.int32, device=ctx.dev))):
        try:
            ctx.comm.reduce_scatter_quantized(out, x, cclx.ReduceOp.SUM, seed)
        except cclx.CclxError as e:
            assert "seed" in str(e), f"{what}: {e}"
        else:
            raise AssertionError(f"{what}: no error")
    torch.cuda.synchronize()
    assert torch.all(out == 5.0)
