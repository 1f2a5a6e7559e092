"""GPU test helpers: communicator setup next to a torch.distributed NCCL group, deterministic
random CUDA tensors (never zero) and float64 / int64 references computed with torch."""
from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist

import cclx

T = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
     "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8, "i8": torch.int8,
     "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
INTS = ("i32", "i64", "u8", "i8")
FP8 = ("fp8_e4m3", "fp8_e5m2")
RTOL = {"f32": 1e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 1.6e-2}
OPS = {n: getattr(cclx.ReduceOp, n) for n in
       ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")}
DIST_OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT,
            "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}


def setup_comms(ctx, name: str) -> None:
    """torch.distributed NCCL group (the reference) plus a cclx and a cclx-"nccl" comm."""
    torch.cuda.set_device(ctx.rank)
    ctx.dev = torch.device("cuda", ctx.rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:"
                            + os.environ["CCLX_TEST_PG_PORT"], rank=ctx.rank,
                            world_size=ctx.size)
    ctx.comm = cclx.new_comm("cclx", torch.device("cuda"), name=name, timeout=120)
    ctx.ncomm = cclx.new_comm("nccl", torch.device("cuda"), name=name + "_nccl", timeout=120)
    assert ctx.comm.get_device() == ctx.dev, (ctx.comm.get_device(), ctx.dev)
    x = torch.ones(1, device=ctx.dev)
    dist.all_reduce(x)
    torch.cuda.synchronize()


def teardown_comms(ctx) -> None:
    ctx.comm.finalize()
    ctx.ncomm.finalize()
    dist.destroy_process_group()


def ops_for(dtype: str):
    if dtype in FP8:
        return []
    return ["SUM", "PRODUCT", "MIN", "MAX", "AVG"] + (["BAND", "BOR", "BXOR"]
                                                       if dtype in INTS else [])


def gen(dtype: str, shape, rank: int, seed: int, dev) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    n = math.prod(shape) if shape else 1
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    if dtype in INTS:
        v = torch.randint(1, 10, (n,), generator=g).double()
        if dtype != "u8":
            v = v * sign
    elif dtype in FP8:
        v = torch.randint(1, 8, (n,), generator=g).double() * sign
    else:
        v = (0.5 + 1.5 * torch.rand(n, generator=g, dtype=torch.float64)) * sign
    if dtype in FP8:
        v = v.float()  # float8 conversions go through float32
    return v.to(T[dtype]).reshape(shape).to(dev)


def reduce_ref(xs, op: str, dtype: str, factor: float = 1.0):
    """(expected, scale) like tests/python/refs.reduce_ref, in torch."""
    if dtype in INTS:
        x = [a.to(torch.int64) for a in xs]
        if op == "SUM":
            r = sum(x)
        elif op == "PRODUCT":
            r = x[0].clone()
            for a in x[1:]:
                r = r * a
        elif op == "MIN":
            r = torch.stack(x).amin(0)
        elif op == "MAX":
            r = torch.stack(x).amax(0)
        elif op == "AVG":
            s = sum(x)
            r = torch.sign(s) * (s.abs() // len(x))
        elif op in ("BAND", "BOR", "BXOR"):
            f = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or,
                 "BXOR": torch.bitwise_xor}[op]
            r = x[0].clone()
            for a in x[1:]:
                r = f(r, a)
        else:
            raise ValueError(op)
        return (r & 0xFF if dtype == "u8" else r).to(T[dtype]), None
    x = [a.double() for a in xs]
    scale = sum(a.abs() for a in x)
    if op == "SUM":
        r = sum(x)
    elif op == "PREMUL_SUM":
        r, scale = sum(factor * a for a in x), scale * abs(factor)
    elif op == "PRODUCT":
        r = x[0].clone()
        for a in x[1:]:
            r = r * a
        scale = r.abs() * len(x)
    elif op in ("MIN", "MAX"):
        r = torch.stack(x).amin(0) if op == "MIN" else torch.stack(x).amax(0)
        scale = r.abs()
    elif op == "AVG":
        r, scale = sum(x) / len(x), scale / len(x)
    else:
        raise ValueError(op)
    return r, scale


def check(got: torch.Tensor, exp, scale, dtype: str, what: str, rtol_mult: float = 1.0):
    """Exact for integer / data-movement results, else |got-exp| <= rtol * scale."""
    if scale is None or dtype in INTS or dtype in FP8:
        g = got.view(torch.uint8) if dtype in FP8 else got
        e = exp.to(got.dtype)
        e = e.view(torch.uint8) if dtype in FP8 else e
        bad = (g.reshape(-1) != e.reshape(-1)).nonzero()
    else:
        err = (got.double() - exp).abs()
        bad = (~(err <= RTOL[dtype] * rtol_mult * scale)).reshape(-1).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise AssertionError(f"{what}: {bad.numel()} wrong elements, first at {i}: got "
                             f"{got.reshape(-1)[i].item()} expected {exp.reshape(-1)[i].item()}")


def cat(ts, stack: bool = False) -> torch.Tensor:
    """torch.cat / torch.stack that also works for 1-byte float types (through uint8 views)."""
    dt = ts[0].dtype
    if ts[0].element_size() == 1 and dt not in (torch.uint8, torch.int8):
        u = [t.view(torch.uint8) for t in ts]
        return (torch.stack(u) if stack else torch.cat(u)).view(dt)
    return torch.stack(ts) if stack else torch.cat(ts)


def poison(shape, dtype: str, dev) -> torch.Tensor:
    t = torch.empty(shape, dtype=T[dtype], device=dev)
    t.view(torch.uint8).fill_(0x7B)
    return t


def rel_l2(got: torch.Tensor, exp: torch.Tensor) -> float:
    """Normalized error ||got - exp|| / ||exp||."""
    e = exp.double()
    return float((got.double() - e).norm() / e.norm())
