#!/usr/bin/env python3
"""Soak of cclx: N randomly mixed calls on one comm of --ranks processes, every result checked
against a reference each rank computes itself (bench/soak_ref.py), optionally with a rank made
late beyond the comm's timeout every ~K calls (the comm is then recreated and the soak goes on).

    python3 bench/soak.py --ranks 4 --device cpu --calls 100000
    python3 bench/soak.py --ranks 4 --device cpu --calls 100000 --late-every 10000 --json r.json
    python3 bench/soak.py --ranks 5 --device cuda --calls 100000      # ranks sharing GPU 0

A run too long for one sitting goes in segments: --max-seconds stops every rank at one item,
whose index the result gives as next_item; --start-item resumes the same schedule there, and
--combine adds the segments' results up (checking that they join and match; --mixed-commits
lets segments of different commits join, each named).

The script starts its ranks itself (subprocesses meeting at a TCP store on a free port). Exit
status 0 only when no element was wrong, no unexpected error happened and every late event gave
every rank an error. bench/README.md ("Soak") describes the mix and the checks.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=100000)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--late-every", type=int, default=0, metavar="K",
                   help="one rank sleeps beyond the timeout every ~K calls (0: never)")
    p.add_argument("--timeout", type=float, default=0.0,
                   help="the comms' call timeout in seconds (default: 2 with --late-every "
                        "on cpu, 5 on cuda, else 300)")
    p.add_argument("--max-bytes", type=str, default="64M",
                   help="largest buffer of a call (K/M/G suffix; default 64M)")
    p.add_argument("--json", type=str, default=None, help="write the results here")
    p.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop (all ranks at the same call) after about this long (0: never)")
    p.add_argument("--summarize", metavar="DIR", default=None,
                   help="report a run that was cut short from its ranks' last snapshots (DIR "
                        "holds rank<r>.json, written every --progress seconds); with --commit")
    p.add_argument("--commit", default=None, help="with --summarize: the commit the ranks ran")
    p.add_argument("--start-item", type=int, default=0, metavar="S",
                   help="begin at item S of the schedule (a run split into segments: the next "
                        "segment starts at the item the last one stopped at, its next_item)")
    p.add_argument("--stop-item", type=int, default=None, metavar="E",
                   help="stop (every rank) at item E: a segment of a fixed length")
    p.add_argument("--combine", nargs="+", metavar="JSON", default=None,
                   help="report the segments of one run (JSON files of --start-item runs, in "
                        "order) as one result; with --json")
    p.add_argument("--mixed-commits", action="store_true",
                   help="with --combine: accept segments that ran different commits (each "
                        "segment's commit is kept in the result)")
    p.add_argument("--_worker", nargs=2, metavar=("RANK", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.max_bytes_n = _size(a.max_bytes)
    if not a.timeout:
        a.timeout = (2.0 if a.device == "cpu" else 5.0) if a.late_every else 300.0
    return a


def _size(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


# ----------------------------------------------------------------------------- launcher
def launch(a) -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tempfile.mkdtemp(prefix="cclx-soak-")  # per-rank results
    env = dict(os.environ)
    if env.get("CCLX_EXT_DIR"):  # build tree: sources from python/, extension from there
        env["CCLX_EXT_DIR"] = os.path.abspath(env["CCLX_EXT_DIR"])
        env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.update(CCLX_ABORT_ON_ERROR="0", WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(a.ranks),
               CCLX_JOB_ID=f"soak-{os.getpid()}")
    argv = [a for a in sys.argv[1:]]
    procs = []
    commit = git_commit()  # of the code the ranks run
    t0 = time.time()
    for r in range(a.ranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv,
                                       "--_worker", str(r), out], env=e))
    rcs = [p.wait() for p in procs]
    wall = time.time() - t0
    per = []
    for r in range(a.ranks):
        f = os.path.join(out, f"rank{r}.json")
        per.append(json.load(open(f)) if os.path.exists(f) else None)
    res = summarize(a, per, rcs, wall)
    res["commit"] = commit
    print(table(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {a.json}")
    return 0 if res["ok"] and res["complete"] else 1


def git_commit() -> str:
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                           text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return c + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def summarize(a, per, rcs, wall) -> dict:
    ok_ranks = [p for p in per if p]
    r0 = ok_ranks[0] if ok_ranks else {}
    kinds: dict = {}
    for p in ok_ranks:
        for k, (n, w, t) in p["kinds"].items():
            e = kinds.setdefault(k, [0, 0, 0.0])
            e[0] = max(e[0], n)
            e[1] += w
            e[2] = max(e[2], t)
    late = r0.get("late_events", 0)
    res = {
        "commit": "", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": socket.gethostname(), "cpus": os.cpu_count(),
        "config": {"ranks": a.ranks, "device": a.device, "calls": a.calls, "seed": a.seed,
                   "late_every": a.late_every, "timeout_s": a.timeout,
                   "max_bytes": a.max_bytes_n, "max_seconds": a.max_seconds,
                   "start_item": a.start_item},
        "next_item": r0.get("next_item", 0),
        "stopped_early": bool(r0.get("stopped_early")),
        "exit_codes": rcs,
        "calls": r0.get("calls", 0),
        "calls_scheduled": r0.get("sched_calls", 0),
        "wrong_elements": sum(p["wrong"] for p in ok_ranks),
        "errors": sum(p["errors"] for p in ok_ranks),
        "error_messages": [m for p in ok_ranks for m in p["error_msgs"]][:20],
        "late_events": late,
        "late_errors_seen": sum(p["late_errors"] for p in ok_ranks),
        "late_errors_naming_rank": sum(p["late_named"] for p in ok_ranks),
        "late_seen_on_next_call": sum(p["late_next"] for p in ok_ranks),
        "late_unseen": sum(p["late_unseen"] for p in ok_ranks),
        "late_messages": [m for p in ok_ranks for m in p["late_msgs"]][:8],
        "comms_created": r0.get("gens", 0),
        "calls_ge_1MiB": r0.get("big", 0), "odd_count_calls": r0.get("odd", 0),
        "bytes_moved_per_rank": r0.get("bytes", 0),
        "time_s": round(wall, 1),
        "loop_time_s": round(max((p["time"] for p in ok_ranks), default=0.0), 1),
        "kinds": {k: {"calls": v[0], "wrong": v[1], "s": round(v[2], 1)}
                  for k, v in sorted(kinds.items())},
    }
    res["calls_per_s"] = round(res["calls"] / res["loop_time_s"], 1) if res["loop_time_s"] else 0
    res["complete"] = (len(ok_ranks) == a.ranks and all(rc == 0 for rc in rcs)
                       and (res["calls_scheduled"] >= a.calls or res["stopped_early"]))
    # a rank that reported nothing (it crashed or never started) or a run of no calls is no
    # evidence of anything: not OK, whatever the other counters say
    res["ok"] = (len(ok_ranks) == a.ranks and res["calls"] > 0
                 and res["wrong_elements"] == 0 and res["errors"] == 0
                 and res["late_unseen"] == 0
                 and res["late_errors_seen"] + res["late_seen_on_next_call"] == late * a.ranks)
    return res


_SUMMED = ("calls", "wrong_elements", "errors", "late_events", "late_errors_seen",
           "late_errors_naming_rank", "late_seen_on_next_call", "late_unseen", "comms_created",
           "calls_ge_1MiB", "odd_count_calls", "bytes_moved_per_rank", "time_s", "loop_time_s")


def combine(paths, mixed_commits: bool = False) -> dict:
    """One result from the segments of a run: each must start at the item the one before stopped
    at, with the same configuration (but for the start and the time limit) and commit; with
    mixed_commits the commits may differ, and the result's commit lists them in order."""
    segs = [json.load(open(p)) for p in paths]
    same = lambda c: {k: v for k, v in c.items() if k not in ("start_item", "max_seconds")}
    first = segs[0]
    if first["config"].get("start_item", 0) != 0:
        raise SystemExit(f"{paths[0]}: the first segment starts at item "
                         f"{first['config']['start_item']}, not 0")
    for prev, (p, s) in zip(segs, zip(paths[1:], segs[1:])):
        if same(s["config"]) != same(first["config"]):
            raise SystemExit(f"{p}: another configuration than {paths[0]}")
        if s["commit"] != first["commit"] and not mixed_commits:
            raise SystemExit(f"{p}: commit {s['commit']}, {paths[0]} ran {first['commit']} "
                             "(--mixed-commits accepts that)")
        if s["config"]["start_item"] != prev["next_item"]:
            raise SystemExit(f"{p}: starts at item {s['config']['start_item']}, the segment "
                             f"before stopped at {prev['next_item']}")
        if not prev["stopped_early"]:
            raise SystemExit(f"{p}: the segment before it ran to the end")
    res = dict(segs[-1])
    for k in _SUMMED:
        res[k] = sum(s.get(k, 0) for s in segs)
    res["time_s"] = round(res["time_s"], 1)
    res["loop_time_s"] = round(res["loop_time_s"], 1)
    kinds: dict = {}
    for s in segs:
        for k, v in s["kinds"].items():
            e = kinds.setdefault(k, {"calls": 0, "wrong": 0, "s": 0.0})
            e["calls"] += v["calls"]
            e["wrong"] += v["wrong"]
            e["s"] = round(e["s"] + v["s"], 1)
    res["kinds"] = dict(sorted(kinds.items()))
    res["error_messages"] = [m for s in segs for m in s["error_messages"]][:20]
    res["late_messages"] = [m for s in segs for m in s["late_messages"]][:8]
    res["exit_codes"] = [s["exit_codes"] for s in segs]
    res["config"] = dict(first["config"], max_seconds=[s["config"]["max_seconds"] for s in segs])
    commits = list(dict.fromkeys(s["commit"] for s in segs))
    res["commit"] = commits[0] if len(commits) == 1 else " + ".join(commits)
    res["segments"] = [{"file": os.path.basename(p), "commit": s["commit"],
                        "start_item": s["config"]["start_item"],
                        "next_item": s["next_item"], "calls": s["calls"], "time_s": s["time_s"],
                        "date": s["date"]} for p, s in zip(paths, segs)]
    res["calls_per_s"] = round(res["calls"] / res["loop_time_s"], 1) if res["loop_time_s"] else 0
    res["ok"] = all(s["ok"] for s in segs)
    res["complete"] = all(s["complete"] for s in segs) and not segs[-1]["stopped_early"]
    return res


