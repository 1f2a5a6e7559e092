"""Comm.all_reduce_rmsnorm on CUDA tensors (run by test_gpu_rmsnorm.py at world size 1, and with
2+ ranks sharing one GPU or one GPU each): the torch custom ops against a CPU comm of the same
ranks (the host twin) bit for bit, FP8 codes and scales included, every fused_algo alike, CUDA
graph capture and replay with fresh inputs, torch.compile (fullgraph; aot_eager, and inductor
with CUDA graphs where triton is present), and against float64."""
from __future__ import annotations

import numpy as np
import torch

import cclx

T = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
U = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name="rms_gpu", timeout=120)
    ctx.dev = ctx.comm.get_device()
    ctx.twin = cclx.new_comm("cclx", "cpu", name="rms_twin", timeout=120)


def teardown(ctx):
    ctx.comm.finalize()
    ctx.twin.finalize()


def inputs(ctx, dtype, tokens, hidden, seed):
    """(this rank's x, residual, weight, every rank's x) on the CPU, in dtype."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.ldexp(torch.ones(tokens, 1), (torch.arange(tokens) % 5 - 2)[:, None].float())
    xs = [((torch.rand(tokens, hidden, generator=g) * 4 - 2) * rows).to(T[dtype])
          for _ in range(ctx.size)]
    res = ((torch.rand(tokens, hidden, generator=g) * 6 - 3) * rows).to(T[dtype])
    w = (torch.rand(hidden, generator=g) + 0.5).to(T[dtype])
    return xs[ctx.rank], res, w, xs


def bits(t):
    return t.contiguous().view(torch.uint8).cpu()


def same(a, b, what):
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    if not torch.equal(bits(a), bits(b)):
        d = (bits(a) != bits(b)).nonzero()[0].tolist()
        raise AssertionError(f"{what}: differs at byte index {d}")


def twin(ctx, x, res, w, eps, quant=None, scale=None):
    return ctx.twin.all_reduce_rmsnorm(x, res, w, eps, quant=quant,
                                       scale=None if scale is None else scale.cpu())


def check_f64(xs, res, w, eps, y, r, dtype):
    n, u = len(xs), U[dtype]
    ar = sum(x.double() for x in xs)
    r64 = ar + res.double()
    a = sum(x.double().abs() for x in xs) + res.double().abs()
    inv = torch.rsqrt((r64 * r64).mean(-1, keepdim=True) + eps)
    y64 = r64 * inv * w.double()
    assert ((r.double().cpu() - r64).abs() <= (n + 2) * u * a).all(), f"{dtype}: residual"
    tol = (n + 2) * u * a * inv * w.double().abs() + y64.abs() * (4 * (n + 2) * u + 2 ** -20)
    assert ((y.double().cpu() - y64).abs() <= tol).all(), f"{dtype}: y"


def _one(ctx, dtype, tokens, hidden, seed):
    x, res, w, xs = inputs(ctx, dtype, tokens, hidden, seed)
    eps = 1e-5
    dx, dres, dw = x.to(ctx.dev), res.to(ctx.dev), w.to(ctx.dev)
    y, r = torch.ops.cclx.all_reduce_rmsnorm(ctx.comm.handle, dx, dres, dw, eps)
    ty, tr = twin(ctx, x, res, w, eps)
    same(y, ty, f"{dtype} y vs host twin")
    same(r, tr, f"{dtype} residual vs host twin")
    check_f64(xs, res, w, eps, y, r, dtype)
    for algo in ("oneshot", "twoshot", "unfused"):
        y2, r2 = ctx.comm.all_reduce_rmsnorm(dx, dres, dw, eps, hints={"fused_algo": algo})
        same(y2, ty, f"{dtype} {algo} y")
        same(r2, tr, f"{dtype} {algo} residual")
    q, s, r3 = ctx.comm.all_reduce_rmsnorm(dx, dres, dw, eps, quant="fp8")
    tq, ts, _ = twin(ctx, x, res, w, eps, quant="fp8")
    same(q, tq, f"{dtype} fp8 codes")
    same(s, ts, f"{dtype} fp8 scales")
    same(r3, tr, f"{dtype} fp8 residual")
    deq = q.float().cpu() * s.cpu()
    step = torch.ldexp(torch.ones_like(deq), (torch.floor(torch.log2(
        torch.clamp((y.float().cpu() / s.cpu()).abs(), min=2 ** -6))) - 3).int()) * s.cpu()
    assert ((deq - y.float().cpu()).abs() <= step).all(), f"{dtype}: codes off by more than a step"
    scale = torch.tensor([0.015], device=ctx.dev)
    q, s, _ = ctx.comm.all_reduce_rmsnorm(dx, dres, dw, eps, quant="fp8", scale=scale)
    tq, ts, _ = twin(ctx, x, res, w, eps, quant="fp8", scale=scale)
    same(q, tq, f"{dtype} static fp8 codes")
    assert (s.cpu() == 0.015).all() and torch.equal(s.cpu(), ts)


def case_bf16(ctx): _one(ctx, "bf16", 16, 4096, 1)
def case_f16(ctx): _one(ctx, "f16", 7, 1000, 2)
def case_f32(ctx): _one(ctx, "f32", 9, 8192, 3)
def case_bf16_many_tokens(ctx): _one(ctx, "bf16", 1024, 1024, 4)


def case_in_place_out_and_async(ctx):
    x, res, w, _ = inputs(ctx, "bf16", 12, 2048, 5)
    dx, dres, dw = x.to(ctx.dev), res.to(ctx.dev), w.to(ctx.dev)
    ty, tr = twin(ctx, x, res, w, 1e-6)
    outs = ctx.comm.all_reduce_rmsnorm(dx, dres, dw, 1e-6, out=(dx, dres))
    assert outs[0] is dx and outs[1] is dres
    same(dx, ty, "in place y")
    same(dres, tr, "in place residual")
    dx, dres = x.to(ctx.dev), res.to(ctx.dev)
    (y, r), work = ctx.comm.all_reduce_rmsnorm(dx, dres, dw, 1e-6, async_op=True)
    work.wait()
    same(y, ty, "async y")


def case_graph_replay(ctx):
    """Two fused calls (plain and FP8) captured once, replayed with new inputs each time."""
    hidden, tokens = 4096, 8
    bufs = [t.to(ctx.dev) for t in inputs(ctx, "bf16", tokens, hidden, 6)[:3]]
    c = ctx.comm
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c.all_reduce_rmsnorm(*bufs, 1e-5)  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y, r = c.all_reduce_rmsnorm(*bufs, 1e-5)
        q, s, r2 = c.all_reduce_rmsnorm(y, r, bufs[2], 1e-5, quant="fp8")
    for rep in range(4):
        x, res, w, _ = inputs(ctx, "bf16", tokens, hidden, 100 + rep)
        for b, v in zip(bufs, (x, res, w)):
            b.copy_(v)
        g.replay()
        torch.cuda.synchronize()
        ty, tr = twin(ctx, x, res, w, 1e-5)
        same(y, ty, f"replay {rep}: y")
        same(r, tr, f"replay {rep}: residual")
        tq, ts, tr2 = ctx.twin.all_reduce_rmsnorm(ty, tr, w, 1e-5, quant="fp8")
        same(q, tq, f"replay {rep}: fp8 codes")
        same(s, ts, f"replay {rep}: scales")
        same(r2, tr2, f"replay {rep}: second residual")


def case_torch_compile(ctx):
    c = ctx.comm
    x, res, w, _ = inputs(ctx, "bf16", 8, 1024, 7)
    dx, dres, dw = x.to(ctx.dev), res.to(ctx.dev), w.to(ctx.dev)

    def block(x, res, w):
        y, r = c.all_reduce_rmsnorm(x, res, w, 1e-6)
        q, s, r2 = c.all_reduce_rmsnorm(y * 0.5, r, w, 1e-6, quant="fp8")
        return y, r, q, s, r2

    want = block(dx, dres, dw)
    backends = [("aot_eager", None)]
    try:
        import triton  # noqa: F401
        backends.append(("inductor", "reduce-overhead"))  # CUDA graphs around the custom op
    except ImportError:
        print("torch_compile: no triton, inductor not tried", flush=True)
    for backend, mode in backends:
        f = torch.compile(block, backend=backend, mode=mode, fullgraph=True)
        for _ in range(3):  # reduce-overhead records on the second and replays on the third
            got = f(dx, dres, dw)
        for a, b in zip(got, want):
            same(a, b, f"torch.compile {backend}")
