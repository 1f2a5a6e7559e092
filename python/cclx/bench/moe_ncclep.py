"""cclx-bench moe, the nccl-ep row: NVIDIA's NCCL EP (PyPI nccl-extensions, module `nccl.ep`) in
its low-latency (LL) mode with bf16 tokens and no quantization recipe.

How the bench's semantics map onto NCCL EP's API, per row (tokens per rank T, hidden H, top-k,
E experts, N ranks, L = E / N local experts):
- setup, untimed, once per row: a fresh NCCL communicator from nccl4py
  (`nccl.core.Communicator.init`; the unique id is made locally at world size 1, else by rank 0 and
  sent to the others through the cclx comm as an all_reduce MAX of its 128 bytes as float32),
  `ncclEpCreateGroup` (algorithm LOW_LATENCY, num_experts E, max_dispatch_tokens_per_rank T, the
  bound = tokens per rank as in the buffer rows, max_token_bytes 2H, staging buffer sized by the
  library) and `ncclEpCreateHandle` (layout EXPERT_MAJOR, topk_idx = the routing ids, int64
  [T, k]). All three are destroyed after the row.
- dispatch (timed) = `ncclEpUpdateHandle(topk_idx)` + `ncclEpDispatch`: x [T, H] bf16 in; out a
  caller-owned recv [L, N*T, H] bf16 and expert_counters [L] int32. The wire is rank-major (a
  token goes once to each rank holding one of its experts, its expert ids in a header); the
  receiver expands it into one row per (token, local expert): recv[j, :counts[j]] are the rows of
  global expert rank*L + j, in no fixed token order. Dispatch takes no weights in this layout. The
  update is timed too because the other rows' dispatch takes the routing on every call.
- experts (untimed): expert_apply(x, e) with e the global expert id, on the valid rows only,
  written back into recv, which is then combine's input (this saves a second [L, N*T, H] tensor,
  15 GB at E=256, T=4096, world 1; later timed dispatches overwrite it with raw rows, which
  changes no byte that combine moves; y is checked before them).
- combine (timed) = `ncclEpCombine`: in recv, out y [T, H] bf16, and outputs.topk_weights = w
  [T, k] float32: every (token, expert) row goes back to the token's rank (k rows a token, no
  per-rank pre-reduction) and the kernel writes sum_j w_j * row_j (float32 sum, bf16 out) in
  token order. So combine returns the weighted sum as every other row does, and y is checked
  against the float64 reference with the bf16 tolerance 2^-6.
  Why not the RANK_MAJOR layout: it moves one row per (token, rank) both ways, but its combine
  applies no weights (the caller pre-reduces w * f_e(x) over each rank's experts before combine),
  so "combine returns the weighted sum" is EXPERT_MAJOR's contract.
- GB/s as for every row: pairs (token, destination rank) * 2H / time. Dispatch's wire matches;
  combine moves combine_rows = T*k rows back (one per (token, expert)), so its GB/s understates
  NCCL EP's traffic by the factor k / (ranks a token reaches).
- kernels_*: CUDA kernels per call (the profiler sees NCCL EP's JIT kernels, driver launches).
- comm_bytes: free device memory lost to communicator + group + handle (NCCL's resources and the
  LL staging buffer, two banks); rdma_bytes_model: that buffer by NCCL EP's LowLatencyLayout
  formula; recv_bytes: the [L, N*T, H] tensor the caller provides.

Requirements, checked before anything collective (status() names what is missing): a GPU per
rank (NCCL refuses ranks sharing one); hidden % 512 == 0 and <= 16384, top-k <= 32, <= 1024 local
experts (the LL kernels); one NCCL >= 2.30 for libnccl_ep.so and nccl4py (libnccl_ep needs
ncclWinGetUserPtr, ncclGetPeerDevicePointer and ncclCommQueryProperties, absent from 2.28: beside
torch's 2.28 it does not load), so an LD_PRELOADed libnccl.so.2 (bench/ncclep/wheels.sh); NCCL
headers of that version under NCCL_HOME (the JIT compiles against them with nvcc; NCCL_HOME is set
from the loaded library and CUDA_HOME from PATH's nvcc when unset). Each failure raises
RuntimeError naming the step; the ranks agree first that all can run, but a collective call that
fails on one rank only can still hang the others.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
from typing import Any, Callable, Dict, Tuple

NEEDS = ("ncclWinGetUserPtr", "ncclGetPeerDevicePointer", "ncclCommQueryProperties")
MIN_NCCL = 23000  # NCCL_VERSION_CODE of 2.30.0


def _nccl_str(code: int) -> str:
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def _guard(what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, raising RuntimeError('NCCL EP <what> failed: ...') on any error."""
    def call(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except Exception as e:  # noqa: BLE001 - each becomes one clear reason
            raise RuntimeError(f"NCCL EP {what} failed: {type(e).__name__}: {e}") from e
    return call


def _lib_path(fn: Any) -> str:
    """The file that defines the ctypes function fn (dladdr)."""
    class Info(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
    for name in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(name).dladdr
            break
        except (OSError, AttributeError):
            continue
    else:
        return "?"
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(Info)]
    info = Info()
    ok = dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info))
    return os.path.realpath(info.fname.decode()) if ok and info.fname else "?"


