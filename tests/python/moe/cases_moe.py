"""cclx.moe dispatch / combine on CPU processes (run by test_moe.py at 2, 3, 4 and 8 ranks):
against the float64 reference of moe_ref.py on random and adversarial routing (one expert for
all, only rank 0's experts, empty experts, all of a token's experts on one rank, repeated ids,
an expert-less last rank, ranks without tokens), k = 1..8, hidden sizes odd to 7168, f32 / bf16
/ f16, plain and FP8; the torch custom ops under torch.compile and fake tensors; the
device_alltoallv_single route of the exchange and its poison; argument errors."""
from __future__ import annotations

import torch

import cclx
import cclx.moe as moe
from cclx.moe import _route
from moe_ref import apply_experts, check_combine, check_dispatch, inputs

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def setup(ctx):
    ctx.comm = cclx.new_comm("cclx", "cpu", name="moe", timeout=60)


def teardown(ctx):
    ctx.comm.finalize()


def one(ctx, seed, H, k, L, dtype, kind, fp8, Ts=None, bound=None, mode="auto"):
    """One dispatch + experts + combine, checked against the reference; returns the handle."""
    N, r = ctx.size, ctx.rank
    E = L * N
    if Ts is None:
        Ts = [5 + (3 * i) % 4 for i in range(N)]
    if bound is None:
        Ts = [max(Ts)] * N  # throughput mode: the same T everywhere
    data = inputs(seed, N, Ts, H, k, E, DT[dtype], kind)
    x, ids, w = data[r]
    et, h = moe.dispatch(ctx.comm, x, ids, w, E, fp8=fp8, max_tokens_per_rank=bound, mode=mode)
    what = f"{kind} H={H} k={k} L={L} {dtype} fp8={fp8} T={Ts}"
    # Both exchanges first, the checks after: a failing check on one rank must not leave the
    # others waiting in a collective (the following cases would see a desynchronized comm).
    y = moe.combine(ctx.comm, apply_experts(et, h.expert_counts, h.expert_offsets, r, L), h)
    try:
        assert et.dtype == x.dtype and et.shape[1] == H, "expert_tokens dtype / shape"
        check_dispatch(et, h.expert_counts, h.expert_offsets, data, r, L, fp8, DT[dtype])
        assert y.shape == x.shape and y.dtype == x.dtype, "combine dtype / shape"
        check_combine(y, x, ids, w, fp8, DT[dtype])
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None
    return h


def case_random_f32_odd_hidden(ctx):
    for fp8 in (False, True):
        one(ctx, 1, 33, 2, 4, "f32", "random", fp8)


def case_random_bf16_k8(ctx):
    for fp8 in (False, True):
        one(ctx, 2, 133, 8, 8, "bf16", "random", fp8)


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


def case_only_rank0_experts(ctx):  # every other rank's experts are empty
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


def case_hidden_7168(ctx):
    for fp8 in (False, True):
        one(ctx, 20, 7168, 8, 8, "bf16", "random", fp8, Ts=[3] * ctx.size)


def case_low_latency_uneven_tokens(ctx):
    """Different T per rank (rank 1 none at all) under one bound; the capacities follow it."""
    Ts = [(i * 5) % 7 if i != 1 else 0 for i in range(ctx.size)]
    h = one(ctx, 21, 36, 3, 2, "f32", "random", False, Ts=Ts, bound=7)
    assert h.mode == "low_latency" and h.layout.cap_recv == 7 * ctx.size
    one(ctx, 22, 36, 3, 2, "bf16", "random", True, Ts=Ts, bound=7, mode="low_latency")


def case_throughput_mode_capacity(ctx):
    h = one(ctx, 23, 20, 2, 2, "f32", "random", False, mode="throughput")
    assert h.mode == "throughput" and h.layout.cap_recv == h.num_tokens * ctx.size


def _routing(ctx, T=4, H=24, k=2, L=2, seed=30):
    return inputs(seed, ctx.size, [T] * ctx.size, H, k, L * ctx.size, torch.float32,
                  "random"), L * ctx.size


def case_torch_compile_fullgraph(ctx):
    data, E = _routing(ctx)
    x, ids, w = data[ctx.rank]
    L = E // ctx.size
    comm = ctx.comm

    def step(x, ids, w):
        et, h = moe.dispatch(comm, x, ids, w, E, max_tokens_per_rank=4)
        return moe.combine(comm, et * 2.0, h)

    eager = step(x, ids, w)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")(x, ids, w)
    assert torch.equal(eager, compiled)
    want = sum(2 * w[:, j:j + 1] * x for j in range(ids.shape[1]))
    assert torch.allclose(eager, want, rtol=1e-5, atol=1e-5), L


def case_fake_tensor_shapes(ctx):
    from torch._subclasses.fake_tensor import FakeTensorMode

    N = ctx.size
    with FakeTensorMode():
        x = torch.empty(6, 40, dtype=torch.bfloat16)
        ids = torch.empty(6, 3, dtype=torch.int64)
        w = torch.empty(6, 3)
        out = torch.ops.cclx.moe_dispatch(ctx.comm.handle, x, ids, w, 4 * N, True, 10)
        assert tuple(out[0].shape) == (10 * N * 3, 40) and out[0].dtype == torch.bfloat16
        assert tuple(out[1].shape) == (4,) and tuple(out[2].shape) == (5,)
        assert tuple(out[5].shape) == (10 * N, 3) and tuple(out[8].shape) == (6, 3)
        y = torch.ops.cclx.moe_combine(ctx.comm.handle, out[0], *out[3:], 6 * min(N, 3))
        assert tuple(y.shape) == (6, 40) and y.dtype == torch.bfloat16


