"""cclx-bench tp output: header, one table line per row and communicator, progress lines,
summary, JSON and plot."""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional

from .comms import SKIP


def fmt_bytes(n: float) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            v = n / k
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{int(n)} B"


def fmt_count(n: float) -> str:
    for unit, k in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return str(int(n))


def header(m: Dict[str, Any]) -> str:
    shp, p = m["shape"], m["params_per_rank"]
    tp = m["world_size"]
    per = lambda n: f" ({n // tp} per rank)" if tp > 1 and n % tp == 0 else ""  # noqa: E731
    kvr = (f" ({shp['kv_heads'] // tp} per rank)" if shp["kv_heads"] >= tp and tp > 1
           else " (1 per rank, replicated)" if tp > shp["kv_heads"] else "")
    ref = m["ref"]
    lines = [
        f"# cclx-bench tp: {m['model']} | TP {tp} ({m['where']}), {m['dtype']}",
        f"# shape: hidden {shp['hidden']}, heads {shp['heads']}{per(shp['heads'])}, kv heads "
        f"{shp['kv_heads']}{kvr}, ffn {shp['ffn']}{per(shp['ffn'])}, vocab {shp['vocab']}, "
        f"head dim {shp['hidden'] // shp['heads']}",
        f"# parameters per rank: {fmt_count(p['total'])} ({fmt_bytes(m['weight_bytes_per_rank'])}"
        f"; embedding replicated, LM head split by vocabulary); built in {m['build_s']:.1f} s",
        (f"# allreduce: 2 per layer = {2 * shp['layers']} per step, step tokens x "
         f"{shp['hidden']} x {m['esize']} B each" if m.get("parallel", "tp") == "tp" else
         f"# sequence parallel: token rows split over the ranks; per layer 2 all-gathers and 2 "
         f"reduce-scatters of step tokens x {shp['hidden']} x {m['esize']} B (the full rows), "
         f"one more all-gather at the end"),
        f"# communicators: {', '.join(c for c in m['comms'] if c != SKIP)} ({ref} = reference); "
        f"skip = the same step without its communication",
    ]
    if "nccl-sym" in m["comms"]:
        f = m.get("nccl_sym", {})
        lines.append(f"# nccl-sym: NCCL {f.get('version', '?')} ({f.get('library', '?')}) with the "
                     "row-parallel outputs written into ncclMemAlloc memory registered as "
                     "symmetric windows, reduced in place there (no copy)")
    if "cclx-fused" in m["comms"]:
        lines.append("# cclx-fused: each allreduce, its residual add and the next RMSNorm (or the "
                     "final one) as one call (Comm.all_reduce_rmsnorm)")
    if "cclx-fp8" in m["comms"]:
        lines.append(f"# cclx-fp8: hint low_precision=fp8 on allreduces >= "
                     f"{fmt_bytes(m['fp8_min_bytes'])}; rows with smaller ones leave it out "
                     "(it would run as cclx)")
    lines += [f"# {n}" for n in m["notes"]]
    lines += [
        f"# time: median of {m['repeats']} interleaved repetitions of {m['iters']} steps, max "
        f"over ranks; vs {ref} = {ref} time / time - 1; AR share = (time - skip time) / time",
        f"# check: logits relative L2 error against {ref} <= {m['tol']:g}; errors and top-1 "
        "agreement are reported for every communicator (cclx-fp8 without a bound)",
        f"# {'mode':<7} {'exec':<5} {'batch':>5} {'ctx/len':>7} | {'comm':<9} {'ms/step':>9} "
        f"{'tok/s':>10} {'vs ' + ref:>8} {'AR share':>8} {'logit err':>9} {'hid err':>8} "
        f"{'top-1':>6} {'check':<5}",
    ]
    return "\n".join(lines)


def _num(v: Optional[float], fmt: str, width: int) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"{'-':>{width}}"
    return f"{v:{fmt}}".rjust(width)


