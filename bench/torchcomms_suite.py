#!/usr/bin/env python3
"""Runs torchcomms' own Python integration suite (comms/torchcomms/tests/integration/py of a
torchcomms source tree) against one backend, file by file, as torchcomms' CI does
(`torchrun --nnodes 1 --nproc_per_node N -m pytest -v -s FILE`), and writes one JSON row per
file: backend, ranks, device, file, result (pass / fail / timeout), pytest's counts, seconds.

    python3 bench/torchcomms_suite.py --tc-src /path/to/torchcomms --backend cclx --ranks 2 \
        --device cpu --out bench/results/DATE-torchcomms-cpu/cclx-2.json [--files A.py,B.py]
        [--jobs 4] [--logs DIR] [--tests-dir comms/torchcomms/ncclx/tests/integration/py]

torchcomms must be importable by the python that runs this (and cclx too for --backend cclx).
A file passes when pytest exits 0 on every rank (skipped tests count as passing, as in
torchcomms' CI).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tc-src", required=True, help="torchcomms source tree")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--device", default="cpu", help="TEST_DEVICE (cpu or cuda)")
    ap.add_argument("--files", default="", help="comma list of file names (default: all)")
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
    a = ap.parse_args()

    if not a.cclx_commit:
        try:
            a.cclx_commit = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            a.cclx_commit = ""
    d = os.path.join(a.tc_src, a.tests_dir)
    files = sorted(f for f in os.listdir(d) if f.endswith("Test.py"))
    if a.files:
        want = {f.strip() for f in a.files.split(",") if f.strip()}
        files = [f for f in files if f in want]
    env = dict(os.environ, TEST_BACKEND=a.backend, TEST_DEVICE=a.device,
               TEST_FULL_SWEEP=os.environ.get("TEST_FULL_SWEEP", "0"))
    if a.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    # The tests import their helpers as torchcomms.tests.integration.helpers, from the installed
    # torchcomms package (its wheel ships them); pytest's append import mode keeps the source
    # tree's comms/ behind it on sys.path.
    if a.logs:
        os.makedirs(a.logs, exist_ok=True)
    rows = []
    lock = threading.Lock()

    def run_one(f: str) -> None:
        # A port free when picked can be taken by a concurrent file's sockets before torchrun
        # binds it; such a launch ran no test, so it is tried again on another port.
        for attempt in range(4):
            rc, result, text, secs = launch(f)
            if not (result == "fail" and LAUNCH_PORT_TAKEN in text and not counts(text)):
                break
        record(f, rc, result, text, secs, attempt)

    def launch(f: str):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc_per_node", str(a.ranks), "--master_port", str(free_port()),
               "-m", "pytest", "-v", "-s", "-p", "no:cacheprovider", os.path.join(d, f)]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, cwd=a.tc_src, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            text, _ = p.communicate(timeout=a.timeout)
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
        return rc, result, text, round(time.monotonic() - t0, 1)

    def record(f: str, rc, result: str, text: str, secs: float, retries: int) -> None:
        if a.logs:
            with open(os.path.join(a.logs, f"{a.backend}-{a.ranks}-{f}.log"), "w") as fh:
                fh.write(text)
        row = {"backend": a.backend, "ranks": a.ranks, "device": a.device, "file": f,
               "result": result, "rc": rc, "counts": counts(text), "seconds": secs,
               "torchcomms_commit": a.commit, "cclx_commit": a.cclx_commit,
               "machine": a.machine}
        if retries:
            row["launch_retries"] = retries
        with lock:
            rows.append(row)
            rows.sort(key=lambda r: r["file"])
            print(json.dumps(row), flush=True)
            os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
            with open(a.out, "w") as fh:
                json.dump(rows, fh, indent=1)

    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        list(pool.map(run_one, files))
    bad = [r["file"] for r in rows if r["result"] != "pass"]
    print(f"{len(rows) - len(bad)} passed, {len(bad)} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
