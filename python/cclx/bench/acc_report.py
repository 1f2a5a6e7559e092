"""Table, JSON and plot of cclx-bench accuracy."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

THRESHOLD = 0.003  # "within 0.3% of exact"


def verdict(r: Dict[str, Any]) -> Dict[str, bool]:
    """Which metrics of a row stay within THRESHOLD of the one-process model."""
    lo = 1.0 - THRESHOLD
    if r["model"] == "encoder":
        return {"cos": r["cos_min"] >= lo, "nn": r["nn_agree"] >= lo,
                "spearman": r["spearman"] >= lo}
    return {"ppl": abs(r["ppl_rel"]) <= THRESHOLD, "greedy": r["greedy_agree"] >= lo,
            "accuracy": abs(r.get("top1_change", 0.0)) <= THRESHOLD}


def _bytes(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def _msg(r: Dict[str, Any]) -> str:
    short = {"allreduce": "AR", "reduce-scatter": "RS", "all-gather": "AG", "all-to-all": "A2A"}
    return " ".join(f"{short[k]} {_bytes(v)}" for k, v in sorted(r["bytes"].items()))


def table(model: str, rows: List[Dict[str, Any]]) -> str:
    if model == "encoder":
        head = ("| TP | variant | block | largest message per kind | cos mean | cos worst | "
                "NN agree | Spearman | within 0.3% |\n|---|---|---|---|---|---|---|---|---|")
    else:
        head = ("| TP | variant | block | largest message per kind | perplexity | ppl change | "
                "greedy agree | accuracy | within 0.3% |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        v = verdict(r)
        ok = "yes" if all(v.values()) else "no (" + ", ".join(k for k, x in v.items()
                                                              if not x) + ")"
        b = "-" if r["block"] is None else str(r["block"])
        if model == "encoder":
            lines.append(f"| {r['tp']} | {r['variant']} | {b} | {_msg(r)} | "
                         f"{r['cos_mean']:.6f} | {r['cos_min']:.6f} | {r['nn_agree']:.3f} | "
                         f"{r['spearman']:.5f} | {ok} |")
        else:
            lines.append(f"| {r['tp']} | {r['variant']} | {b} | {_msg(r)} | {r['ppl']:.4f} | "
                         f"{100 * r['ppl_rel']:+.3f}% | {r['greedy_agree']:.4f} | "
                         f"{r['top1_acc']:.4f} | {ok} |")
    return "\n".join(lines)


def _cell(r: Dict[str, Any]) -> str:
    if r["model"] == "encoder":
        d = 1e4 * max(0.0, 1 - r["cos_mean"])
        return f"{d:.1f} / {r['nn_agree']:.3f} / {r['spearman']:.4f}"
    return (f"{100 * r['ppl_rel']:+.3f}% / {r['greedy_agree']:.3f} / "
            f"{100 * r.get('top1_change', 0.0):+.2f}")


def summary(model: str, rows: List[Dict[str, Any]]) -> str:
    """Variant x TP degree at the default block, then FP8 variant x block per TP degree."""
    what = ("1e4 x (1 - mean cosine) / NN agreement / Spearman" if model == "encoder"
            else "perplexity change / greedy agreement / next-character accuracy change in "
                 "points")
    tps = sorted({r["tp"] for r in rows})
    out = [f"{model}, block 128 (cells: {what})", "",
           "| variant | " + " | ".join(f"TP {t}" for t in tps) + " |",
           "|---" * (len(tps) + 1) + "|"]
    at = {(r["variant"], r["tp"]): r for r in rows if r["block"] in (None, 128)}
    for v in dict.fromkeys(r["variant"] for r in rows if r["block"] in (None, 128)):
        out.append(f"| {v} | " + " | ".join(_cell(at[(v, t)]) if (v, t) in at else "-"
                                             for t in tps) + " |")
    blocks = sorted({r["block"] for r in rows if r["block"] is not None})
    sw = {(r["variant"], r["tp"], r["block"]): r for r in rows if r["block"] is not None}
    keys = [k for k in dict.fromkeys((r["variant"], r["tp"]) for r in rows
                                     if r["block"] is not None)
            if sum((k[0], k[1], b) in sw for b in blocks) > 1]
    if keys:
        out += ["", f"{model}, FP8 by block size (cells as above)", "",
                "| variant | TP | " + " | ".join(f"B = {b}" for b in blocks) + " |",
                "|---" * (len(blocks) + 2) + "|"]
        for v, t in keys:
            out.append(f"| {v} | {t} | " + " | ".join(
                _cell(sw[(v, t, b)]) if (v, t, b) in sw else "-" for b in blocks) + " |")
    return "\n".join(out)


def text(meta: Dict[str, Any], results: Dict[str, Any]) -> str:
    out = [f"# cclx-bench accuracy ({meta['machine']}, commit {meta['commit']}, "
           f"{meta['seconds']:.0f} s)", ""]
    for m, info in results.items():
        facts = {k: v for k, v in info.items() if k != "rows"}
        out += [f"## {m}", "", "`" + json.dumps(facts, default=str) + "`", "",
                summary(m, info["rows"]), "", table(m, info["rows"]), ""]
    return "\n".join(out)


def plot(path: str, results: Dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    if "encoder" in results:
        panels += [("encoder", "1 - mean cosine", lambda r: 1 - r["cos_mean"], "tp"),
                   ("encoder", "1 - mean cosine (fp8, by block)", lambda r: 1 - r["cos_mean"],
                    "block")]
    if "decoder" in results:
        panels += [("decoder", "|perplexity change|", lambda r: abs(r["ppl_rel"]), "tp"),
                   ("decoder", "1 - greedy agreement", lambda r: 1 - r["greedy_agree"], "tp")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (m, ttl, f, x) in zip(axes[0], panels):
        rows = [r for r in results[m]["rows"] if r["mode"] != "exact"]
        if x == "tp":
            rows = [r for r in rows if r["block"] in (None, 128)]
            keys = list(dict.fromkeys(r["variant"] for r in rows))
            for k in keys:
                pts = sorted((r["tp"], max(f(r), 1e-7)) for r in rows if r["variant"] == k)
                ax.plot(*zip(*pts), marker="o", ms=3, label=k,
                        linestyle="--" if k.startswith("cast") else
                        (":" if k.startswith("bf16") else "-"))
            ax.set_xlabel("TP degree")
        else:
            rows = [r for r in rows if r["mode"] == "fp8"]
            keys = list(dict.fromkeys((r["variant"], r["tp"]) for r in rows))
            for k in keys:
                pts = sorted((r["block"], max(f(r), 1e-7)) for r in rows
                             if (r["variant"], r["tp"]) == k)
                if len(pts) > 1:
                    ax.plot(*zip(*pts), marker="o", ms=3, label=f"{k[0]} TP {k[1]}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("CCLX_FP8_BLOCK_SIZE")
        ax.axhline(0.003, color="k", lw=0.8, ls=":")
        ax.set_yscale("log")
        ax.set_title(f"{m}: {ttl}", fontsize=9)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: str, meta: Dict[str, Any], results: Dict[str, Any]) -> str:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "accuracy.json"), "w") as f:
        json.dump({**meta, "results": results}, f, indent=1, default=str)
    t = text(meta, results)
    with open(os.path.join(out, "accuracy.md"), "w") as f:
        f.write(t + "\n")
    try:
        plot(os.path.join(out, "accuracy.png"), results)
    except ImportError:
        print("cclx-bench accuracy: matplotlib is missing, no plot", flush=True)
    return t