def row_lines(r: Dict[str, Any], names: List[str]) -> str:
    """The table lines of one row: one per communicator, then skip."""
    pos = r.get("context", r.get("tokens"))
    lead = f"  {r['mode']:<7} {r['exec']:<5} {r['batch']:>5} {pos:>7}"
    out = []
    for i, n in enumerate(x for x in names if x in r["results"]):
        d = r["results"][n]
        s = (lead if i == 0 else " " * len(lead)) + f" | {n:<9} {d['ms']:>9.3f} {d['tok_s']:>10.1f}"
        if n == SKIP:
            out.append(s)
            continue
        is_ref = d["check"] == "ref"
        s += " " + (f"{'-':>8}" if is_ref else _num(d["vs_ref_pct"], "+.1f", 7) + "%")
        s += " " + _num(d["ar_share"] * 100.0, ".1f", 7) + "%"
        s += " " + (f"{'-':>9}" if is_ref else _num(d["logits_rel_err"], ".2e", 9))
        s += " " + (f"{'-':>8}" if is_ref else _num(d["hidden_rel_err"], ".1e", 8))
        s += " " + (f"{'-':>6}" if is_ref else _num(d["top1_agree"] * 100.0, ".0f", 5) + "%")
        s += f" {d['check']}"
        out.append(s)
    return "\n".join(out)


def progress(i: int, n: int, label: str, r: Dict[str, Any], row_s: float,
             total_s: float) -> str:
    ms = ", ".join(f"{k} {v['ms']:.3f}" for k, v in r["results"].items())
    return (f"cclx-bench tp: [{i}/{n}] {label}: {ms} ms/step ({row_s:.1f} s, "
            f"{total_s:.0f} s so far)")


def summary(results: List[Dict[str, Any]], names: List[str], ref: str) -> Dict[str, Any]:
    """Geometric-mean speed-up against the reference per communicator and (mode, exec);
    passed = every check passed."""
    fails = [f"{r['mode']} {r['exec']} b{r['batch']} {r.get('context', r.get('tokens'))} {n}"
             for r in results for n, d in r["results"].items() if d.get("check") == "FAIL"]
    out: Dict[str, Any] = {"rows": len(results), "failed": fails,
                           "passed": not fails and bool(results), "speedup_geomean": {}}
    for n in names:
        if n in (ref, SKIP):
            continue
        for key in dict.fromkeys((r["mode"], r["exec"]) for r in results):
            xs = [r["results"][ref]["ms"] / r["results"][n]["ms"] for r in results
                  if (r["mode"], r["exec"]) == key and n in r["results"]]
            if xs:
                g = math.exp(sum(math.log(x) for x in xs) / len(xs))
                out["speedup_geomean"].setdefault(n, {})[" ".join(key)] = g
    out["ref"] = ref
    return out


def summary_line(s: Dict[str, Any]) -> str:
    parts = []
    for n, d in s["speedup_geomean"].items():
        parts.append(n + " " + ", ".join(f"{k} {(v - 1) * 100:+.1f}%" for k, v in d.items()))
    verdict = "PASSED" if s["passed"] else "FAILED (" + "; ".join(s["failed"][:6]) + ")"
    body = "; ".join(parts) if parts else "no communicator besides the reference"
    return f"# cclx-bench tp summary: {s['rows']} rows; vs {s['ref']} (geomean): {body}; {verdict}"


def title(m: Dict[str, Any]) -> str:
    return f"cclx-bench tp: {m['model']}, TP {m['world_size']} ({m['where']})"


def write_json(path: str, args: Any, meta: Dict[str, Any], rows: List[Dict[str, Any]],
               summ: Dict[str, Any]) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    a = {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "shape"}
    with open(path, "w") as f:
        json.dump({"tool": "cclx-bench tp", "args": a, "meta": meta, "results": rows,
                   "summary": summ}, f, indent=1, default=str)


def plot(path: str, rows: List[Dict[str, Any]], names: List[str], ttl: str) -> None:
    """ms per step against batch (decode, one panel per exec and context) and against length
    (prefill); one line per communicator, skip dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(names)}
    panels = list(dict.fromkeys((r["mode"], r["exec"], r.get("context")) for r in rows))
    cols = min(3, len(panels))
    nrow = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrow, cols, figsize=(5.2 * cols, 4 * nrow), squeeze=False)
    for k, (mode, ex, ctx) in enumerate(panels):
        ax = axes[k // cols][k % cols]
        rs = [r for r in rows if (r["mode"], r["exec"], r.get("context")) == (mode, ex, ctx)]
        xkey = "batch" if mode == "decode" else "tokens"
        for n in names:
            pts = [(r[xkey], r["results"][n]["ms"]) for r in rs if n in r["results"]]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=4, label=n,
                        color=colors[n], linestyle="--" if n == SKIP else "-")
        xs = sorted({r[xkey] for r in rs})
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel("batch" if mode == "decode" else "prefill tokens")
        ax.set_ylabel("ms per step")
        ax.set_title(f"decode {ex}, context {ctx}" if mode == "decode" else f"prefill {ex}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for k in range(len(panels), nrow * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(ttl)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