def _loaded_nccls() -> list:
    """Paths of the libnccl.so* files mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            paths = {ln.split(None, 5)[5].strip() for ln in f if len(ln.split(None, 5)) == 6}
    except OSError:
        return []
    return sorted({os.path.realpath(p) for p in paths
                   if os.path.basename(p).startswith("libnccl.so")})


def _header_code(home: str) -> int:
    try:
        with open(os.path.join(home, "include", "nccl.h")) as f:
            m = re.search(r"#define\s+NCCL_VERSION_CODE\s+(\d+)", f.read())
    except OSError:
        return 0
    return int(m.group(1)) if m else 0


def _prepare() -> Tuple[Any, Any, Dict[str, str]]:
    """(nccl.ep, nccl.core, facts) once NCCL EP can run here; RuntimeError saying why not."""
    loaded = _loaded_nccls()
    if "NCCL_HOME" not in os.environ and loaded:
        home = os.path.dirname(os.path.dirname(loaded[0]))
        if os.path.isfile(os.path.join(home, "include", "nccl.h")):
            os.environ["NCCL_HOME"] = home  # before nccl.ep's import, which would default it
    try:
        import nccl.core as nc  # type: ignore[import-not-found]
        import nccl.ep as ep  # type: ignore[import-not-found]
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(f"nccl.ep (PyPI nccl-extensions) does not import "
                           f"({type(e).__name__}: {e})") from e
    if not any(os.environ.get(v) for v in ("NCCL_EP_JIT_NVCC", "NVCC", "CUDA_HOME", "CUDA_PATH")):
        nvcc = shutil.which("nvcc")
        if nvcc:
            os.environ["CUDA_HOME"] = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    v = ctypes.c_int(0)
    try:  # only libnccl_ep's own ncclEpGetVersion runs: safe whatever NCCL it is bound to
        ep_ver, ep_path = ep.get_lib_version(), ep.get_lib_path()
        lib = ctypes.CDLL(str(ep_path), mode=os.RTLD_NOLOAD)
        lib.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.ncclGetVersion(ctypes.byref(v))  # dlsym through libnccl_ep: the NCCL it is bound to
        nccl_path = _lib_path(lib.ncclGetVersion)
    except Exception as e:  # noqa: BLE001
        hint = (f"; NCCL in the process: {', '.join(loaded) or 'none'}, needs 2.30 (LD_PRELOAD "
                f"nvidia-nccl-cu13==2.30.7's libnccl.so.2)") if "undefined symbol" in str(e) else ""
        raise RuntimeError(f"libnccl_ep.so does not load ({type(e).__name__}: {e}){hint}") from e
    missing = [s for s in NEEDS if not hasattr(lib, s)]
    where = f"NCCL {_nccl_str(v.value)} at {nccl_path}"
    if v.value < MIN_NCCL or missing:
        raise RuntimeError(f"libnccl_ep.so is bound to {where}; it needs NCCL >= 2.30 (lacks "
                           f"{', '.join(missing) or 'nothing named, but older'}): LD_PRELOAD the "
                           f"libnccl.so.2 of nvidia-nccl-cu13==2.30.7 (torch loads its own first)")
    try:
        core_lib = nc.get_version().libnccl
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(f"nccl4py cannot load NCCL ({type(e).__name__}: {e})") from e
    if core_lib is None:
        raise RuntimeError("nccl4py finds no libnccl.so.2 it can load")
    core_path = os.path.realpath(str(core_lib.path)) if core_lib.path else "?"
    if core_path != nccl_path and "?" not in (core_path, nccl_path):
        raise RuntimeError(f"nccl4py uses NCCL {core_lib} but libnccl_ep.so uses {where}")
    others = [p for p in _loaded_nccls() if p != nccl_path]
    where += f" (also mapped: {', '.join(others)})" if others else ""
    home = os.environ.get("NCCL_HOME", "")
    hcode = _header_code(home)
    if hcode != v.value:
        raise RuntimeError(f"NCCL_HOME={home or '(unset)'} has NCCL headers "
                           f"{_nccl_str(hcode) if hcode else 'none'}, not {_nccl_str(v.value)}: "
                           f"NCCL EP's JIT would compile against them")
    nvcc = os.environ.get("NCCL_EP_JIT_NVCC") or os.environ.get("NVCC") or next(
        (os.path.join(os.environ[h], "bin", "nvcc") for h in ("CUDA_HOME", "CUDA_PATH")
         if os.environ.get(h)), "none found (set CUDA_HOME or NCCL_EP_JIT_NVCC)")
    nvcc += "" if os.path.isfile(nvcc) or nvcc.startswith("none") else " (missing)"
    return ep, nc, {"libnccl_ep": f"{ep_ver} at {ep_path}", "nccl": where,
                    "nccl_home": home, "nvcc": nvcc}


def status() -> str:
    """What is present for the nccl-ep row, or 'not measured: <why>'."""
    try:
        _, _, f = _prepare()
    except Exception as e:  # noqa: BLE001 - any failure means "not here"
        return f"not measured: {e}"
    return (f"libnccl_ep {f['libnccl_ep']}; {f['nccl']} (nccl4py the same); NCCL_HOME "
            f"{f['nccl_home']}; JIT nvcc {f['nvcc']}; row nccl-ep: LL expert-major, bf16")


def _shape_problem(env: Any, H: int, k: int, E: int) -> str:
    if not env.cuda:
        return "NCCL EP needs a GPU per rank"
    if env.shared:
        return "ranks share a GPU, which NCCL refuses"
    if H % 512 or H > 16384:
        return f"hidden {H}: the LL kernels need a multiple of 512, at most 16384"
    if k > 32 or E // env.size > 1024:
        return f"top-{k}, {E // env.size} local experts: LL allows top-k <= 32, <= 1024 local"
    return ""


def _rdma_bytes_model(T: int, tb: int, N: int, E: int, k: int) -> int:
    """NCCL EP's LL staging buffer for the expert-major layout (LowLatencyLayout, two banks)."""
    msg_d = (4 + 2 * k + 15) // 16 * 16 + tb
    msg_c = tb // 2 // 128 * 4 + tb
    slot = max(T * msg_d + N * T * msg_d, E * T * msg_c + T * msg_c * k)
    n = 2 * slot + 2 * ((E * 4 + 127) // 128 * 128)
    return (n + 128) // 128 * 128


def _communicator(env: Any, nc: Any) -> Any:
    torch = env.torch
    if env.size == 1:
        uid = nc.get_unique_id()
    else:
        n = len(nc.get_unique_id(empty=True).as_bytes)
        t = torch.zeros(n, dtype=torch.float32, device=env.device)
        if env.rank == 0:
            t.copy_(torch.tensor(list(nc.get_unique_id().as_bytes), dtype=torch.float32))
        env.comm.all_reduce(t, env.cclx.ReduceOp.MAX)  # a broadcast: the others send zeros
        uid = nc.UniqueId.from_bytes(bytes(int(b) for b in t.cpu().tolist()))
    with torch.cuda.device(env.device):
        return nc.Communicator.init(env.size, env.rank, uid)


def run_row(env: Any, args: Any, T: int, time_calls: Callable,
            expert_apply: Callable) -> Dict[str, Any]:
    from .moe_buffer import floor_bytes, kernel_profile, row_inputs

    torch = env.torch
    H, k, E = args.hidden, args.topk, args.experts
    N, L, Tm = env.size, args.experts // env.size, max(T, 1)
    problem, ep, nc, facts = _shape_problem(env, H, k, E), None, None, {}
    if not problem:
        try:
            ep, nc, facts = _prepare()
        except Exception as e:  # noqa: BLE001 - the reason goes to every rank's caller
            problem = str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}"
    if env.max(1.0 if problem else 0.0) > 0:  # every rank stops here, or none does
        raise RuntimeError(problem or "another rank cannot run NCCL EP")
    x, ids, w, ref = row_inputs(torch, args, env.rank, T)
    pairs = int(torch.zeros(T, N, dtype=torch.bool).scatter_(1, ids // L, True).sum()) if T else 0
    x, ids, w = (t.contiguous().to(env.device) for t in (x, ids, w))
    stream = int(torch.cuda.current_stream(env.device).cuda_stream)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # NCCL EP allocates with cudaMalloc, beside torch's cache
    free0 = torch.cuda.mem_get_info(env.device)[0]
    comm = group = handle = None
    done = False
    try:
        comm = _guard("communicator init (nccl4py ncclCommInitRankScalable)", _communicator)(
            env, nc)
        cfg = ep.GroupConfig(algorithm=ep.Algorithm.LOW_LATENCY, num_experts=E,
                             max_dispatch_tokens_per_rank=Tm, max_token_bytes=2 * H, num_topk=k)
        group = _guard("ncclEpCreateGroup (LL)", ep.Group.create)(comm, cfg)
        t_ids = ep.Tensor(ids)
        handle = _guard("ncclEpCreateHandle (LL, expert-major)", group.create_handle)(
            ep.Layout.EXPERT_MAJOR, t_ids, stream=stream)
        torch.cuda.synchronize()
        comm_bytes = free0 - torch.cuda.mem_get_info(env.device)[0]
        recv = _guard("receive tensor allocation [L, N*T, H]", torch.empty)(
            L, N * Tm, H, dtype=torch.bfloat16, device=env.device)
        counts = torch.zeros(L, dtype=torch.int32, device=env.device)
        y = torch.empty(T, H, dtype=torch.bfloat16, device=env.device)
        d_in = ep.DispatchInputs(tokens=ep.Tensor(x))
        d_out = ep.DispatchOutputs(tokens=ep.Tensor(recv))
        lay = ep.LayoutInfo(expert_counters=ep.Tensor(counts))
        c_in = ep.CombineInputs(tokens=ep.Tensor(recv))
        c_out = ep.CombineOutputs(tokens=ep.Tensor(y), topk_weights=ep.Tensor(w))

        def _disp() -> None:
            handle.update(t_ids, stream=stream)
            handle.dispatch(d_in, d_out, layout_info=lay, stream=stream)

        disp = _guard("ncclEpUpdateHandle + ncclEpDispatch", _disp)
        comb = _guard("ncclEpCombine", lambda: handle.combine(c_in, c_out, stream=stream))
        disp()
        _guard("dispatch (device)", torch.cuda.synchronize)()
        n_e = counts.long()
        if T and int(n_e.max()) > N * Tm:
            raise RuntimeError(f"NCCL EP dispatch reported {int(n_e.max())} rows for one expert, "
                               f"over its {N * Tm} slots")
        idx = (torch.arange(N * Tm, device=env.device)[None, :] < n_e[:, None]).flatten()
        idx = idx.nonzero().squeeze(1)
        flat = recv.view(-1, H)
        e = (idx // (N * Tm) + env.rank * L).to(torch.float32)
        flat[idx] = expert_apply(torch, flat.index_select(0, idx), e).contiguous()
        comb()
        _guard("combine (device)", torch.cuda.synchronize)()
        err = float(((y.double().cpu() - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
                    if T else 0.0)
        recv_rows = int(idx.numel())
        kd, kd_us = kernel_profile(torch, disp, env.cuda)
        kc, kc_us = kernel_profile(torch, comb, env.cuda)
        d_s, d_host = time_calls(env, disp, args.iters, args.warmup)
        c_s, c_host = time_calls(env, comb, args.iters, args.warmup)
        d_s, c_s, d_host, c_host, err = (env.max(v) for v in (d_s, c_s, d_host, c_host, err))
        row = {"tokens": T, "impl": "nccl-ep", "pairs": pairs, "wire_bytes_per_row": 2 * H,
               "dispatch_us": d_s * 1e6, "combine_us": c_s * 1e6,
               "dispatch_host_us": d_host * 1e6, "combine_host_us": c_host * 1e6,
               "dispatch_gbps": pairs * 2 * H / d_s / 1e9,
               "combine_gbps": pairs * 2 * H / c_s / 1e9, "max_rel_err": err,
               "ok": err <= 2.0 ** -6, "route": "NCCL EP LL expert-major",
               "kernels_dispatch": kd, "kernels_combine": kc,
               "dispatch_kernel_us": env.max(kd_us) if kd_us is not None else None,
               "combine_kernel_us": env.max(kc_us) if kc_us is not None else None,
               "comm_bytes": comm_bytes,
               "rank_major_bound_bytes": N * Tm * 2 * ((2 * H + 15) // 16 * 16),
               "rdma_bytes_model": _rdma_bytes_model(Tm, 2 * H, N, E, k),
               "recv_bytes": recv.numel() * recv.element_size(), "recv_rows": recv_rows,
               "combine_rows": T * k, "libnccl_ep": facts["libnccl_ep"], "nccl": facts["nccl"]}
        if env.cuda and N == 1 and getattr(env, "hbm_gbps", 0):
            fb = floor_bytes(T, H, k, False)
            row.update({"hbm_gbps": env.hbm_gbps,
                        "dispatch_floor_us": fb["dispatch"] / env.hbm_gbps / 1e3,
                        "combine_floor_us": fb["combine"] / env.hbm_gbps / 1e3})
        done = True
        return row
    finally:
        errs = []
        for what, fn in (("synchronize", torch.cuda.synchronize),
                         ("ncclEpHandleDestroy", handle and handle.destroy),
                         ("ncclEpGroupDestroy", group and group.destroy),
                         ("ncclCommDestroy", comm and comm.destroy)):
            try:
                if fn:
                    fn()
            except Exception as e:  # noqa: BLE001 - tear down the rest, report the first
                errs.append(f"{what}: {type(e).__name__}: {e}")
        if errs and done:
            raise RuntimeError("NCCL EP teardown failed: " + "; ".join(errs))
