"""One rank of torch.distributed (backend "nccl") with every rank on one GPU, through the cclx
NCCL drop-in (run under `cclx-nccl run -- torchrun ...`; tests/gpu/dropin/test_gpu_dropin_shared.py).

    dropin_shared_worker.py OUT eager|lazy   every c10d collective and point-to-point pattern,
                                            every dtype torch's NCCL backend passes, checked
                                            against a reference computed on the CPU by the
                                            drop-in's rules; results in OUT/rank<r>.json
    dropin_shared_worker.py OUT kill          allreduces until the last rank kills itself; the
                                            others report the error they get

eager: init_process_group(device_id=...) (comms made at init, new_group by ncclCommSplit, point
to point on the group's comm); lazy: comms made at first use (new_group and each send/recv pair
by ncclGetUniqueId + ncclCommInitRank).
"""
import json
import os
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist

OUT, MODE = sys.argv[1], sys.argv[2]
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
results = {}

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
FP8 = [t for t in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if t]
MOVE = FLOATS + INTS + [torch.bool] + FP8  # every dtype, for the collectives that move bytes


class Skip(Exception):
    """torch itself refuses the combination (before any NCCL call)."""


def save(done=False):
    tmp = os.path.join(OUT, f"rank{RANK}.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"cases": results, "done": done}, f)
    os.replace(tmp, os.path.join(OUT, f"rank{RANK}.json"))


def run_case(name, fn):
    t0 = time.time()
    try:
        fn()
        torch.cuda.synchronize()
        results[name] = "ok"
    except Skip as e:
        results[name] = f"skip: {e}"
    except Exception as e:  # noqa: BLE001
        results[name] = f"FAIL: {type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
    print(f"CASE {name} {results[name].splitlines()[0]} ({time.time() - t0:.1f} s)", flush=True)
    save()


# ---- data and references ----

def gen(dtype, n, rank, salt, op="sum"):
    """Rank `rank`'s input, a pure function of its arguments (small integers: float sums exact)."""
    g = torch.Generator().manual_seed(salt * 1009 + rank * 7919 + 17)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype in FP8:
        return torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).view(dtype)
    if op == "prod":
        v = torch.randint(0, 3, (n,), generator=g) - 1  # -1, 0, 1 ...
        v = torch.where(v == 0, torch.full_like(v, 2), v)  # ... as -1, 2, 1
        if dtype == torch.uint8:
            v = v.abs()
        return v.to(dtype)
    lo = 0 if dtype == torch.uint8 else -9
    return torch.randint(lo, 10, (n,), generator=g).to(dtype)


