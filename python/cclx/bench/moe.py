"""cclx-bench moe: expert-parallel dispatch and combine (hidden 7168, top-8, 256 experts by
default), one rank per GPU under torchrun, or several ranks sharing one GPU, or CPU processes.

    torchrun --nproc-per-node 8 -m cclx.bench moe --json moe.json --plot moe.png
    torchrun --nproc-per-node 2 -m cclx.bench moe --tokens 1,128 --impl cclx-fp8,torch

Implementations: buffer-bf16 / buffer-fp8 (cclx.moe.Buffer created once per row, bound = tokens
per rank: one kernel each way on one host; they also report the kernels per call, the buffer's
communication memory against the rank-major bound and, at world size 1 on a GPU, the HBM floor of
the bytes each call moves), cclx-bf16 / cclx-fp8 (cclx.moe.dispatch with fp8 off / on, combine
in bf16; low latency mode with the bound = tokens per rank), torch (what a user writes: every
(token, slot) row sorted by expert, per-rank counts read on the host with .tolist(),
all_to_all_single of the rows; the weighted sum after the return), nccl-ep (NCCL EP, PyPI
nccl-extensions, in its low-latency mode, bf16, a GPU per rank: bench/moe_ncclep.py; where it
cannot run, a note says why, e.g. no `nccl.ep`, or an NCCL older than 2.30 in the process).
Times are per call (median over --iters, ranks aligned by a barrier, the device synchronized),
host_us the time until the call returns; GB/s = (token, destination rank) pairs of this rank
* H * wire bytes per value / time (bf16 2, FP8 1 + 4/128) for every implementation (the torch
baseline moves a row per slot: more bytes).
Each combine output is checked against float64 (f_e(x) = x * (e+1) + e as the experts).
On CPU, or with ranks sharing a GPU, the numbers are host cost and correctness, not link speed:
the output says so.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

IMPLS = ("buffer-bf16", "buffer-fp8", "cclx-bf16", "cclx-fp8", "torch", "nccl-ep")
TOL = {"cclx-bf16": 2.0 ** -6, "torch": 2.0 ** -6, "cclx-fp8": 2.0 ** -3}


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    from .tp import parse_list

    if p is None:
        p = argparse.ArgumentParser(prog="cclx-bench moe")
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--hidden", type=int, default=7168, help="hidden size (default 7168)")
    p.add_argument("--topk", type=int, default=8, help="experts per token (default 8)")
    p.add_argument("--experts", type=int, default=256, help="experts in all (default 256)")
    p.add_argument("--tokens", type=parse_list, default=None,
                   help="tokens per rank, comma list (default 1,128,4096; CPU 1,128)")
    p.add_argument("--impl", default=",".join(IMPLS),
                   help=f"comma list of {', '.join(IMPLS)} (default all)")
    p.add_argument("--ring-tokens", type=int, default=None,
                   help="buffer-*: the combine ring's rows per expert rank (default the "
                        "buffer's, 4096; a batch above it combines in rounds)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per row (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300.0, help="communicator timeout, s")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--plot", default=None, help="PNG of the times (needs matplotlib)")
    return p


class Env:
    """Rank, device, the cclx comm and the baseline's transport (torch.distributed where it
    can run: gloo on CPU, NCCL with a GPU per rank; with ranks sharing a GPU NCCL refuses, so
    the baseline's collectives are cclx's with the same host-count pattern)."""

    def __init__(self, args: argparse.Namespace, torch: Any) -> None:
        import datetime

        import torch.distributed as dist

        import cclx

        from .comms import single_process_env

        single_process_env()
        self.torch, self.dist, self.cclx = torch, dist, cclx
        self.rank, self.size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
        per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        self.shared = self.cuda and per_host > torch.cuda.device_count()
        if self.cuda:
            local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
            self.device = torch.device("cuda", local % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        tmo = datetime.timedelta(seconds=args.timeout)
        self.pg = None
        # torch.distributed first: cclx then meets through its store (MASTER_PORT is its).
        if not self.cuda:
            dist.init_process_group("gloo", timeout=tmo)
            self.pg, self.transport = dist, "torch.distributed gloo"
        elif not self.shared:
            dist.init_process_group("nccl", timeout=tmo, device_id=self.device)
            self.pg, self.transport = dist, "torch.distributed NCCL"
        else:
            self.transport = "cclx all_to_all_v_single (NCCL refuses ranks sharing a GPU)"
        self.comm = cclx.new_comm("cclx", self.device, name="moe_bench",
                                  timeout=args.timeout)
        self.hbm_gbps = 0.0
        if self.cuda and self.size == 1:
            from .moe_buffer import hbm_copy_gbps

            self.hbm_gbps = hbm_copy_gbps(torch, self.device)

    def a2a(self, out: Any, inp: Any) -> None:
        (self.pg.all_to_all_single if self.pg else self.comm.all_to_all_single)(out, inp)

    def a2av(self, out: Any, inp: Any, osz: List[int], isz: List[int]) -> None:
        if self.pg:
            self.pg.all_to_all_single(out, inp, osz, isz)
        else:
            self.comm.all_to_all_v_single(out, inp, osz, isz)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def max(self, v: float) -> float:
        t = self.torch.tensor([v], dtype=self.torch.float32, device=self.device)
        self.comm.all_reduce(t, self.cclx.ReduceOp.MAX)
        return float(t.item())

    def close(self) -> None:
        try:
            self.comm.finalize()
        finally:
            if self.pg:
                self.dist.destroy_process_group()
            gc.collect()  # what still holds tensors goes now, not during the interpreter's exit


def nccl_ep_status() -> str:
    from .moe_ncclep import status

    return status()


# ------------------------------------------------------------------ the baseline a user writes
def torch_dispatch(env: Env, x: Any, ids: Any, E: int):
    torch = env.torch
    T, k = ids.shape
    L = E // env.size
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    rows = x.index_select(0, order // k)
    send_counts = torch.bincount(flat // L, minlength=env.size)
    recv_counts = torch.empty_like(send_counts)
    env.a2a(recv_counts, send_counts)
    sc, rc = send_counts.tolist(), recv_counts.tolist()  # the host sync
    recv = x.new_empty(sum(rc), x.shape[1])
    env.a2av(recv, rows, rc, sc)
    recv_e = torch.empty(sum(rc), dtype=flat.dtype, device=x.device)
    env.a2av(recv_e, flat[order].contiguous(), rc, sc)
    lorder = torch.argsort(recv_e, stable=True)
    return recv.index_select(0, lorder), (order, sc, rc, lorder, recv_e[lorder] - env.rank * L)


def torch_combine(env: Env, out: Any, h: Any, w: Any):
    order, sc, rc, lorder, _ = h
    T, k = w.shape
    back = out.new_empty(out.shape)
    back[lorder] = out
    rows = out.new_empty(sum(sc), out.shape[1])
    env.a2av(rows, back, sc, rc)
    per_slot = rows.new_empty(rows.shape)
    per_slot[order] = rows
    y = (per_slot.view(T, k, -1).float() * w.float().unsqueeze(-1)).sum(1)
    return y.to(out.dtype)


# ------------------------------------------------------------------ one row
def expert_apply(torch: Any, x: Any, local_e: Any):
    return (x.float() * (local_e.unsqueeze(1) + 1) + local_e.unsqueeze(1)).to(x.dtype)


def cclx_experts(env: Env, et: Any, h: Any, E: int):
    torch = env.torch
    L = E // env.size
    rows = torch.arange(et.shape[0], device=et.device)
    blk = torch.searchsorted(h.expert_offsets[1:], rows, right=True).clamp(max=L - 1)
    return expert_apply(torch, et, (blk + env.rank * L).to(torch.float32))


def time_calls(env: Env, fn, iters: int, warmup: int):
    """(median device time s, median host time s) of fn() over iters calls."""
    for _ in range(warmup):
        fn()
    env.sync()
    dev, host = [], []
    for _ in range(iters):
        env.comm.barrier()
        env.sync()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        env.sync()
        t2 = time.perf_counter()
        dev.append(t2 - t0)
        host.append(t1 - t0)
    return statistics.median(dev), statistics.median(host)


def run_row(env: Env, args: argparse.Namespace, T: int, impl: str) -> Dict[str, Any]:
    import cclx.moe as moe

    if impl.startswith("buffer"):
        from .moe_buffer import run_row as buffer_row

        return buffer_row(env, args, T, impl, time_calls, expert_apply)
    if impl == "nccl-ep":
        from .moe_ncclep import run_row as ncclep_row

        return ncclep_row(env, args, T, time_calls, expert_apply)
    from .moe_buffer import row_inputs

    torch = env.torch
    H, E = args.hidden, args.experts
    x, ids, w, ref = row_inputs(torch, args, env.rank, T)
    x, ids, w = x.to(env.device), ids.to(env.device), w.to(env.device)
    L = E // env.size
    pairs = int(torch.zeros(T, env.size, dtype=torch.bool).scatter_(
        1, (ids // L).cpu(), True).sum()) if T else 0
    nb = (H + 127) // 128
    wire = (H + 4 * nb) if impl == "cclx-fp8" else 2 * H
    if impl.startswith("cclx"):
        fp8 = impl == "cclx-fp8"
        disp = lambda: moe.dispatch(env.comm, x, ids, w, E, fp8=fp8,  # noqa: E731
                                    max_tokens_per_rank=T)
        et, h = disp()
        out = cclx_experts(env, et, h, E)
        comb = lambda: moe.combine(env.comm, out, h)  # noqa: E731
    else:
        disp = lambda: torch_dispatch(env, x, ids, E)  # noqa: E731
        et, h = disp()
        out = expert_apply(torch, et, (h[4] + env.rank * L).to(torch.float32))
        comb = lambda: torch_combine(env, out, h, w)  # noqa: E731
    y = comb()
    err = float(((y.double().cpu() - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
                if T else 0.0)
    d_s, d_host = time_calls(env, disp, args.iters, args.warmup)
    c_s, c_host = time_calls(env, comb, args.iters, args.warmup)
    d_s, c_s, d_host, c_host, err = (env.max(v) for v in (d_s, c_s, d_host, c_host, err))
    return {"tokens": T, "impl": impl, "pairs": pairs, "wire_bytes_per_row": wire,
            "dispatch_us": d_s * 1e6, "combine_us": c_s * 1e6,
            "dispatch_host_us": d_host * 1e6, "combine_host_us": c_host * 1e6,
            "dispatch_gbps": pairs * wire / d_s / 1e9, "combine_gbps": pairs * 2 * H / c_s / 1e9,
            "max_rel_err": err, "ok": err <= TOL[impl]}


def table(rows: List[Dict[str, Any]]) -> str:
    head = (f"{'tokens':>7} {'impl':>11} {'disp us':>10} {'GB/s':>8} {'host us':>9} "
            f"{'comb us':>10} {'GB/s':>8} {'host us':>9} {'rel err':>9} ok  extra")
    out = [head]
    for r in rows:
        extra = ""
        if "comm_bytes" in r:
            kd, kc = r.get("kernels_dispatch"), r.get("kernels_combine")
            extra = (f"{r['route']}; kernels {'-' if kd is None else kd}/"
                     f"{'-' if kc is None else kc}; memory {r['comm_bytes'] / 2 ** 20:.1f} MiB "
                     f"(rank-major bound {r['rank_major_bound_bytes'] / 2 ** 20:.1f} MiB)")
            if r.get("dispatch_kernel_us") is not None:
                extra += (f"; kernel time {r['dispatch_kernel_us']:.1f}/"
                          f"{r['combine_kernel_us']:.1f} us")
            if "dispatch_floor_us" in r:
                extra += (f"; HBM floor {r['dispatch_floor_us']:.1f}/{r['combine_floor_us']:.1f}"
                          f" us at {r['hbm_gbps']:.0f} GB/s")
        out.append(f"{r['tokens']:>7} {r['impl']:>11} {r['dispatch_us']:>10.1f} "
                   f"{r['dispatch_gbps']:>8.2f} {r['dispatch_host_us']:>9.1f} "
                   f"{r['combine_us']:>10.1f} {r['combine_gbps']:>8.2f} "
                   f"{r['combine_host_us']:>9.1f} {r['max_rel_err']:>9.2e} "
                   f"{'yes' if r['ok'] else 'NO':<3} {extra}".rstrip())
    return "\n".join(out)


def plot(path: str, rows: List[Dict[str, Any]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key in zip(axes, ("dispatch_us", "combine_us")):
        for impl in dict.fromkeys(r["impl"] for r in rows):
            pts = [(r["tokens"], r[key]) for r in rows if r["impl"] == impl]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens per rank")
        ax.set_ylabel(key.replace("_us", " time (us)"))
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


def run(args: argparse.Namespace, torch: Any) -> int:
    env = Env(args, torch)
    try:
        return _run(env, args, torch)
    finally:
        env.close()


def _run(env: Env, args: argparse.Namespace, torch: Any) -> int:
    from ..perf.report import machine_facts

    if args.experts % env.size:
        raise SystemExit(f"cclx-bench moe: --experts {args.experts} is not a multiple of the "
                         f"world size {env.size}")
    if not 1 <= args.topk <= args.experts:
        raise SystemExit(f"cclx-bench moe: --topk {args.topk} must be 1..--experts "
                         f"({args.experts}): the routing picks distinct experts")
    impls = [s.strip() for s in args.impl.split(",") if s.strip()]
    bad = [s for s in impls if s not in IMPLS]
    if bad:
        raise SystemExit(f"cclx-bench moe: unknown --impl {bad} (choose from {IMPLS})")
    tokens = args.tokens or ([1, 128, 4096] if env.cuda else [1, 128])
    if env.cuda:
        kind = torch.cuda.get_device_name(env.device)
        where = f"cuda, {kind}" + (f", {env.size} ranks sharing a GPU" if env.shared else "")
    else:
        kind, where = "cpu", f"cpu, {env.size} process{'es' if env.size > 1 else ''}"
    notes = []
    if not env.cuda or env.shared:
        notes.append("host cost and correctness only: " + (
            "CPU processes" if not env.cuda else "ranks share one GPU") + "; not link speed")
    ep_ok = False
    if "nccl-ep" in impls:
        ep_status = nccl_ep_status()
        notes.append("nccl-ep: " + ep_status)
        # every rank drives it, or none (its rows are collective)
        ep_ok = env.max(1.0 if ep_status.startswith("not measured") else 0.0) == 0
    notes.append(f"torch baseline transport: {env.transport}")
    notes.append("cclx exchange: " + ("device_alltoallv_single (no host sync)"
                                      if hasattr(env.comm, "device_alltoallv_single") else
                                      "all_to_all_v_single with split sizes read on the host "
                                      "(Comm has no device_alltoallv_single)"))
    meta = {"world_size": env.size, "where": where, "device_kind": kind,
            "hidden": args.hidden, "topk": args.topk, "experts": args.experts,
            "tokens": tokens, "dtype": "bf16", "iters": args.iters, "warmup": args.warmup,
            "commit": env.cclx.__commit__, "notes": notes,
            "machine": machine_facts(torch, env.cuda) if env.rank == 0 else {}}
    if env.rank == 0:
        print(f"cclx-bench moe: {where}; world {env.size}; hidden {args.hidden}, top-{args.topk}"
              f", {args.experts} experts; bf16 tokens; cclx {meta['commit']}", flush=True)
        for n in notes:
            print("  note: " + n, flush=True)
        print(table([]), flush=True)
    rows = []
    for T in tokens:
        for impl in impls:
            if impl == "nccl-ep":
                if not ep_ok:
                    continue
                try:
                    r = run_row(env, args, T, impl)
                except RuntimeError as e:  # NCCL EP's own failure: a note, not a row
                    notes.append(f"nccl-ep, {T} tokens: not measured: {e}")
                    if env.rank == 0:
                        print(f"  note: {notes[-1]}", flush=True)
                    continue
            else:
                r = run_row(env, args, T, impl)
            rows.append(r)
            if env.rank == 0:
                print(table([r]).splitlines()[1], flush=True)
    passed = all(r["ok"] for r in rows)
    if env.rank == 0:
        verdict = "all outputs within tolerance" if passed else "FAILED: an output is off"
        print(f"cclx-bench moe: {verdict}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "rows": rows, "passed": passed}, f, indent=1)
        if args.plot and rows:
            try:
                plot(args.plot, rows, f"cclx-bench moe: {where}, world {env.size}")
            except ImportError:
                print("cclx-bench moe: --plot needs matplotlib; no plot written", flush=True)
    # Every rank leaves together: none tears down its communicators (and exits) while rank 0 is
    # still writing, or while a peer's last torch.distributed call is in flight.
    env.comm.barrier()
    if env.pg:
        env.pg.barrier()
    return 0 if passed else 1


def main(argv: Optional[List[str]] = None, args: Optional[argparse.Namespace] = None) -> int:
    if args is None:
        args = build_parser().parse_args(argv)
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        raise SystemExit("cclx-bench moe: needs torch (pip install torch)") from None
    return run(args, torch)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
