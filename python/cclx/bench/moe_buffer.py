"""cclx-bench moe, the cclx.moe.Buffer rows (buffer-bf16 / buffer-fp8) and what only they report:
the host cost of one eager call, the kernels a call launches (torch profiler), the device time
against the HBM floor of the bytes the call moves at world size 1, and the buffer's
communication memory against the rank-major bound."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional

BLOCK = 128


def kernel_profile(torch: Any, fn: Callable[[], Any], cuda: bool, calls: int = 5):
    """(CUDA kernels one call of fn launches, their GPU time per call in us) from the torch
    profiler over `calls` back-to-back calls: the kernels' own start-to-end times, without the
    launch and synchronization around them; (None, None) on CPU."""
    if not cuda:
        return None, None
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    n, us = 0, 0.0
    for e in prof.events():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA and \
                "memcpy" not in e.name.lower() and "memset" not in e.name.lower():
            n += 1
            us += e.time_range.elapsed_us()
    return n // calls, us / calls


def hbm_copy_gbps(torch: Any, device: Any) -> float:
    """Device-to-device copy rate (GB/s, bytes read + written) of a 512 MiB buffer: the HBM
    rate the floors use."""
    n = 512 << 20
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _ in range(2):
        b.copy_(a)
    torch.cuda.synchronize()
    reps = 10
    t0 = time.perf_counter()
    for _ in range(reps):
        b.copy_(a)
    torch.cuda.synchronize()
    return 2 * n * reps / (time.perf_counter() - t0) / 1e9


def floor_bytes(T: int, H: int, k: int, fp8: bool, es: int = 2) -> Dict[str, int]:
    """Bytes a call must move through HBM at world size 1 (each token kept once, its k experts
    local): dispatch reads x and the routing, writes one receive row per token (FP8: codes and
    scales) and the entries; combine reads the k expert rows of each token, writes and reads
    one partial row per token and writes the output."""
    nb = (H + BLOCK - 1) // BLOCK
    wire = H + 4 * nb if fp8 else H * es
    disp = T * H * es + T * k * 12 + T * wire + T * k * 8
    comb = T * k * H * es + 2 * T * H * es + T * H * es
    return {"dispatch": disp, "combine": comb}


def row_inputs(torch: Any, args: Any, rank: int, T: int):
    """One row's inputs on the CPU, the same for every implementation: x [T, H] bf16, ids [T, k]
    (distinct experts), w [T, k] (softmax), and the float64 reference of combine with the
    bench's experts f_e(x) = x * (e + 1) + e."""
    H, k, E = args.hidden, args.topk, args.experts
    g = torch.Generator().manual_seed(args.seed * 1000 + rank * 7 + T)
    x = (torch.rand(T, H, generator=g) * 4 - 2).to(torch.bfloat16)
    ids = torch.rand(T, E, generator=g).argsort(1)[:, :k]
    w = torch.softmax(torch.rand(T, k, generator=g), 1)
    ref = sum(w[:, j:j + 1].double() * (x.double() * (ids[:, j:j + 1] + 1) + ids[:, j:j + 1])
              for j in range(k))
    return x, ids, w, ref


def run_row(env: Any, args: Any, T: int, impl: str, time_calls: Callable,
            expert_apply: Callable) -> Dict[str, Any]:
    import cclx.moe as moe

    torch = env.torch
    H, k, E = args.hidden, args.topk, args.experts
    fp8 = impl == "buffer-fp8"
    x, ids, w, ref = row_inputs(torch, args, env.rank, T)
    x, ids, w = x.to(env.device), ids.to(env.device), w.to(env.device)
    N, L = env.size, E // env.size
    pairs = int(torch.zeros(T, N, dtype=torch.bool).scatter_(1, (ids // L).cpu(), True).sum()) \
        if T else 0
    nb = (H + BLOCK - 1) // BLOCK
    wire = (H + 4 * nb) if fp8 else 2 * H
    buf = moe.Buffer(env.comm, max(T, 1), H, E, k, torch.bfloat16, fp8=fp8,
                     ring_tokens=getattr(args, "ring_tokens", None))
    try:
        recv, h = buf.dispatch(x, ids, w)
        n = int(h.expert_offsets[-1])
        offs = h.expert_offsets.long()
        rows = torch.arange(n, device=env.device)
        blk = torch.searchsorted(offs[1:], rows, right=True).clamp(max=L - 1)
        xin = (recv.dequantize(torch.bfloat16) if fp8 else recv.x)[h.entry_rows[:n].long()]
        out = expert_apply(torch, xin, (blk + env.rank * L).to(torch.float32)).contiguous()
        last = [h]  # combine takes the handle of the latest dispatch (same routing)

        def disp() -> None:
            last[0] = buf.dispatch(x, ids, w)[1]

        comb = lambda: buf.combine(out, last[0])  # noqa: E731
        y = comb()
        err = float(((y.double().cpu() - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
                    if T else 0.0)
        kd, kd_us = kernel_profile(torch, disp, env.cuda)
        kc, kc_us = kernel_profile(torch, comb, env.cuda)
        d_s, d_host = time_calls(env, disp, args.iters, args.warmup)
        c_s, c_host = time_calls(env, comb, args.iters, args.warmup)
        d_s, c_s, d_host, c_host, err = (env.max(v) for v in (d_s, c_s, d_host, c_host, err))
        bound = N * max(T, 1) * (((wire + 15) // 16 * 16) + (2 * H + 15) // 16 * 16)
        row = {"tokens": T, "impl": impl, "pairs": pairs, "wire_bytes_per_row": wire,
               "dispatch_us": d_s * 1e6, "combine_us": c_s * 1e6,
               "dispatch_host_us": d_host * 1e6, "combine_host_us": c_host * 1e6,
               "dispatch_gbps": pairs * wire / d_s / 1e9,
               "combine_gbps": pairs * 2 * H / c_s / 1e9, "max_rel_err": err,
               "ok": err <= (2.0 ** -3 if fp8 else 2.0 ** -6), "route": buf.route,
               "kernels_dispatch": kd, "kernels_combine": kc,
               "dispatch_kernel_us": env.max(kd_us) if kd_us is not None else None,
               "combine_kernel_us": env.max(kc_us) if kc_us is not None else None,
               "comm_bytes": buf.bytes,
               "rank_major_bound_bytes": bound, "blocks": getattr(buf._b, "blocks", 0),
               "ring_rows": buf.ring_rows, "ring_round": buf.ring_round}
        if env.cuda and N == 1:
            fb = floor_bytes(T, H, k, fp8)
            rate = env.hbm_gbps
            row.update({"hbm_gbps": rate,
                        "dispatch_floor_us": fb["dispatch"] / rate / 1e3,
                        "combine_floor_us": fb["combine"] / rate / 1e3})
        return row
    finally:
        if env.cuda:
            torch.cuda.synchronize()
        buf.destroy()
