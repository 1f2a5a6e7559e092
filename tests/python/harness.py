"""Runs every case of a case module in one set of worker processes and reports per case.

A case module defines setup(ctx) (optional) and functions case_<name>(ctx), called in
definition order on every rank. Each worker writes its results after every case to
<out>/rank<r>.json, so a hang or crash still leaves the earlier results. The pytest side calls
run() once per module (a module fixture) and check() once per case.

CCLX_TEST_RANK_WRAPPER (a command line, shell words) is put before every rank process, e.g.
"compute-sanitizer --tool racecheck --error-exitcode 99 --log-file /tmp/rc_%p.log": a tool
around pytest does not reach the ranks, which run as processes of their own. With a wrapper, a
rank that exits non-zero fails every case of the module (the tool's verdict), naming the exit.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(path: str) -> types.ModuleType:
    name = "cases_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def case_names(path: str) -> List[str]:
    names = [k[5:] for k, v in vars(load(path)).items() if k.startswith("case_") and callable(v)]
    only = os.environ.get("CCLX_TEST_ONLY")
    return [n for n in names if n in only.split(",")] if only else names


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    if env.get("CCLX_EXT_DIR"):
        # Build-tree mode: sources from python/, extension from CCLX_EXT_DIR. Otherwise the
        # installed package is used.
        env["CCLX_EXT_DIR"] = os.path.abspath(env["CCLX_EXT_DIR"])
        py = os.path.join(ROOT, "python")
        env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                  else "")
    # Rank processes share the cores: torch's default of one CPU thread per core in each of
    # them oversubscribes the machine (a 4-rank MoE case on 2 cores took 7.4 s instead of 0.8 s).
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no pool of compile workers per rank
    # A rank that aborts (SIGABRT, SIGSEGV) prints every Python thread's stack first.
    env.setdefault("PYTHONFAULTHANDLER", "1")
    env.update(extra or {})
    return env


def torchcomms_entry_point(tmp: str) -> Dict[str, str]:
    """Child env whose PYTHONPATH holds a distribution in `tmp` that declares cclx's entry points
    as pyproject.toml does: group torchcomms.backends (what torchcomms finds backends by) and
    torch.backends (the torch.distributed backend name "cclx", registered at torch's import), for
    a cclx that runs from the build tree; an installed cclx declares them itself."""
    d = os.path.join(tmp, "cclx_tc_entry-0.0.dist-info")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: cclx-tc-entry\nVersion: 0.0\n")
    with open(os.path.join(d, "entry_points.txt"), "w") as f:
        f.write("[torchcomms.backends]\ncclx = cclx.torchcomms_backend\n\n"
                "[torch.backends]\ncclx = cclx_c10d:register\n")
    path = child_env().get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(p for p in (path, tmp) if p)}


def run(path: str, nranks: int, timeout: float = 240.0,
        env: Optional[Dict[str, str]] = None) -> Dict[str, list]:
    """Runs all cases of `path` on `nranks` processes; returns {case: [per-rank result]}."""
    out = tempfile.mkdtemp(prefix="cclx-test-")
    port = free_port()
    procs = []
    wrap = shlex.split(os.environ.get("CCLX_TEST_RANK_WRAPPER", ""))
    for r in range(nranks):
        e = child_env(env)
        e.update(RANK=str(r), WORLD_SIZE=str(nranks), LOCAL_RANK=str(r),
                 LOCAL_WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        log = open(os.path.join(out, f"rank{r}.log"), "w")
        cmd = wrap + [sys.executable, os.path.abspath(__file__), path, out]
        procs.append((subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT), log))
    # Sanitized builds run several times slower (scripts/sanitize.sh sets the factor).
    deadline = time.time() + timeout * max(1.0, float(os.environ.get("CCLX_TEST_TIME_SCALE", "1")))
    for p, log in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
    only = (env or {}).get("CCLX_TEST_ONLY")
    names = [n for n in case_names(path) if not only or n in only.split(",")]
    results: Dict[str, list] = {n: [None] * nranks for n in names}
    logs = []
    for r, (p, _) in enumerate(procs):
        f = os.path.join(out, f"rank{r}.json")
        data = json.load(open(f)) if os.path.exists(f) else {}
        for n in results:
            results[n][r] = data.get(n)
        with open(os.path.join(out, f"rank{r}.log")) as lf:
            logs.append(f"--- rank {r} (exit {p.returncode}) ---\n" + lf.read()[-4000:])
    results["__logs__"] = logs  # type: ignore[assignment]
    if wrap:  # the wrapper's verdict: a rank's exit code (check() fails every case on non-zero)
        results["__wrapped_exit__"] = [p.returncode for p, _ in procs]  # type: ignore[assignment]
    return results


def check(results: Dict[str, list], case: str) -> None:
    """Fails (AssertionError) unless `case` passed on every rank; skips (pytest) when a rank's
    case returned "skipped: <why>"."""
    per_rank = results[case]
    bad = []
    for r, res in enumerate(per_rank):
        if res is None:
            bad.append(f"rank {r}: no result (worker hung or crashed)")
        elif not res["ok"]:
            bad.append(f"rank {r}: {res['error']}")
    for r, rc in enumerate(results.get("__wrapped_exit__", [])):  # type: ignore[arg-type]
        if rc != 0:
            bad.append(f"rank {r}: exited {rc} under CCLX_TEST_RANK_WRAPPER")
    if bad:
        logs = "\n".join(results.get("__logs__", []))  # type: ignore[arg-type]
        raise AssertionError(f"case {case} failed:\n" + "\n".join(bad) +
                             ("\nworker logs:\n" + logs
                              if any("no result" in b or "exited" in b for b in bad) else ""))
    skips = sorted({res.get("skip", "") for res in per_rank} - {""})
    if skips:  # a case returns "skipped: <why>" where it cannot run here
        import pytest

        pytest.skip("; ".join(skips))


def _worker(path: str, out: str) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # the case module's helpers
    mod = load(path)
    ctx = types.SimpleNamespace(rank=int(os.environ["RANK"]), size=int(os.environ["WORLD_SIZE"]))
    results: Dict[str, dict] = {}
    dest = os.path.join(out, f"rank{ctx.rank}.json")

    def save() -> None:
        tmp = dest + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f)
        os.replace(tmp, dest)

    setup = getattr(mod, "setup", None)
    try:
        if setup:
            setup(ctx)
    except Exception:  # noqa: BLE001 - reported per case below
        err = "setup failed: " + traceback.format_exc()
        for n in case_names(path):
            results[n] = {"ok": False, "error": err}
        save()
        return 1
    for name in case_names(path):
        k, fn = "case_" + name, getattr(mod, "case_" + name)
        t0 = time.time()
        try:
            ret = fn(ctx)
            skip = ret if isinstance(ret, str) and ret.startswith("skipped:") else ""
            results[k[5:]] = {"ok": True, "error": "", "s": time.time() - t0, "skip": skip}
        except (Exception, SystemExit):  # noqa: BLE001 - e.g. an example program's exit(1)
            results[k[5:]] = {"ok": False, "error": traceback.format_exc()[-3000:]}
        save()
        print(f"rank {ctx.rank}: {k} {'ok' if results[k[5:]]['ok'] else 'FAILED'} "
              f"{time.time() - t0:.2f}s", flush=True)
    teardown = getattr(mod, "teardown", None)
    if teardown:
        teardown(ctx)
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1], sys.argv[2]))
