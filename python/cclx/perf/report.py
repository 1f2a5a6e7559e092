"""cclx-perf output: nccl-tests style table, summary line, JSON with machine facts, plot."""
from __future__ import annotations

import json
import math
import os
import platform
import socket
import subprocess
import sys
from typing import Any, Dict, List, Optional

from .. import _C
from .._info import nccl_version


def _cmd(args: List[str], timeout: float = 15.0) -> Optional[str]:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_facts(torch: Any, cuda: bool) -> Dict[str, Any]:
    """Host, GPU, driver, CUDA, NCCL and cclx build facts."""
    here = os.path.dirname(os.path.abspath(__file__))
    facts: Dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "cclx_version": _C.__version__,
        "cclx_commit_build": _C.__commit__,
        "cclx_commit_git": _cmd(["git", "-C", here, "rev-parse", "--short=12", "HEAD"]),
        "cclx_built_with_cuda": bool(_C.has_cuda),
    }
    try:
        import numpy

        facts["numpy"] = numpy.__version__
    except ImportError:
        pass
    if torch is not None:
        facts["torch"] = torch.__version__
        facts["cuda_runtime"] = torch.version.cuda
    if cuda and torch is not None:
        n = torch.cuda.device_count()
        facts["gpu_count"] = n
        facts["gpu_models"] = [torch.cuda.get_device_name(i) for i in range(n)]
        v = nccl_version()
        facts["nccl_version"] = ".".join(map(str, v)) if v else None
        facts["driver"] = _cmd(["nvidia-smi", "--query-gpu=driver_version",
                                "--format=csv,noheader"])
        facts["nvidia_smi_topo"] = _cmd(["nvidia-smi", "topo", "-m"])
    facts["env"] = {k: v for k, v in os.environ.items()
                    if k.startswith(("CCLX_", "NCCL_", "CUDA_VISIBLE", "TORCH_SYMM_MEM"))}
    return facts


def _baseline_line(name: str, f: Dict[str, Any]) -> str:
    if "skipped" in f:
        return f"# baseline {name}: skipped: {f['skipped']}"
    if name == "nccl":
        return (f"# baseline nccl: NCCL {f.get('version') or '?'} ({f.get('library') or '?'}), "
                "its ordinary kernels on ordinary buffers (NCCL_NVLS_ENABLE=0)")
    if name == "nccl-sym":
        return (f"# baseline nccl-sym: the same NCCL, buffers from ncclMemAlloc registered as "
                f"symmetric windows ({f.get('window_bytes', 0)} bytes x 2, "
                "NCCL_WIN_COLL_SYMMETRIC), input and output in the windows")
    if name == "torch-symm":
        return (f"# baseline torch-symm: torch {f.get('torch')} symmetric memory "
                f"({f.get('backend') or 'CUDA'} backend, multicast off), the fastest of "
                f"{', '.join(f.get('variants', []))} per size, input in the symmetric buffer")
    return f"# baseline {name}"


def _size(b: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k} {unit}"
    return f"{b} B"


def plan_line(args: Any, n: int, torch: Any, asked: str) -> str:
    """The first line of a run: what it measures and on what, e.g. "cclx-perf: allreduce 1 KiB..64
    MiB, f32, 4 CPU processes over host shared memory (no GPU found)"."""
    what = f"{','.join(args.colls)} {_size(args.minbytes)}..{_size(args.maxbytes)}, {args.dtype}"
    if args.cuda:
        name = torch.cuda.get_device_name(0) if torch is not None else "GPU"
        return f"cclx-perf: {what}, {n} processes on {n} GPUs ({name})"
    why = ("--device cpu" if asked == "cpu" else
           "no GPU found" if torch is not None else "no GPU used: torch is not installed")
    return f"cclx-perf: {what}, {n} CPU processes over host shared memory ({why})"


