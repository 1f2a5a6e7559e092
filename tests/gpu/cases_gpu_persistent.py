"""The persistent all-gather (all_gather_p_init / _exec / _free) on CUDA torch tensors (run by
test_gpu_persistent.py at world size 1, with ranks sharing one GPU, and a GPU each where there
are two): bit for bit against a CPU comm of the same ranks (the host twin) on random bytes, outputs
larger than one execution fills (the rest untouched), executions back to back without a sync,
CUDA graph capture and replay with fresh inputs, and bad calls that raise and change nothing."""
from __future__ import annotations

import pytest
import torch

import cclx

POISON = 0x7B


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name="pag_gpu", timeout=120)
    ctx.dev = ctx.comm.get_device()
    ctx.twin = cclx.new_comm("cclx", "cpu", name="pag_twin", timeout=120)


def teardown(ctx):
    ctx.comm.finalize()
    ctx.twin.finalize()


def poisoned(n, dtype, dev):
    t = torch.empty(n, dtype=dtype, device=dev)
    t.view(torch.uint8).fill_(POISON)
    return t


def rand_input(ctx, n, dtype, seed):
    """n elements of random bytes (every bit pattern), different per rank, on the CPU."""
    g = torch.Generator().manual_seed(seed * 131 + ctx.rank)
    es = torch.empty(0, dtype=dtype).element_size()
    return torch.randint(0, 256, (n * es,), dtype=torch.uint8, generator=g).view(dtype)


def expect(ctx, x):
    want = torch.empty(x.numel() * ctx.size, dtype=x.dtype)
    ctx.twin.all_gather_single(want, x)
    return want


def check(out, want, what):
    n = want.numel()
    got = out.reshape(-1).cpu()
    assert torch.equal(got[:n].view(torch.uint8), want.view(torch.uint8)), f"{what}: differs"
    tail = got[n:].view(torch.uint8)
    assert bool((tail == POISON).all()), f"{what}: wrote past the gathered elements"


def case_exec_equals_host_twin(ctx):
    dev, comm = ctx.dev, ctx.comm
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8):
        for n in (1, 777, 65537):
            for extra in (0, 13):
                out = poisoned(n * ctx.size + extra, dtype, dev)
                h = comm.all_gather_p_init(out)
                for rep in range(3):
                    x = rand_input(ctx, n, dtype, 100 * n + 10 * extra + rep)
                    if rep == 2:
                        comm.all_gather_p_exec(h, x.to(dev), async_op=True).wait()
                    else:
                        comm.all_gather_p_exec(h, x.to(dev))
                    torch.cuda.synchronize()
                    check(out, expect(ctx, x), f"{dtype} n={n} extra={extra} rep {rep}")
                comm.all_gather_p_free(h)


def case_back_to_back_and_smaller_inputs(ctx):
    dev, comm = ctx.dev, ctx.comm
    outs = [poisoned(4099 * ctx.size, torch.float16, dev) for _ in range(4)]
    hs = [comm.all_gather_p_init(o, hints={"algo": "dda"}) for o in outs]
    xs = [rand_input(ctx, 4099 - 1000 * i, torch.float16, 700 + i) for i in range(4)]
    for h, x in zip(hs, xs):  # no sync between them; each uses fewer elements than the last
        comm.all_gather_p_exec(h, x.to(dev), async_op=True)
    torch.cuda.synchronize()
    for i, (o, x) in enumerate(zip(outs, xs)):
        check(o, expect(ctx, x), f"back to back {i}")
        comm.all_gather_p_free(hs[i])


def case_graph_replay(ctx):
    dev, comm, n = ctx.dev, ctx.comm, 3001
    out = poisoned(n * ctx.size, torch.bfloat16, dev)
    h = comm.all_gather_p_init(out)
    x = torch.zeros(n, dtype=torch.bfloat16, device=dev)
    comm.all_gather_p_exec(h, x)  # first call outside the capture (set-up, staging)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            comm.all_gather_p_exec(h, x)
    torch.cuda.synchronize()
    for rep in range(3):
        xi = rand_input(ctx, n, torch.bfloat16, 900 + rep)
        x.copy_(xi.to(dev))
        out.view(torch.uint8).fill_(POISON)
        g.replay()
        torch.cuda.synchronize()
        check(out, expect(ctx, xi), f"graph replay {rep}")
    comm.all_gather_p_free(h)


def case_bad_calls_change_nothing(ctx):
    dev, comm, n = ctx.dev, ctx.comm, 100
    out = poisoned(n * ctx.size, torch.float32, dev)
    h = comm.all_gather_p_init(out)
    with pytest.raises(cclx.CclxInvalidArgument, match="need"):
        comm.all_gather_p_exec(h, torch.ones(n + 1, device=dev))
    with pytest.raises(cclx.CclxInvalidArgument):
        comm.all_gather_p_exec(h, torch.ones(n, dtype=torch.float64, device=dev))
    torch.cuda.synchronize()
    assert bool((out.view(torch.uint8) == POISON).all()), "a refused execution wrote the output"
    with pytest.raises(cclx.CclxInvalidArgument, match="cuda"):
        comm.all_gather_p_init(torch.ones(8))  # a host tensor on a CUDA comm
    with pytest.raises(cclx.CclxInvalidArgument, match="empty"):
        comm.all_gather_p_init(torch.ones(0, device=dev))
    comm.all_gather_p_free(h)
    with pytest.raises(cclx.CclxInvalidArgument, match="freed"):
        comm.all_gather_p_exec(h, torch.ones(n, device=dev))
    x = rand_input(ctx, n, torch.float32, 1234)  # the comm still works
    h2 = comm.all_gather_p_init(out)
    comm.all_gather_p_exec(h2, x.to(dev))
    torch.cuda.synchronize()
    check(out, expect(ctx, x), "after the bad calls")
    comm.all_gather_p_free(h2)
