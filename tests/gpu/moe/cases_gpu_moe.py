"""cclx.moe on CUDA tensors (run by test_gpu_moe.py at world size 1 and with ranks sharing one
GPU): dispatch bit for bit like the CPU twin (a CPU comm of the same ranks), combine against the
float64 reference, plain and FP8, bf16 / f16 / f32, hidden sizes odd to 7168; no host
synchronization with device_alltoallv_single; a CUDA graph replayed with routing that changes
between replays; torch.compile. The cases needing device_alltoallv_single are skipped by the
test module when the Comm lacks it."""
from __future__ import annotations

import os
import sys

import torch

import cclx
import cclx.moe as moe

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "moe"))
from moe_ref import apply_experts, check_combine, check_dispatch, expert_fn, inputs  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name="moe_gpu", timeout=120)
    ctx.dev = ctx.comm.get_device()
    ctx.twin = cclx.new_comm("cclx", "cpu", name="moe_twin", timeout=120)


def teardown(ctx):
    ctx.comm.finalize()
    ctx.twin.finalize()


def _one(ctx, seed, H, k, L, dtype, kind, fp8, T=6, bound=None):
    N, r = ctx.size, ctx.rank
    E = L * N
    data = inputs(seed, N, [T] * N, H, k, E, DT[dtype], kind)
    x, ids, w = data[r]
    et, h = moe.dispatch(ctx.comm, x.to(ctx.dev), ids.to(ctx.dev), w.to(ctx.dev), E, fp8=fp8,
                         max_tokens_per_rank=bound)
    tet, th = moe.dispatch(ctx.twin, x, ids, w, E, fp8=fp8, max_tokens_per_rank=bound)
    what = f"{kind} H={H} k={k} L={L} {dtype} fp8={fp8}"
    assert torch.equal(et.cpu().view(torch.uint8), tet.view(torch.uint8)), what + ": vs twin"
    assert torch.equal(h.expert_offsets.cpu(), th.expert_offsets), what
    check_dispatch(et, h.expert_counts, h.expert_offsets, data, r, L, fp8, DT[dtype])
    y = moe.combine(ctx.comm, apply_experts(et, h.expert_counts, h.expert_offsets, r, L), h)
    check_combine(y, x, ids, w, fp8, DT[dtype])


def case_routing_and_dtypes(ctx):
    for fp8 in (False, True):
        _one(ctx, 1, 33, 2, 4, "f32", "random", fp8)
        _one(ctx, 2, 133, 8, 8, "bf16", "random", fp8)
        _one(ctx, 3, 256, 1, 2, "f16", "one_expert", fp8)
        _one(ctx, 4, 72, 3, 4, "bf16", "rank0_only", fp8, bound=9)
        _one(ctx, 5, 40, 5, 2, "f32", "dup", fp8)
        _one(ctx, 6, 130, 4, 4, "bf16", "same_rank", fp8)


def case_hidden_7168_top8(ctx):
    for fp8 in (False, True):
        _one(ctx, 7, 7168, 8, 32, "bf16", "random", fp8, T=16)


def _step(ctx, E, bound, fp8):
    comm, L, r = ctx.comm, E // ctx.size, ctx.rank

    def step(x, ids, w):
        et, h = moe.dispatch(comm, x, ids, w, E, fp8=fp8, max_tokens_per_rank=bound)
        outs = []
        for l in range(L):  # f_e on every row (the rows of other experts are discarded)
            outs.append(expert_fn(et, r * L + l))
        rows = torch.arange(et.shape[0], device=et.device)
        which = torch.searchsorted(h.expert_offsets[1:], rows, right=True).clamp(max=L - 1)
        y = torch.stack(outs).gather(0, which.view(1, -1, 1).expand(1, -1, et.shape[1]))[0]
        return moe.combine(comm, y, h)

    return step


def case_no_host_sync(ctx):
    """With device_alltoallv_single nothing in dispatch + combine synchronizes the host."""
    if not hasattr(ctx.comm, "device_alltoallv_single"):
        return  # skipped by test_gpu_moe.py
    N, E, T = ctx.size, 4 * ctx.size, 8
    data = inputs(11, N, [T] * N, 64, 3, E, torch.bfloat16, "random")
    x, ids, w = (t.to(ctx.dev) for t in data[ctx.rank])
    step = _step(ctx, E, T, True)
    step(x, ids, w)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y = step(x, ids, w)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    check_combine(y, *data[ctx.rank], True, torch.bfloat16)


def case_cuda_graph_changing_routing(ctx):
    """One capture, replays with new tokens and new routing (different counts per rank and
    expert each time), every replay against the reference."""
    if not hasattr(ctx.comm, "device_alltoallv_single"):
        return  # skipped by test_gpu_moe.py
    N, T, H, k = ctx.size, 12, 96, 3
    E = 4 * N
    for fp8 in (False, True):
        step = _step(ctx, E, T, fp8)
        sx = torch.zeros(T, H, dtype=torch.bfloat16, device=ctx.dev)
        sids = torch.zeros(T, k, dtype=torch.int64, device=ctx.dev)
        sw = torch.zeros(T, k, dtype=torch.float32, device=ctx.dev)
        first = inputs(100, N, [T] * N, H, k, E, torch.bfloat16, "random")[ctx.rank]
        for s, v in zip((sx, sids, sw), first):
            s.copy_(v)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step(sx, sids, sw)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            sy = step(sx, sids, sw)
        for rep, kind in enumerate(("random", "one_expert", "same_rank", "last_empty", "dup")):
            data = inputs(200 + rep, N, [T] * N, H, k, E, torch.bfloat16, kind)
            for s, v in zip((sx, sids, sw), data[ctx.rank]):
                s.copy_(v)
            g.replay()
            torch.cuda.synchronize()
            check_combine(sy.clone(), *data[ctx.rank], fp8, torch.bfloat16)


def case_torch_compile(ctx):
    N, T, E = ctx.size, 5, 2 * ctx.size
    data = inputs(12, N, [T] * N, 48, 2, E, torch.float32, "random")
    x, ids, w = (t.to(ctx.dev) for t in data[ctx.rank])
    step = _step(ctx, E, T, False)
    eager = step(x, ids, w)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(x, ids, w)
    assert torch.equal(eager, compiled)
    check_combine(eager, *data[ctx.rank], False, torch.float32)
