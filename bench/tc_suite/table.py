#!/usr/bin/env python3
"""Markdown tables from bench/torchcomms_suite.py's JSON files: per (torch, ranks), one line per
test file with passed / failed / errored / skipped test counts for the reference backend and for
each cclx run (with and without --let-through), then every test whose result for a cclx run
differs from the reference's, with both reasons. A row's `tag` (torchcomms_suite.py --tag) is
part of its run's name; --across-ranks puts every world size of a (torch, device) in one table
(the run's name then ends in its ranks), so that a reference run at 1 rank is compared with cclx
at 2 and 3.

    python3 bench/tc_suite/table.py bench/results/DIR/*.json --out bench/results/DIR/table.md
"""
from __future__ import annotations

import argparse
import json
import sys

KINDS = ("passed", "failed", "errored", "skipped")
# failures that only say the machine has no GPU (a CPU run of a test that needs CUDA)
NO_GPU = ("CUDA driver version is insufficient", "integer modulo by zero",
          "Expected a cuda device", "No CUDA GPUs", "Torch not compiled with CUDA",
          "CUDA is not available", "Found no NVIDIA driver", "invalid device ordinal")


def needs_gpu(reason: str) -> bool:
    return any(k in (reason or "") for k in NO_GPU)


ACROSS_RANKS = False


def run_name(row: dict) -> str:
    name = row["backend"]
    if row.get("let_through"):
        name += f" (gates as {row['let_through']})"
    if row.get("tag"):
        name += f" [{row['tag']}]"
    if ACROSS_RANKS:
        name += f" @{row['ranks']}"
    return name


def cell(row) -> str:
    if row is None:
        return "-"
    s = row.get("summary", {})
    text = "/".join(str(s.get(k, 0)) for k in KINDS)
    if row.get("result") == "timeout":
        text += " (budget)" if row.get("budget_cut") else " (timeout)"
    return text


def short(reason: str, width: int = 140) -> str:
    reason = " ".join((reason or "").split()).replace("|", "\\|")
    return reason if len(reason) <= width else reason[: width - 3] + "..."


def section(rows: list, ref: str) -> list:
    runs = sorted({run_name(r) for r in rows}, key=lambda n: (n != ref, n))
    if ACROSS_RANKS:  # the reference: the reference backend's run with the fewest ranks
        refs = sorted((r["ranks"], run_name(r)) for r in rows if r["backend"] == ref)
        ref = refs[0][1] if refs else ref
        runs = sorted(runs, key=lambda n: (n != ref, n))
    by = {(run_name(r), r["file"]): r for r in rows}
    files = sorted({r["file"] for r in rows})
    out = ["| file | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for f in files:
        out.append(f"| {f} | " + " | ".join(cell(by.get((n, f))) for n in runs) + " |")
    tot = []
    for n in runs:
        s = {k: sum(r.get("summary", {}).get(k, 0) for r in rows if run_name(r) == n)
             for k in KINDS}
        tot.append("/".join(str(s[k]) for k in KINDS))
    out.append("| **all** | " + " | ".join(f"**{t}**" for t in tot) + " |")
    out.append("")
    for n in runs:
        if n == ref or ref not in runs:  # no reference run: counts only
            continue
        diffs, no_gpu = [], 0
        for f in files:
            a, b = by.get((ref, f)), by.get((n, f))
            if a is None or b is None:
                continue
            ta = {t["id"]: t for t in a.get("tests", [])}
            tb = {t["id"]: t for t in b.get("tests", [])}
            for tid in sorted(set(ta) | set(tb)):
                x, y = ta.get(tid), tb.get(tid)
                rx = x["result"] if x else "not run"
                ry = y["result"] if y else "not run"
                if rx == ry:  # the same result (a reason's wording may differ)
                    continue
                name = tid.split("::", 1)[1] if "::" in tid else tid
                why = short((y or {}).get("reason", ""))
                rwhy = short((x or {}).get("reason", ""))
                gpu = ry in ("failed", "errored") and needs_gpu((y or {}).get("reason", ""))
                no_gpu += gpu
                diffs.append(f"| {f} | {name} | {rx}" + (f": {rwhy}" if rwhy else "")
                             + f" | {ry}" + (" (needs a GPU)" if gpu else "")
                             + (f": {why}" if why else "") + " |")
        out.append(f"Tests where **{n}** differs from {ref} ({len(diffs)}, of which {no_gpu} "
                   "fail only for want of a GPU):")
        out.append("")
        if diffs:
            out += [f"| file | test | {ref} | {n} |", "|---|---|---|---|"] + diffs
        else:
            out.append("(none)")
        out.append("")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", help="torchcomms_suite.py output files")
    ap.add_argument("--ref", default="", help="reference backend (default: the non-cclx one)")
    ap.add_argument("--out", default="", help="markdown file to write (default: stdout)")
    ap.add_argument("--across-ranks", action="store_true",
                    help="one table per (torch, device) with every world size in it")
    a = ap.parse_args()
    global ACROSS_RANKS
    ACROSS_RANKS = a.across_ranks
    rows = []
    for p in a.json:
        with open(p) as fh:
            rows += json.load(fh)
    groups: dict = {}
    for r in rows:
        groups.setdefault((r.get("torch", ""), 0 if a.across_ranks else r["ranks"], r["device"]),
                          []).append(r)
    out = ["Counts are tests passed/failed/errored/skipped (a test's result is its worst rank's).", ""]
    for (torch_v, ranks, device) in sorted(groups):
        g = groups[(torch_v, ranks, device)]
        ref = a.ref or next((r["backend"] for r in g if r["backend"] != "cclx"), "")
        out.append(f"### torch {torch_v or '?'}, {device}, "
                   + ("every world size" if a.across_ranks else f"{ranks} ranks"))
        out.append("")
        out += section(g, ref)
    text = "\n".join(out).rstrip() + "\n"
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