class _DeviceA2av:
    """A comm with device_alltoallv_single over the host all_to_all_v_single (split sizes as
    tensors, like the real method's); poison=True answers like a failed collective (all-ones
    bytes in the output, no error raised)."""

    def __init__(self, comm, poison=False):
        self.c, self.poison, self.calls = comm, poison, 0

    def __getattr__(self, name):
        return getattr(self.c, name)

    def device_alltoallv_single(self, output, input, output_split_sizes, input_split_sizes,
                                async_op=False, hints=None, timeout=None):
        assert output_split_sizes.dtype == torch.int64 and input_split_sizes.dtype == torch.int64
        assert output_split_sizes.device == output.device
        self.calls += 1
        o, i = output_split_sizes.tolist(), input_split_sizes.tolist()
        self.c.all_to_all_v_single(output[:sum(o)], input[:sum(i)], o, i)
        if self.poison:
            output.view(torch.uint8).fill_(255)


def case_device_alltoallv_route(ctx):
    """The exchange through a comm's device_alltoallv_single gives what the fallback gives."""
    data, E = _routing(ctx, H=64, k=3)
    x, ids, w = data[ctx.rank]
    dev = _DeviceA2av(ctx.comm)
    for fp8 in (False, True):
        a = _route.dispatch_impl(dev, x, ids, w, E, fp8, 4)
        b = _route.dispatch_impl(ctx.comm, x, ids, w, E, fp8, 4)
        for p, q in zip(a, b):
            assert torch.equal(p, q)
        ya = _route.combine_impl(dev, a[0], *a[3:], 4 * min(ctx.size, 3))
        yb = _route.combine_impl(ctx.comm, b[0], *b[3:], 4 * min(ctx.size, 3))
        assert torch.equal(ya, yb)
    assert dev.calls == 4


def case_failed_exchange_poisons(ctx):
    """A rows exchange that fails without raising (output all-ones) gives NaN expert tokens and
    a NaN combine, never silently dropped tokens."""
    data, E = _routing(ctx, H=40, k=2)
    x, ids, w = data[ctx.rank]
    for fp8 in (False, True):
        out = _route.dispatch_impl(_DeviceA2av(ctx.comm, poison=True), x, ids, w, E, fp8, 4)
        assert bool(out[7][0]) and bool(torch.isnan(out[0]).all())
        y = _route.combine_impl(ctx.comm, out[0], *out[3:], 4 * min(ctx.size, 2))
        assert bool(torch.isnan(y).all())
        good = _route.dispatch_impl(ctx.comm, x, ids, w, E, fp8, 4)
        y = _route.combine_impl(_DeviceA2av(ctx.comm, poison=True), good[0], *good[3:],
                                4 * min(ctx.size, 2))
        assert bool(torch.isnan(y).all())


def _raises(fn, *words):
    try:
        fn()
    except cclx.CclxInvalidArgument as e:
        assert all(wd in str(e) for wd in words), str(e)
        return
    raise AssertionError(f"no CclxInvalidArgument naming {words}")


def case_argument_errors(ctx):
    """Bad arguments raise on every rank before any exchange; the comm works afterwards."""
    data, E = _routing(ctx)
    x, ids, w = data[ctx.rank]
    c = ctx.comm
    _raises(lambda: moe.dispatch(c, x, ids, w, E + 1), "num_experts", "multiple")
    _raises(lambda: moe.dispatch(c, x.double(), ids, w, E), "tokens")
    _raises(lambda: moe.dispatch(c, x, ids.float(), w, E), "topk_ids")
    _raises(lambda: moe.dispatch(c, x, ids, w[:, :1], E), "topk_weights")
    _raises(lambda: moe.dispatch(c, x, ids[:2], w[:2], E), "topk_ids")
    _raises(lambda: moe.dispatch(c, x, ids, w, E, mode="fast"), "mode")
    _raises(lambda: moe.dispatch(c, x, ids, w, E, mode="low_latency"), "max_tokens_per_rank")
    _raises(lambda: moe.dispatch(c, x, ids, w, E, max_tokens_per_rank=3), "exceed")
    _raises(lambda: moe.dispatch(c, x, ids + E, w, E), "outside")
    _raises(lambda: moe.dispatch(c, x, ids - 10 ** 6, w, E), "outside")
    et, h = moe.dispatch(c, x, ids, w, E)
    _raises(lambda: moe.combine(c, et[:-1], h), "expert_out")
    _raises(lambda: moe.combine(c, et.long(), h), "expert_out")
    y = moe.combine(c, et, h)
    want = sum(w[:, j:j + 1] * x for j in range(ids.shape[1]))
    assert torch.allclose(y, want, rtol=1e-5, atol=1e-5)


def case_out_of_range_ids_on_device_path(ctx):
    """The device-side check (what CUDA comms rely on): ids out of range are not routed and
    make this rank's combine output NaN; the other ranks' results stay right."""
    data, E = _routing(ctx, k=2)
    x, ids, w = data[ctx.rank]
    if ctx.rank == 0:
        ids = ids.clone()
        ids[0, 1] = E + 5
    out = _route.dispatch_impl(ctx.comm, x, ids, w, E, False, 4)
    y = _route.combine_impl(ctx.comm, out[0] * 1.0, *out[3:], 4 * min(ctx.size, 2))
    if ctx.rank == 0:
        assert bool(out[7][1]) and bool(torch.isnan(y).all())
    else:
        want = sum(w[:, j:j + 1] * x for j in range(2))
        assert torch.allclose(y, want, rtol=1e-5, atol=1e-5)
