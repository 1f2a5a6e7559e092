"""cclx-bench tp model on CPU processes: the tensor-parallel forward over the host transport
(cclx allreduce of CPU torch tensors) equals the 1-rank forward of the same weights."""
from __future__ import annotations

import torch

import cclx
from cclx.bench import model as M

_comm = {}
SHAPES = {
    "gqa": M.Shape(hidden=64, heads=8, kv_heads=4, ffn=96, layers=3, vocab=103),
    "kv_replicated": M.Shape(hidden=48, heads=4, kv_heads=1, ffn=64, layers=2, vocab=50),
}


def setup(ctx):
    torch.set_num_threads(1)
    _comm["c"] = cclx.new_comm("cclx", "cpu", name="bench_tp")


def teardown(ctx):
    _comm["c"].finalize()


def _reduce(t):
    _comm["c"].all_reduce(t, cclx.ReduceOp.SUM, async_op=False)


def _compare(ctx, shape, batch, length, pos0, positions, fused=False):
    tp, rank = ctx.size, ctx.rank
    mdl = M.TPLlama(shape, tp, rank, "cpu", torch.float32, seed=3, max_positions=positions)
    one = M.TPLlama(shape, 1, 0, "cpu", torch.float32, seed=3, max_positions=positions)
    assert mdl.sh.tp == tp and one.sh.tp == 1
    tok = mdl.tokens(batch, length)
    assert torch.equal(tok, one.tokens(batch, length))
    calls = []

    def reduce(t):
        calls.append(t.numel())
        _reduce(t)

    def fuse(t, res, w):  # allreduce + residual add + norm in one call
        calls.append(t.numel())
        return _comm["c"].all_reduce_rmsnorm(t, res, w, M.NORM_EPS)

    logits, hidden = mdl.forward(tok, pos0, mdl.new_cache(batch, positions),
                                 None if fused else reduce, None, fuse if fused else None)
    ref_l, ref_h = one.forward(tok, pos0, one.new_cache(batch, positions), None)
    assert calls == [batch * length * shape.hidden] * (2 * shape.layers), calls
    s = mdl.sh
    assert logits.shape == (batch, s.vocab)
    want = ref_l[:, s.vocab_off:s.vocab_off + s.vocab_valid]
    got = logits[:, :s.vocab_valid]
    err = float((got - want).norm() / want.norm())
    assert err < 1e-5, f"logits differ from the 1-rank forward: rel. error {err:.3g}"
    herr = float((hidden - ref_h).norm() / ref_h.norm())
    assert herr < 1e-5, f"hidden state differs: rel. error {herr:.3g}"
    if s.vocab_valid < s.vocab:  # padding rows of the LM head shard stay zero
        assert float(logits[:, s.vocab_valid:].abs().max()) == 0.0
    # Without the allreduces each rank sees only its partial sums.
    if tp > 1:
        part, _ = mdl.forward(tok, pos0, mdl.new_cache(batch, positions), None)
        assert float((part[:, :s.vocab_valid] - want).norm() / want.norm()) > 1e-3


def case_decode_gqa(ctx):
    _compare(ctx, SHAPES["gqa"], batch=3, length=1, pos0=9, positions=10)


def case_prefill_gqa(ctx):
    _compare(ctx, SHAPES["gqa"], batch=1, length=12, pos0=0, positions=12)


def case_decode_kv_replicated(ctx):
    _compare(ctx, SHAPES["kv_replicated"], batch=2, length=1, pos0=6, positions=7)


def case_prefill_kv_replicated(ctx):
    _compare(ctx, SHAPES["kv_replicated"], batch=2, length=5, pos0=0, positions=5)


def _compare_sp(ctx, shape, batch, length, pos0, positions):
    """Sequence parallelism: cclx all-gather / reduce-scatter of CPU tensors; the same logits and
    last hidden states as the 1-rank forward, with row counts that do not divide evenly."""
    tp, rank, n = ctx.size, ctx.rank, ctx.size
    mdl = M.TPLlama(shape, tp, rank, "cpu", torch.float32, seed=3, max_positions=positions)
    one = M.TPLlama(shape, 1, 0, "cpu", torch.float32, seed=3, max_positions=positions)
    tok = mdl.tokens(batch, length)
    calls = []
    comm = _comm["c"]

    def gather(t):
        calls.append(("gather", t.shape[0]))
        out = t.new_empty((t.shape[0] * n,) + tuple(t.shape[1:]))
        comm.all_gather_single(out, t, False)
        return out

    def scatter(t):
        calls.append(("scatter", t.shape[0]))
        out = t.new_empty((t.shape[0] // n,) + tuple(t.shape[1:]))
        comm.reduce_scatter_single(out, t, cclx.ReduceOp.SUM, False)
        return out

    logits, hidden = mdl.forward_sp(tok, pos0, mdl.new_cache(batch, positions), gather, scatter)
    ref_l, ref_h = one.forward(tok, pos0, one.new_cache(batch, positions), None)
    per = -(-batch * length // tp)
    want_calls = [("gather", per), ("scatter", per * tp)] * (2 * shape.layers) + [("gather", per)]
    assert calls == want_calls, calls
    s = mdl.sh
    want = ref_l[:, s.vocab_off:s.vocab_off + s.vocab_valid]
    err = float((logits[:, :s.vocab_valid] - want).norm() / want.norm())
    assert err < 1e-5, f"sequence-parallel logits differ from the 1-rank forward: {err:.3g}"
    herr = float((hidden - ref_h).norm() / ref_h.norm())
    assert herr < 1e-5, f"sequence-parallel hidden state differs: {herr:.3g}"


def case_sp_decode_gqa(ctx):
    _compare_sp(ctx, SHAPES["gqa"], batch=3, length=1, pos0=9, positions=10)


def case_sp_prefill_kv_replicated(ctx):
    _compare_sp(ctx, SHAPES["kv_replicated"], batch=1, length=7, pos0=0, positions=7)


# The same with the fused allreduce + residual add + RMSNorm (cclx-bench tp's cclx-fused).
def case_decode_gqa_fused(ctx):
    _compare(ctx, SHAPES["gqa"], batch=3, length=1, pos0=9, positions=10, fused=True)


def case_prefill_kv_replicated_fused(ctx):
    _compare(ctx, SHAPES["kv_replicated"], batch=2, length=5, pos0=0, positions=5, fused=True)