def header(args: Any, n: int, libs: List[str], facts: Dict[str, Any]) -> str:
    where = "cpu" if not args.cuda else (
        f"cuda ({facts.get('gpu_models', ['?'])[0]} x{facts.get('gpu_count', '?')})")
    lines = [
        f"# cclx-perf: {','.join(args.colls)} on {n} ranks, {where}, dtype {args.dtype}, "
        f"op {args.op}, root {args.root}",
        f"# iters {args.iters} warmup {args.warmup} repeats {args.repeats} graph {args.graph} "
        f"blocking {args.blocking} algo {args.algo} low_precision {int(args.low_precision)} "
        f"fp8_algo {getattr(args, 'fp8_algo', 'auto')} api {getattr(args, 'api', 'cclx')} "
        f"check {args.check}; time = median of repeats, max over ranks; GB = 1e9",
    ]
    api = facts.get("nccl_api")
    if api:
        lines.append(f"# NCCL API: dropin = {api['dropin']}, nccl = {api['real_nccl']} "
                     f"(version {api['real_nccl_version']}); vs nccl = nccl / dropin")
    if "allreduce_rmsnorm" in args.colls:
        lines.append(f"# allreduce_rmsnorm (rows rmsnorm/<hidden>, count = tokens): cclx = "
                     f"all_reduce_rmsnorm (fused_algo {getattr(args, 'fused_algo', 'auto')}); "
                     "nccl = NCCL allreduce + torch.add + torch.nn.functional.rms_norm; eps 1e-6; "
                     "y checked against float64")
    base = facts.get("baselines") or {}
    for name, f in base.items():
        lines.append(_baseline_line(name, f))
    if not base and not api and not args.cuda and not getattr(args, "baselines_explicit", 1):
        lines.append("# baselines: none on CPU (nccl, nccl-sym and torch-symm need CUDA)")
    bases = libs[1:]
    if bases:
        lines.append(f"# vs B = B's time / {libs[0]}'s time (> 1: {libs[0]} faster)"
                     + ("; best = against the fastest baseline of the row" if len(bases) > 1
                        else ""))
    cols = f"# {'coll':>14} {'size(B)':>12} {'count':>11} {'type':>5} {'redop':>5} {'root':>4}"
    cols += f" | {libs[0] + ' time(us)':>15} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
    for lib in bases:
        cols += f" | {lib + ' time(us)':>19} {'busbw':>7} {'#wrong':>6}"
    if bases:
        cols += " |" + "".join(f" {'vs ' + b:>13}" for b in bases)
        if len(bases) > 1:
            cols += f" {'vs best':>8}"
    lines.append(cols)
    return "\n".join(lines)


def row_line(r: Dict[str, Any], libs: List[str]) -> str:
    s = (f"  {r.get('label', r['coll']):>14} {r['bytes']:>12} {r['count']:>11} {r['dtype']:>5} "
         f"{r['op']:>5} {r['root']:>4}")
    d = r.get(libs[0])
    if d:
        s += (f" | {d['time_us']:>15.2f} {d['algbw']:>7.2f} {d['busbw']:>7.2f} "
              f"{d['wrong']:>6}")
    else:
        s += f" | {'-':>15} {'-':>7} {'-':>7} {'-':>6}"
    bases = libs[1:]
    for lib in bases:
        d = r.get(lib)
        s += (f" | {d['time_us']:>19.2f} {d['busbw']:>7.2f} {d['wrong']:>6}" if d
              else f" | {'-':>19} {'-':>7} {'-':>6}")
    if bases:
        vs = r.get("speedup_vs", {})
        s += " |" + "".join(f" {vs[b]:>13.3f}" if b in vs else f" {'-':>13}" for b in bases)
        if len(bases) > 1:
            sb = r.get("speedup_best")
            s += f" {sb:>8.3f}" if sb else f" {'-':>8}"
    return s


def _stats(xs: List[float]) -> Dict[str, float]:
    return {"geomean": math.exp(sum(math.log(x) for x in xs) / len(xs)), "min": min(xs),
            "max": max(xs), "sizes": len(xs)}


