"""Direct-access (DDA) allreduce forced through hints {"algo": "flat"/"lamport"/"tree"} for
bf16/f16/f32 from 1 to 4M elements (odd sizes included), bitwise-identical results on every rank, and the
low-precision (FP8) hint with its accuracy bound (2 processes, CUDA torch tensors)."""
from __future__ import annotations

import torch
import torch.distributed as dist

import cclx
from trefs import check, gen, rel_l2, setup_comms, teardown_comms, reduce_ref

COUNTS = [1, 2, 3, 7, 255, 1024, 4097, 65537, 300_001, (1 << 20) + 1, 4 << 20]
LP_BOUND_ALLREDUCE = 0.04  # normalized L2 error of the FP8 allreduce
LP_BOUND_OTHER = 0.05      # one FP8 quantization (all_gather / reduce_scatter / all_to_all)
LP_BOUND_ONESHOT = 0.03    # the one-shot FP8 allreduce: one quantization, sum in float
_s = [9000]


def seed():
    _s[0] += 1
    return _s[0]


def setup(ctx):
    setup_comms(ctx, "dda")


def teardown(ctx):
    teardown_comms(ctx)


def _same_on_all_ranks(ctx, t, what):
    parts = [torch.empty_like(t) for _ in range(ctx.size)]
    dist.all_gather(parts, t)
    torch.cuda.synchronize()
    for r, p in enumerate(parts):
        if not torch.equal(p, t):
            raise AssertionError(f"{what}: rank {r}'s result differs bitwise from rank "
                                 f"{ctx.rank}'s")


def _dda(ctx, algo, dtype):
    picked = set()
    for count in COUNTS:
        for inplace in (True, False):
            s = seed()
            xs = [gen(dtype, (count,), r, s, ctx.dev) for r in range(ctx.size)]
            exp, scale = reduce_ref(xs, "SUM", dtype)
            x = xs[ctx.rank].clone()
            out = x if inplace else torch.empty_like(x)
            ctx.comm.all_reduce(x, cclx.ReduceOp.SUM, False, {"algo": algo},
                                output=None if inplace else out)
            torch.cuda.synchronize()
            what = f"algo={algo} {dtype} count={count} inplace={inplace}"
            check(out, exp, scale, dtype, what)
            _same_on_all_ranks(ctx, out, what)
        picked.add(ctx.comm.get_algo(count, cclx.dtype_of(x), cclx.ReduceOp.SUM,
                                     {"algo": algo}))
    print(f"rank {ctx.rank}: hint algo={algo} {dtype}: dispatcher picked {sorted(picked)}",
          flush=True)


def case_flat_bf16(ctx): _dda(ctx, "flat", "bf16")
def case_flat_f16(ctx): _dda(ctx, "flat", "f16")
def case_flat_f32(ctx): _dda(ctx, "flat", "f32")
def case_lamport_bf16(ctx): _dda(ctx, "lamport", "bf16")
def case_lamport_f16(ctx): _dda(ctx, "lamport", "f16")
def case_lamport_f32(ctx): _dda(ctx, "lamport", "f32")
def case_tree_bf16(ctx): _dda(ctx, "tree", "bf16")
def case_tree_f16(ctx): _dda(ctx, "tree", "f16")
def case_tree_f32(ctx): _dda(ctx, "tree", "f32")


def case_auto_back_to_back(ctx):
    """Many small allreduces in a row (flag reuse) with the default selection."""
    for i in range(200):
        v = i % 64  # sums stay exact in bf16
        t = torch.full((513,), float(v + ctx.rank), device=ctx.dev, dtype=torch.bfloat16)
        ctx.comm.all_reduce(t)
        if i % 50 == 49:
            torch.cuda.synchronize()
            assert (t.float() == ctx.size * v + sum(range(ctx.size))).all().item(), (i, t[:3])
    torch.cuda.synchronize()


def _normal(ctx, dtype, n, s, rank):
    g = torch.Generator().manual_seed(s * 31 + rank)
    return torch.randn(n, generator=g).to(dtype).to(ctx.dev)


def case_low_precision_allreduce(ctx):
    for dtype in (torch.float32, torch.bfloat16):
        for count in (8 << 20, (8 << 20) + 1000):
            for algo in ("oneshot", "twoshot"):
                s = seed()
                xs = [_normal(ctx, dtype, count, s, r) for r in range(ctx.size)]
                exp = sum(x.double() for x in xs)
                x = xs[ctx.rank].clone()
                ctx.comm.all_reduce(x, cclx.ReduceOp.SUM, False,
                                    {"low_precision": "fp8", "fp8_algo": algo})
                torch.cuda.synchronize()
                err = rel_l2(x, exp)
                print(f"rank {ctx.rank}: fp8 {algo} allreduce {dtype} {count}: normalized error "
                      f"{err:.4f}", flush=True)
                # One quantization (one-shot) against two.
                bound = LP_BOUND_ONESHOT if algo == "oneshot" else LP_BOUND_ALLREDUCE
                assert err <= bound, f"fp8 {algo} allreduce {dtype}: error {err:.4f}"
                assert torch.isfinite(x.float()).all().item()


def case_low_precision_other(ctx):
    n, count, h = ctx.size, 4 << 20, {"low_precision": "fp8"}
    s = seed()
    xs = [_normal(ctx, torch.bfloat16, n * count, s, r) for r in range(ctx.size)]
    out = torch.empty(count, device=ctx.dev, dtype=torch.bfloat16)
    ctx.comm.reduce_scatter_single(out, xs[ctx.rank], cclx.ReduceOp.SUM, False, h)
    g = torch.empty(n * count * n, device=ctx.dev, dtype=torch.bfloat16)
    ctx.comm.all_gather_single(g, xs[ctx.rank], False, h)
    a = torch.empty(n * count, device=ctx.dev, dtype=torch.bfloat16)
    ctx.comm.all_to_all_single(a, xs[ctx.rank], False, h)
    torch.cuda.synchronize()
    blk = slice(ctx.rank * count, (ctx.rank + 1) * count)
    errs = {
        "reduce_scatter": rel_l2(out, sum(x.double() for x in xs)[blk]),
        "all_gather": rel_l2(g, torch.cat(xs)),
        "all_to_all": rel_l2(a, torch.cat([x.view(n, count)[ctx.rank] for x in xs])),
    }
    print(f"rank {ctx.rank}: fp8 normalized errors {errs}", flush=True)
    for k, e in errs.items():
        assert e <= LP_BOUND_OTHER, f"fp8 {k}: error {e:.4f} > {LP_BOUND_OTHER}"
