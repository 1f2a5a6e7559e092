#!/usr/bin/env python3
"""Runs torchcomms' own Python integration suite (comms/torchcomms/tests/integration/py of a
torchcomms source tree) against one backend, file by file, as torchcomms' CI does
(`torchrun --nnodes 1 --nproc_per_node N -m pytest -v -s FILE`), and writes one JSON row per
file: backend, ranks, device, file, result (pass / fail / timeout), pytest's counts, seconds,
and per test (`tests`: id, result passed / failed / errored / skipped, reason: a skip's reason or
a failure's first line) with `summary` counting them. A test's result is its worst rank's
(errored > failed > skipped > passed); a test a rank started and never finished (crash, file
timeout) is errored there. The per-test record comes from bench/tc_suite/tc_suite_plugin.py, loaded into
every rank with `-p`.

    python3 bench/torchcomms_suite.py --tc-src /path/to/torchcomms --backend cclx --ranks 2 \
        --device cpu --out bench/results/DATE-torchcomms-cpu/cclx-2.json [--files A.py,B.py]
        [--jobs 4] [--logs DIR] [--let-through ncclx] [--file-env AllGatherPTest.py:NCCL_CTRAN_ENABLE=true]
        [--tests-dir comms/torchcomms/ncclx/tests/integration/py] [--budget 120] [--tag 'route cxx']

--let-through NAME evaluates torchcomms' backend-name gates as for NAME while the tests run on
--backend (bench/tc_suite/tc_suite_plugin.py lists the gate kinds). --file-env FILE:VAR=VALUE sets VAR
for every rank of FILE (repeatable). bench/tc_suite/table.py turns the JSON into the markdown
table. torchcomms must be importable by the python that runs this (and cclx too for --backend
cclx). `result` stays the file's: pass when pytest exits 0 on every rank (skips count as
passing, as in torchcomms' CI).

--budget SECONDS bounds the whole run: no file starts after it has passed, and a file still
running then is stopped (result timeout, `budget_cut` in its row); files never started have no
row and are listed on the last line. --tag TEXT is recorded in each row (`tag`) and told apart
by bench/tc_suite/table.py (e.g. two cclx runs that differ only in CCLX_TORCHCOMMS_ROUTE).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


LAUNCH_PORT_TAKEN = "EADDRINUSE"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list:
    """pid's process tree (torchrun starts each rank in a session of its own)."""
    kids: dict = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def counts(text: str) -> dict:
    out = {}
    for line in text.splitlines()[::-1]:
        if re.search(r"=+ .*(passed|failed|error|skipped|no tests ran).* in [0-9.]+s", line):
            for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed)", line):
                out[what.rstrip("s") if what.startswith("error") else what] = \
                    out.get(what, 0) + int(n)
            break
    return out


SEVERITY = {"passed": 0, "skipped": 1, "failed": 2, "errored": 3}


def rank_results(path: str) -> dict:
    """One rank's plugin record -> {test id: (result, reason)}."""
    got: dict = {}
    started: list = []
    done: set = set()
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return got
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a line cut short by a killed rank
        ev, tid = r.get("event"), r.get("id", "")
        if ev == "start":
            started.append(tid)
            continue
        if ev == "collect":
            got[tid or "<collection>"] = ("errored", "collection: " + r.get("reason", ""))
            continue
        if ev != "report":
            continue
        out, when = r.get("outcome"), r.get("when")
        if out == "failed":
            res = "failed" if when == "call" else "errored"
        elif out == "skipped":
            res = "skipped"
        else:
            res = "passed"
        old = got.get(tid)  # phases and subtests: the worst decides
        if old is None or SEVERITY[res] > SEVERITY[old[0]]:
            got[tid] = (res, r.get("reason", ""))
        if when == "teardown":
            done.add(tid)
    for tid in started:
        if tid not in done and SEVERITY[got.get(tid, ("passed", ""))[0]] < SEVERITY["errored"]:
            got[tid] = ("errored", "started, never finished (the rank crashed or was killed)")
    return got