def summary(rows: List[Dict[str, Any]], libs: List[str], n: int, device: str) -> Dict[str, Any]:
    wrong = sum(r[lib]["wrong"] for r in rows for lib in libs if lib in r)
    complete = all(libs[0] in r for r in rows)
    out: Dict[str, Any] = {"sizes": len(rows), "ranks": n, "device": device, "wrong": wrong,
                           "passed": wrong == 0 and len(rows) > 0 and complete}
    for lib in libs:
        bw = [r[lib]["busbw"] for r in rows if lib in r]
        out[f"{lib}_avg_busbw"] = sum(bw) / len(bw) if bw else 0.0
        out[f"{lib}_max_busbw"] = max(bw) if bw else 0.0
    vs: Dict[str, Dict[str, float]] = {}
    for b in libs[1:]:
        xs = [r["speedup_vs"][b] for r in rows if b in r.get("speedup_vs", {})]
        if xs:
            vs[b] = _stats(xs)
    if vs:
        out["speedup_vs"] = vs
        first = "nccl" if "nccl" in vs else next(iter(vs))
        out["speedup_geomean"] = vs[first]["geomean"]  # the figure of earlier records
        out["speedup_min"] = vs[first]["min"]
        out["speedup_max"] = vs[first]["max"]
        out["speedup_of"] = first
    best = [r["speedup_best"] for r in rows if r.get("speedup_best")]
    if best and len(libs) > 2:
        out["speedup_best"] = _stats(best)
    return out


def summary_line(s: Dict[str, Any], libs: List[str]) -> str:
    parts = [f"sizes={s['sizes']}", f"ranks={s['ranks']}", f"device={s['device']}",
             f"wrong={s['wrong']}"]
    for lib in libs:
        parts.append(f"{lib}_avg_busbw={s[lib + '_avg_busbw']:.2f}GB/s")
    for b, st in s.get("speedup_vs", {}).items():
        parts.append(f"speedup({b}/{libs[0]}) geomean={st['geomean']:.3f} "
                     f"min={st['min']:.3f} max={st['max']:.3f}")
    if "speedup_best" in s:
        st = s["speedup_best"]
        parts.append(f"speedup(best baseline/{libs[0]}) geomean={st['geomean']:.3f} "
                     f"min={st['min']:.3f} max={st['max']:.3f}")
    parts.append("PASSED" if s["passed"] else "FAILED")
    return "# cclx-perf summary: " + " ".join(parts)


def write_json(path: str, args: Any, facts: Dict[str, Any], rows: List[Dict[str, Any]],
               summ: Dict[str, Any]) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    a = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    with open(path, "w") as f:
        json.dump({"tool": "cclx-perf", "args": a, "machine": facts, "results": rows,
                   "summary": summ}, f, indent=1, default=str)


def plot(path: str, rows: List[Dict[str, Any]], libs: List[str], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls = list(dict.fromkeys(r["coll"] for r in rows))
    fig, axes = plt.subplots(2, max(1, len(colls)), figsize=(5 * max(1, len(colls)), 7),
                             squeeze=False)
    for j, coll in enumerate(colls):
        rs = [r for r in rows if r["coll"] == coll]
        for lib in libs:
            pts = [(r["bytes"], r[lib]) for r in rs if lib in r]
            if not pts:
                continue
            xs = [p[0] for p in pts]
            axes[0][j].plot(xs, [p[1]["time_us"] for p in pts], marker="o", ms=3, label=lib)
            axes[1][j].plot(xs, [p[1]["busbw"] for p in pts], marker="o", ms=3, label=lib)
        axes[0][j].set_xscale("log", base=2)
        axes[0][j].set_yscale("log")
        axes[0][j].set_title(coll)
        axes[0][j].set_ylabel("time (us)")
        axes[1][j].set_xscale("log", base=2)
        axes[1][j].set_ylabel("busbw (GB/s)")
        axes[1][j].set_xlabel("size (bytes)")
        for ax in (axes[0][j], axes[1][j]):
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