def table(res) -> str:
    c = res["config"]
    lines = [f"soak: {c['ranks']} ranks, {c['device']}, seed {c['seed']}, late every "
             f"{c['late_every'] or '-'}, timeout {c['timeout_s']} s, max {c['max_bytes']} B",
             f"{'kind':<34}{'calls':>9}{'wrong':>7}{'s':>9}"]
    for k, v in res["kinds"].items():
        lines.append(f"{k:<34}{v['calls']:>9}{v['wrong']:>7}{v['s']:>9.1f}")
    lines.append(f"calls {res['calls']} ({res['calls_per_s']}/s, {res['loop_time_s']} s), "
                 f"wrong elements {res['wrong_elements']}, errors {res['errors']}, late events "
                 f"{res['late_events']} (errors seen {res['late_errors_seen']}, naming the rank "
                 f"{res['late_errors_naming_rank']}, on the next call "
                 f"{res['late_seen_on_next_call']}, unseen {res['late_unseen']}), comms "
                 f"{res['comms_created']}, calls >= 1 MiB {res['calls_ge_1MiB']}: "
                 f"{'OK' if res['ok'] else 'FAILED'}"
                 f"{'' if res['complete'] else ' (incomplete: stopped or a rank did not finish)'}")
    for m in res["late_messages"][:4]:
        lines.append("  late: " + m)
    for m in res["error_messages"]:
        lines.append("  error: " + m)
    return "\n".join(lines)


if __name__ == "__main__":
    args = parse()
    if args.combine:
        out = combine(args.combine, args.mixed_commits)
        print(table(out))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        sys.exit(0 if out["ok"] and out["complete"] else 1)
    if args.summarize:  # a run cut short: its ranks' last snapshots
        snaps = [os.path.join(args.summarize, f"rank{r}.json") for r in range(args.ranks)]
        per = [json.load(open(f)) if os.path.exists(f) else None for f in snaps]
        t = max((p["time"] for p in per if p), default=0.0)
        res = summarize(args, per, [None] * args.ranks, t)
        res["commit"] = args.commit or "unknown"
        res["from_snapshots"] = "the run was stopped; counts from each rank's last snapshot"
        print(table(res))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        sys.exit(0)
    if args._worker:
        from soak_worker import worker

        sys.exit(worker(args, int(args._worker[0]), args._worker[1]))
    sys.exit(launch(args))