def acc_type(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32 if dtype.is_floating_point else dtype


def premul_factor(factor, dtype):
    """The factor NCCL applies for torch's PREMUL_SUM with a host scalar: torch passes the scalar
    in the data type, except for bfloat16, where it passes a float32 with ncclBfloat16; NCCL (and
    the drop-in, which reads scalars as NCCL does) takes the first two bytes of that float32 as
    the bfloat16 factor (its low mantissa half: 0.75 becomes 0)."""
    if dtype == torch.bfloat16:
        return torch.tensor([factor], dtype=torch.float32).view(torch.int16)[:1].view(torch.bfloat16)[0]
    return torch.tensor(factor, dtype=dtype)


def reference(ins, dtype, op, factor=None):
    """The drop-in's result: ranks 0..N-1 in order in the accumulation type (16-bit floats in
    float32), rounded once; PREMUL_SUM multiplies each input by the factor NCCL reads from
    torch's scalar (premul_factor) first; AVG divides at the end (integers: truncating)."""
    if dtype == torch.bool:
        stack = torch.stack(ins)
        return (stack.any(0) if op in ("sum", "max") else stack.all(0))
    a = acc_type(dtype)
    f = premul_factor(factor, dtype).to(a) if op == "premul" else None
    acc = None
    for x in ins:
        v = x.to(a)
        if f is not None:
            v = v * f
        if acc is None:
            acc = v.clone()
        elif op in ("sum", "avg", "premul"):
            acc = acc + v
        elif op == "prod":
            acc = acc * v
        elif op == "min":
            acc = torch.minimum(acc, v)
        else:
            acc = torch.maximum(acc, v)
    if op == "avg":
        acc = acc / len(ins) if dtype.is_floating_point else torch.div(acc, len(ins), rounding_mode="trunc")
    return acc.to(dtype)


def same(got, want, what):
    got = got.cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
    if want.dtype in FP8:  # bit patterns (NaN codes included)
        ok = torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    else:
        ok = torch.equal(got, want)
    if not ok:
        bad = (got.view(torch.uint8) != want.view(torch.uint8)).nonzero() if want.dtype in FP8 else \
            (got != want).nonzero()
        i = int(bad[0][0]) if len(bad) else -1
        raise AssertionError(f"{what}: element {i} is {got.flatten()[i].item()}, want {want.flatten()[i].item()}")


OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def torch_op(op, factor):
    return dist._make_nccl_premul_sum(factor) if op == "premul" else OPS[op]


def refused_by_torch(e):
    """An error torch raises itself before calling NCCL (not one of the drop-in's)."""
    m = str(e)
    return "cclx" not in m and "NCCL error" not in m and isinstance(e, (TypeError, ValueError, RuntimeError))


# ---- the cases ----

def c_all_reduce():
    n, salt = 1001, 1
    skipped = []
    for dtype in FLOATS + INTS + [torch.bool]:
        ops = ["sum", "prod", "min", "max"]
        if dtype != torch.bool:
            ops.append("avg")
        if dtype.is_floating_point:
            ops.append("premul")
        for op in ops:
            salt += 1
            ins = [gen(dtype, n, r, salt, op) for r in range(WORLD)]
            x = ins[RANK].to(DEV, copy=True)
            try:
                if salt % 3 == 0:  # async handles too
                    dist.all_reduce(x, op=torch_op(op, 0.75), async_op=True).wait()
                else:
                    dist.all_reduce(x, op=torch_op(op, 0.75))
            except Exception as e:  # noqa: BLE001
                if refused_by_torch(e):
                    skipped.append(f"{dtype} {op}: {str(e).splitlines()[0]}")
                    continue
                raise
            same(x, reference(ins, dtype, op, 0.75), f"all_reduce {dtype} {op}")
    for dtype in FP8:  # refused: by torch itself, else by the drop-in (naming the call)
        try:
            dist.all_reduce(gen(dtype, 16, RANK, 0).to(DEV, copy=True))
        except Exception as e:  # noqa: BLE001
            if not (refused_by_torch(e) or ("cclx" in str(e) and "ncclAllReduce" in str(e))):
                raise
        else:
            raise AssertionError(f"all_reduce on {dtype} ran")
    if skipped:
        print(f"rank {RANK}: torch refused: {'; '.join(skipped)}", flush=True)


def c_broadcast_reduce():
    salt = 100
    for dtype in MOVE:
        salt += 1
        root = (salt + WORLD) % WORLD
        x = gen(dtype, 777, root, salt).to(DEV, copy=True) if RANK == root else torch.zeros(777, dtype=dtype, device=DEV)
        dist.broadcast(x, src=root)
        same(x, gen(dtype, 777, root, salt), f"broadcast {dtype} from {root}")
    for dtype in FLOATS + INTS:
        salt += 1
        root = WORLD - 1
        ins = [gen(dtype, 513, r, salt) for r in range(WORLD)]
        x = ins[RANK].to(DEV, copy=True)
        dist.reduce(x, dst=root, op=dist.ReduceOp.SUM)
        if RANK == root:
            same(x, reference(ins, dtype, "sum"), f"reduce {dtype}")


def c_all_gather():
    salt = 200
    for dtype in MOVE:
        salt += 1
        ins = [gen(dtype, 1003, r, salt) for r in range(WORLD)]
        out = torch.empty(1003 * WORLD, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(out, ins[RANK].to(DEV, copy=True))
        same(out, torch.cat(ins), f"all_gather_into_tensor {dtype}")
        outs = [torch.empty(1003, dtype=dtype, device=DEV) for _ in range(WORLD)]
        w = dist.all_gather(outs, ins[RANK].to(DEV, copy=True), async_op=True)
        w.wait()
        for r in range(WORLD):
            same(outs[r], ins[r], f"all_gather {dtype} block {r}")
    # Uneven sizes (torch lowers them onto a group of broadcasts).
    ins = [gen(torch.float32, 100 + 37 * r, r, salt + 1) for r in range(WORLD)]
    outs = [torch.empty(100 + 37 * r, device=DEV) for r in range(WORLD)]
    try:
        dist.all_gather(outs, ins[RANK].to(DEV, copy=True))
    except Exception as e:  # noqa: BLE001
        if refused_by_torch(e):
            raise Skip(f"uneven all_gather: {e}") from e
        raise
    for r in range(WORLD):
        same(outs[r], ins[r], f"uneven all_gather block {r}")


def c_reduce_scatter():
    salt = 300
    for dtype in FLOATS + INTS:
        for op in ("sum", "max", "avg"):
            salt += 1
            per = 257
            ins = [gen(dtype, per * WORLD, r, salt) for r in range(WORLD)]
            want = reference(ins, dtype, op)[RANK * per:(RANK + 1) * per]
            out = torch.empty(per, dtype=dtype, device=DEV)
            dist.reduce_scatter_tensor(out, ins[RANK].to(DEV, copy=True), op=OPS[op])
            same(out, want, f"reduce_scatter_tensor {dtype} {op}")
            if op == "sum":
                out2 = torch.empty(per, dtype=dtype, device=DEV)
                lst = list(ins[RANK].to(DEV, copy=True).split(per))
                dist.reduce_scatter(out2, lst, op=OPS[op])
                same(out2, want, f"reduce_scatter {dtype}")


def split_count(src, dst):
    return ((src * 7 + dst * 3 + WORLD) % 5) * 61  # zero for some pairs


def c_all_to_all():
    salt = 400
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8) + tuple(FP8):
        salt += 1
        ins = [gen(dtype, 301 * WORLD, r, salt) for r in range(WORLD)]
        out = torch.empty(301 * WORLD, dtype=dtype, device=DEV)
        dist.all_to_all_single(out, ins[RANK].to(DEV, copy=True))
        same(out, torch.cat([ins[r][RANK * 301:(RANK + 1) * 301] for r in range(WORLD)]), f"all_to_all_single {dtype}")
        sends = [split_count(RANK, d) for d in range(WORLD)]
        recvs = [split_count(s, RANK) for s in range(WORLD)]
        full = [gen(dtype, sum(split_count(s, d) for d in range(WORLD)), s, salt + 50) for s in range(WORLD)]
        out = torch.empty(sum(recvs), dtype=dtype, device=DEV)
        dist.all_to_all_single(out, full[RANK].to(DEV, copy=True), recvs, sends)
        want = []
        for s in range(WORLD):
            off = sum(split_count(s, d) for d in range(RANK))
            want.append(full[s][off:off + split_count(s, RANK)])
        same(out, torch.cat(want), f"all_to_all_single uneven {dtype}")
    ins = [[gen(torch.float16, 50 + d, s, salt + 100 + d) for d in range(WORLD)] for s in range(WORLD)]
    outs = [torch.empty(50 + RANK, dtype=torch.float16, device=DEV) for _ in range(WORLD)]
    dist.all_to_all(outs, [t.to(DEV, copy=True) for t in ins[RANK]])
    for s in range(WORLD):
        same(outs[s], ins[s][RANK], f"all_to_all from {s}")


def c_scatter_gather():
    root = WORLD - 1
    blocks = [gen(torch.float32, 999, r, 501) for r in range(WORLD)]
    x = torch.empty(999, device=DEV)
    dist.scatter(x, [b.to(DEV, copy=True) for b in blocks] if RANK == root else None, src=root)
    same(x, blocks[RANK], "scatter")
    mine = gen(torch.int32, 555, RANK, 502)
    got = [torch.empty(555, dtype=torch.int32, device=DEV) for _ in range(WORLD)] if RANK == 0 else None
    dist.gather(mine.to(DEV, copy=True), got, dst=0)
    if RANK == 0:
        for r in range(WORLD):
            same(got[r], gen(torch.int32, 555, r, 502), f"gather from {r}")


def c_point_to_point():
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    # send / recv round the ring: even ranks send first (the last rank of an odd ring receives
    # first), so that the pairs meet even where each pair's comm is made at its first message.
    mine = gen(torch.float32, 4097, RANK, 601).to(DEV, copy=True)
    got = torch.empty(4097, device=DEV)
    send_first = RANK % 2 == 0 and not (WORLD % 2 == 1 and RANK == WORLD - 1)
    for step in range(2):
        if send_first == (step == 0):
            dist.send(mine, nxt)
        else:
            dist.recv(got, prv)
    same(got, gen(torch.float32, 4097, prv, 601), "send/recv")
    # isend / irecv, both directions at once.
    a, b = gen(torch.bfloat16, 333, RANK, 602).to(DEV, copy=True), torch.empty(333, dtype=torch.bfloat16, device=DEV)
    reqs = [dist.isend(a, nxt), dist.irecv(b, prv)]
    for q in reqs:
        q.wait()
    same(b, gen(torch.bfloat16, 333, prv, 602), "isend/irecv")
    # batch_isend_irecv both ways round the ring, mixed dtypes (FP8 included).
    dts = [torch.float32, torch.int64] + FP8[:1]
    sends = [gen(dt, 1000 + 3 * i, RANK, 610 + i).to(DEV, copy=True) for i, dt in enumerate(dts)]
    back = [gen(dt, 70 + i, RANK, 620 + i).to(DEV, copy=True) for i, dt in enumerate(dts)]
    rf = [torch.empty(1000 + 3 * i, dtype=dt, device=DEV) for i, dt in enumerate(dts)]
    rb = [torch.empty(70 + i, dtype=dt, device=DEV) for i, dt in enumerate(dts)]
    ops = []
    for i in range(len(dts)):
        ops.append(dist.P2POp(dist.isend, sends[i], nxt))
        ops.append(dist.P2POp(dist.irecv, rf[i], prv))
        if WORLD > 2:
            ops.append(dist.P2POp(dist.isend, back[i], prv))
            ops.append(dist.P2POp(dist.irecv, rb[i], nxt))
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for i, dt in enumerate(dts):
        same(rf[i], gen(dt, 1000 + 3 * i, prv, 610 + i), f"batch_isend_irecv {dt} from {prv}")
        if WORLD > 2:
            same(rb[i], gen(dt, 70 + i, nxt, 620 + i), f"batch_isend_irecv {dt} from {nxt}")


def c_barrier_and_back_to_back():
    dist.barrier()
    xs = [gen(torch.float32, 2049, RANK, 700 + i).to(DEV, copy=True) for i in range(20)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in works:
        w.wait()
    for i, x in enumerate(xs):
        same(x, reference([gen(torch.float32, 2049, r, 700 + i) for r in range(WORLD)], torch.float32, "sum"),
             f"back-to-back all_reduce {i}")
    dist.barrier()


def c_cuda_graph():
    x = torch.zeros(4099, device=DEV)
    y = torch.zeros(1027 * WORLD, device=DEV)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture (staging, torch's own state)
        dist.all_reduce(x)
        dist.all_gather_into_tensor(y, x[:1027])
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        dist.all_gather_into_tensor(y, x[:1027])
    for rep in range(3):
        ins = [gen(torch.float32, 4099, r, 800 + rep) for r in range(WORLD)]
        x.copy_(ins[RANK].to(DEV, copy=True))
        g.replay()
        torch.cuda.synchronize()
        want = reference(ins, torch.float32, "max")
        same(x, want, f"graph replay {rep}: all_reduce")
        same(y, want[:1027].repeat(WORLD), f"graph replay {rep}: all_gather")


def c_new_group():
    evens = [r for r in range(WORLD) if r % 2 == 0]
    odds = [r for r in range(WORLD) if r % 2 == 1]
    ge = dist.new_group(evens)
    go = dist.new_group(odds) if odds else None
    mine = evens if RANK % 2 == 0 else odds
    g = ge if RANK % 2 == 0 else go
    ins = [gen(torch.float64, 311, r, 900) for r in range(WORLD)]
    x = ins[RANK].to(DEV, copy=True)
    dist.all_reduce(x, group=g)
    same(x, reference([ins[r] for r in mine], torch.float64, "sum"), "new_group all_reduce")
    src = mine[-1]
    b = gen(torch.int8, 64, src, 901).to(DEV, copy=True) if RANK == src else torch.zeros(64, dtype=torch.int8, device=DEV)
    dist.broadcast(b, src=src, group=g)
    same(b, gen(torch.int8, 64, src, 901), "new_group broadcast")
    if len(mine) > 1:
        out = torch.empty(17 * len(mine), dtype=torch.bfloat16, device=DEV)
        dist.all_gather_into_tensor(out, gen(torch.bfloat16, 17, RANK, 902).to(DEV, copy=True), group=g)
        same(out, torch.cat([gen(torch.bfloat16, 17, r, 902) for r in mine]), "new_group all_gather")
    dist.destroy_process_group(ge)
    if go is not None:
        dist.destroy_process_group(go)


def c_time_estimate():
    """torch's cost estimator (ncclGroupStart ... ncclGroupSimulateEnd) runs nothing."""
    pg = dist.distributed_c10d._get_default_group()._get_backend(DEV)
    if not hasattr(pg, "_start_time_estimate"):
        raise Skip("no _start_time_estimate in this torch")
    x = gen(torch.float32, 100, RANK, 950).to(DEV, copy=True)
    keep = x.clone()
    pg._start_time_estimate()
    dist.all_reduce(x)
    t = pg._end_time_estimate()
    torch.cuda.synchronize()
    same(x, keep.cpu(), f"all_reduce inside a time estimate (estimate {t})")


CASES = [c_all_reduce, c_broadcast_reduce, c_all_gather, c_reduce_scatter, c_all_to_all,
         c_scatter_gather, c_point_to_point, c_barrier_and_back_to_back, c_cuda_graph,
         c_new_group, c_time_estimate]


def kill_mode():
    """Allreduces until the last rank kills itself; the others print what they get."""
    victim = WORLD - 1
    dist.barrier()  # the comm exists on every rank before anyone dies
    x = torch.ones(1 << 12, device=DEV)
    t0 = None
    for i in range(1000):
        if RANK == victim and i == 3:
            print(f"VICTIM rank {RANK} killing itself at {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if i == 3:
            t0 = time.time()
        try:
            x.fill_(1.0)
            dist.all_reduce(x)
            torch.cuda.synchronize()
            v = x[:8].cpu()
            if not torch.equal(v, torch.full((8,), float(WORLD))):
                # A failed call hands back NaN (never a plausible stale value); its error follows.
                print(f"SURVIVOR rank {RANK} output after the kill: nan={bool(torch.isnan(v).all())} {v.tolist()}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"SURVIVOR_ERROR rank {RANK} after {time.time() - (t0 or time.time()):.1f} s: "
                  f"{type(e).__name__}: {e}", flush=True)
            return 0
    print(f"SURVIVOR rank {RANK} saw no error", flush=True)
    return 1


def main():
    torch.cuda.set_device(DEV)
    os.makedirs(OUT, exist_ok=True)
    if MODE == "eager":
        dist.init_process_group("nccl", device_id=DEV)
    else:
        dist.init_process_group("nccl")
    if MODE == "kill":
        rc = kill_mode()
        os._exit(rc)  # no teardown with a dead peer
    save()
    for fn in CASES:
        run_case(fn.__name__[2:], fn)
    dist.destroy_process_group()
    save(done=True)
    print(f"DROPIN_SHARED rank {RANK} of {WORLD} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