def merge_ranks(per_rank: dict) -> list:
    """{rank: {test: (result, reason)}} -> [{id, result, reason[, ranks]}], worst rank's."""
    ids = sorted({t for r in per_rank.values() for t in r})
    out = []
    for tid in ids:
        worst, reason, ranks = "passed", "", []
        for rank in sorted(per_rank):
            res, why = per_rank[rank].get(tid, ("errored", "never started on this rank "
                                                           "(the rank ended before)"))
            if SEVERITY[res] > SEVERITY[worst]:
                worst, reason, ranks = res, why, [rank]
            elif res == worst and worst != "passed":
                ranks.append(rank)
        row = {"id": tid, "result": worst, "reason": reason}
        if worst != "passed" and len(ranks) != len(per_rank):
            row["ranks"] = ranks
        out.append(row)
    return out


def select_files(names, files: str = "", shard: str = "") -> list:
    """The test files to run: `names` ending in Test.py, sorted; those of the comma list `files`
    when given; of those the I-th of N interleaved parts when `shard` is "I/N" (I from 1)."""
    out = sorted(f for f in names if f.endswith("Test.py"))
    if files:
        want = {f.strip() for f in files.split(",") if f.strip()}
        out = [f for f in out if f in want]
    if shard:
        try:
            i, n = (int(v) for v in shard.split("/"))
        except ValueError:
            i, n = 0, 0
        if not 1 <= i <= n:
            raise ValueError(f"--shard {shard!r}: expected I/N with 1 <= I <= N")
        out = out[i - 1::n]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tc-src", required=True, help="torchcomms source tree")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--device", default="cpu", help="TEST_DEVICE (cpu or cuda)")
    ap.add_argument("--files", default="", help="comma list of file names (default: all)")
    ap.add_argument("--shard", default="", metavar="I/N",
                    help="only the I-th of N interleaved parts of the (sorted) files, I from 1: "
                         "a suite too long for one sitting runs as N parts, whose JSON files "
                         "bench/tc_suite/table.py merges")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    ap.add_argument("--jobs", type=int, default=1, help="files run at once (each on its own "
                    "port; ranks of concurrent files share the machine and GPU)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--logs", default="", help="folder for each file's output (optional)")
    ap.add_argument("--commit", default="", help="torchcomms commit, recorded in each row")
    ap.add_argument("--cclx-commit", default="", help="cclx commit, recorded in each row "
                    "(default: this checkout's HEAD, where git can tell)")
    ap.add_argument("--machine", default="", help="device kind, recorded in each row")
    ap.add_argument("--tests-dir", default="comms/torchcomms/tests/integration/py",
                    help="the files' folder in the torchcomms tree (NCCLX's own tests: "
                         "comms/torchcomms/ncclx/tests/integration/py)")
    ap.add_argument("--let-through", default="", metavar="NAME",
                    help="evaluate torchcomms' backend-name gates as for NAME (e.g. ncclx)")
    ap.add_argument("--file-env", action="append", default=[], metavar="FILE:VAR=VALUE",
                    help="set VAR=VALUE for every rank of FILE (repeatable)")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds for the whole run "
                    "(0: none): no file starts after it, running files are stopped at it")
    ap.add_argument("--tag", default="", help="recorded in each row (table.py shows it)")
    a = ap.parse_args()
    file_env: dict = {}
    for spec in a.file_env:
        f, _, kv = spec.partition(":")
        var, eq, val = kv.partition("=")
        if not (f and var and eq):
            ap.error(f"--file-env {spec!r}: expected FILE:VAR=VALUE")
        file_env.setdefault(f, {})[var] = val

    if not a.cclx_commit:
        try:
            a.cclx_commit = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            a.cclx_commit = ""
    try:
        from importlib.metadata import version
        torch_version = version("torch")
    except Exception:  # noqa: BLE001
        torch_version = ""
    d = os.path.join(a.tc_src, a.tests_dir)
    try:
        files = select_files(os.listdir(d), a.files, a.shard)
    except ValueError as e:
        ap.error(str(e))
    env = dict(os.environ, TEST_BACKEND=a.backend, TEST_DEVICE=a.device,
               TEST_FULL_SWEEP=os.environ.get("TEST_FULL_SWEEP", "0"))
    if a.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    plugin_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tc_suite")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (plugin_dir, env.get("PYTHONPATH", "")) if p)
    if a.let_through:
        env["CCLX_SUITE_LET_THROUGH"] = a.let_through
    # The tests import their helpers as torchcomms.tests.integration.helpers, from the installed
    # torchcomms package (its wheel ships them); pytest's append import mode keeps the source
    # tree's comms/ behind it on sys.path.
    if a.logs:
        os.makedirs(a.logs, exist_ok=True)
    rows = []
    not_started: list = []
    lock = threading.Lock()
    t_start = time.monotonic()
    deadline = t_start + a.budget if a.budget > 0 else None

    def run_one(f: str) -> None:
        # A port free when picked can be taken by a concurrent file's sockets before torchrun
        # binds it; such a launch ran no test, so it is tried again on another port.
        for attempt in range(4):
            if deadline is not None and deadline - time.monotonic() < 5:
                if attempt == 0:
                    with lock:
                        not_started.append(f)
                    return
                break  # the retried launch ran no test: record it as it was
            rep = tempfile.mkdtemp(prefix="tcsuite-")
            try:
                rc, result, text, secs, cut = launch(f, rep)
                tests = merge_ranks({r: rank_results(os.path.join(rep, f"rank{r}.jsonl"))
                                     for r in range(a.ranks)})
            finally:
                shutil.rmtree(rep, ignore_errors=True)
            if not (result == "fail" and LAUNCH_PORT_TAKEN in text and not counts(text)):
                break
        record(f, rc, result, text, secs, attempt, tests, cut)

    def launch(f: str, rep: str):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc_per_node", str(a.ranks), "--master_port", str(free_port()),
               "-m", "pytest", "-v", "-s", "-p", "no:cacheprovider", "-p", "tc_suite_plugin",
               os.path.join(d, f)]
        fenv = dict(env, CCLX_SUITE_REPORT_DIR=rep, **file_env.get(f, {}))
        t0 = time.monotonic()
        limit, cut = a.timeout, False
        if deadline is not None and deadline - t0 < limit:
            limit, cut = max(1.0, deadline - t0), True
        p = subprocess.Popen(cmd, env=fenv, cwd=a.tc_src, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            text, _ = p.communicate(timeout=limit)
            cut = False
            rc = p.returncode
            result = "pass" if rc == 0 else "fail"
        except subprocess.TimeoutExpired:
            for q in descendants(p.pid):  # torchrun and its ranks (each its own session)
                try:
                    os.kill(q, signal.SIGKILL)
                except OSError:
                    pass
            text, _ = p.communicate()
            rc, result = None, "timeout"
        return rc, result, text, round(time.monotonic() - t0, 1), cut

    def record(f: str, rc, result: str, text: str, secs: float, retries: int,
               tests: list, cut: bool = False) -> None:
        if a.logs:
            tag = f"-{a.let_through}" if a.let_through else ""
            with open(os.path.join(a.logs, f"{a.backend}{tag}-{a.ranks}-{f}.log"), "w") as fh:
                fh.write(text)
        summary = {k: 0 for k in SEVERITY}
        for t in tests:
            summary[t["result"]] += 1
        row = {"backend": a.backend, "ranks": a.ranks, "device": a.device, "torch": torch_version,
               "file": f,
               "result": result, "rc": rc, "counts": counts(text), "seconds": secs,
               "let_through": a.let_through, "file_env": file_env.get(f, {}),
               "summary": summary, "tests": tests,
               "torchcomms_commit": a.commit, "cclx_commit": a.cclx_commit,
               "machine": a.machine}
        if a.tag:
            row["tag"] = a.tag
        if cut:
            row["budget_cut"] = True
        if retries:
            row["launch_retries"] = retries
        with lock:
            rows.append(row)
            rows.sort(key=lambda r: r["file"])
            print(json.dumps({k: v for k, v in row.items() if k != "tests"}), flush=True)
            os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
            with open(a.out, "w") as fh:
                json.dump(rows, fh, indent=1)

    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        list(pool.map(run_one, files))
    bad = [r["file"] for r in rows if r["result"] != "pass"]
    tot = {k: sum(r["summary"][k] for r in rows) for k in SEVERITY}
    print(f"files: {len(rows) - len(bad)} passed, {len(bad)} failed; tests: "
          + ", ".join(f"{v} {k}" for k, v in tot.items())
          + f"; {round(time.monotonic() - t_start)} s"
          + (f"; not started (budget): {len(not_started)} ({', '.join(sorted(not_started))})"
             if not_started else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
