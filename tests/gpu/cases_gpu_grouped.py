"""The grouped collectives and batched point to point on CUDA torch tensors (2 processes, one GPU
each; NCCL underneath), against float64 references and torch.distributed; hooks on a CUDA comm
(flight recorder states, NaN check)."""
from __future__ import annotations

import torch
import torch.distributed as dist

import cclx
from cclx.hooks import FlightRecorderHook, NanCheckError, NanCheckHook
from trefs import OPS, check, gen, ops_for, poison, reduce_ref, setup_comms, teardown_comms

DTYPES = ["f32", "bf16", "f16", "f64", "i32", "i64", "u8", "fp8_e4m3"]
_s = [500]


def seed():
    _s[0] += 1
    return _s[0]


def setup(ctx):
    setup_comms(ctx, "gpu_grouped")


def teardown(ctx):
    teardown_comms(ctx)


def _count(r, base):
    return (base, 1, 0, base + 5)[r % 4]


def _comms(ctx):
    return (ctx.comm, ctx.ncomm)


def case_all_gather_v_and_reduce_scatter_v(ctx):
    n, me, dev = ctx.size, ctx.rank, ctx.dev
    for comm in _comms(ctx):
        for dtype in DTYPES:
            for base in (3, (1 << 20) + 1):
                s = seed()
                xs = [gen(dtype, (_count(r, base),), r, s, dev) for r in range(n)]
                outs = [poison((_count(r, base),), dtype, dev) for r in range(n)]
                comm.all_gather_v(outs, xs[me].clone())
                torch.cuda.synchronize()
                for r in range(n):
                    check(outs[r], xs[r], None, dtype, f"all_gather_v {dtype} from {r}")
                for op in ops_for(dtype):
                    if op in ("BAND", "BOR", "BXOR"):
                        continue  # NCCL has no bitwise reductions
                    ins = [[gen(dtype, (_count(r, base),), p * n + r, s, dev) for r in range(n)]
                           for p in range(n)]
                    exp, scale = reduce_ref([ins[p][me] for p in range(n)], op, dtype)
                    out = poison((_count(me, base),), dtype, dev)
                    comm.reduce_scatter_v(out, ins[me], OPS[op])
                    comm.reduce_scatter_v(ins[me][me], ins[me], OPS[op])  # in place
                    torch.cuda.synchronize()
                    check(out, exp, scale, dtype, f"reduce_scatter_v {dtype} {op}", 2)
                    check(ins[me][me], exp, scale, dtype, f"reduce_scatter_v in place {op}", 2)
    # Bitwise reductions: refused before anything runs (a comm that raises instead of aborting).
    c = cclx.new_comm("cclx", torch.device("cuda"), name="rsv_band", timeout=60,
                      abort_process_on_timeout_or_error=False)
    x = torch.ones(4, dtype=torch.int32, device=dev)
    try:
        c.reduce_scatter_v(x, [x.clone() for _ in range(n)], cclx.ReduceOp.BAND)
    except cclx.CclxUnsupportedError as e:
        assert "bitwise" in str(e), e
    else:
        raise AssertionError("BAND reduce_scatter_v on CUDA did not fail")
    c.finalize()


def case_all_to_all_scatter_gather_vs_torch(ctx):
    n, me, dev = ctx.size, ctx.rank, ctx.dev
    for comm in _comms(ctx):
        for dtype in ("f32", "bf16", "i64"):
            s = seed()
            ins = [gen(dtype, (1000 + 7 * j,), me * n + j, s, dev) for j in range(n)]
            outs = [poison((1000 + 7 * me,), dtype, dev) for _ in range(n)]
            comm.all_to_all(outs, ins, async_op=True).wait()
            ref = [poison((1000 + 7 * me,), dtype, dev) for _ in range(n)]
            dist.all_to_all(ref, ins)
            torch.cuda.synchronize()
            for j in range(n):
                check(outs[j], ref[j], None, dtype, f"all_to_all {dtype} from {j} vs torch")
            for root in range(n):
                blocks = [gen(dtype, (4097,), r, s + root, dev) for r in range(n)]
                out = poison((4097,), dtype, dev)
                comm.scatter(out, blocks if me == root else [], root)
                ref = poison((4097,), dtype, dev)
                dist.scatter(ref, blocks if me == root else None, src=root)
                got = [poison((4097,), dtype, dev) for _ in range(n)]
                comm.gather(got if me == root else [], blocks[me], root)
                single = poison((n, 4097), dtype, dev)
                comm.gather_single(single if me == root else None, blocks[me], root)
                torch.cuda.synchronize()
                check(out, blocks[me], None, dtype, f"scatter {dtype} root {root}")
                check(out, ref, None, dtype, f"scatter {dtype} vs torch")
                if me == root:
                    for r in range(n):
                        check(got[r], blocks[r], None, dtype, f"gather from {r}")
                        check(single[r], blocks[r], None, dtype, f"gather_single from {r}")


def case_batch_p2p(ctx):
    n, me, dev = ctx.size, ctx.rank, ctx.dev
    peer = (me + 1) % n
    src = (me - 1) % n
    for comm in _comms(ctx):
        s = seed()
        # Both ranks list their sends first, 64 MiB each way, several messages per pair, mixed
        # dtypes and a zero-size entry.
        big = [gen("f32", (1 << 24,), me, s, dev), gen("bf16", (777,), me, s, dev),
               torch.empty(0, device=dev), gen("i64", (5,), me, s, dev)]
        got = [poison((1 << 24,), "f32", dev), poison((777,), "bf16", dev),
               torch.empty(0, device=dev), poison((5,), "i64", dev)]
        b = comm.batch_op_create()
        for t in big:
            b.send(t, peer)
        for t in got:
            b.recv(t, src)
        b.issue(False)
        torch.cuda.synchronize()
        for i, (dt, shape) in enumerate((("f32", (1 << 24,)), ("bf16", (777,)), ("i64", (5,)))):
            j = (0, 1, 3)[i]
            check(got[j], gen(dt, shape, src, s, dev), None, dt, f"batch message {j}")


def case_hooks_on_cuda(ctx):
    n, me, dev = ctx.size, ctx.rank, ctx.dev
    comm = ctx.comm
    fr = FlightRecorderHook(max_entries=16)
    fr.register_with_comm(comm)
    x = torch.ones(256, device=dev)
    comm.all_reduce(x)
    w = comm.all_gather_v([torch.empty(r + 1, device=dev) for r in range(n)],
                          torch.ones(me + 1, device=dev), async_op=True)
    w.wait()
    torch.cuda.synchronize()
    e = fr.entries()
    assert e[0]["algorithm"] == comm.get_algo(256, cclx.DataType.f32), e[0]
    assert [d["state"] for d in e] == ["completed", "completed"], e
    assert e[1]["async_op"] is True
    nc = NanCheckHook()
    h = nc.register_with_comm(comm)
    y = torch.ones(64, device=dev)
    y[9] = float("nan")
    try:
        comm.all_reduce(y)
    except NanCheckError as err:
        assert "index 9" in str(err), err
    else:
        raise AssertionError("NaN not caught on a CUDA tensor")
    h.remove()
    fr.unregister()
    assert comm._hooks is None
    assert comm.get_backend_version().startswith("cclx ") and "NCCL" in comm.get_backend_version()
