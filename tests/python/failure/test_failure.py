"""Failure semantics of CPU comms through the Python API (torchcomms'): a rank is SIGKILLed.
With abort_process_on_timeout_or_error=False the survivors' next call raises CclxTimeoutError
naming it (its output NaN) and later calls raise; by default every survivor prints one line
naming the dead rank, runs its abort hooks and ends by SIGABRT within the timeout + 2 s. Nothing
is left in /dev/shm either way."""
import os
import signal
import subprocess
import sys
import time

import pytest

from harness import child_env, free_port

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 3


def shm_entries():
    try:
        return {f for f in os.listdir("/dev/shm") if f.startswith("cclx-")}
    except FileNotFoundError:
        return set()


def launch(mode):
    port = free_port()
    procs = []
    for r in range(N):
        env = child_env({"RANK": str(r), "WORLD_SIZE": str(N), "MASTER_ADDR": "127.0.0.1",
                         "MASTER_PORT": str(port), "FAILURE_MODE": mode})
        if mode == "default":
            env.pop("CCLX_ABORT_ON_ERROR", None)
            env.pop("TORCHCOMM_ABORT_ON_ERROR", None)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "failure_worker.py")],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    ends = [None] * N
    outs = [""] * N
    deadline = time.time() + 60
    while any(e is None for e in ends) and time.time() < deadline:
        for r, p in enumerate(procs):
            if ends[r] is None and p.poll() is not None:
                ends[r] = time.time()
        time.sleep(0.02)
    for r, p in enumerate(procs):
        if p.poll() is None:
            p.kill()
        outs[r] = p.communicate()[0]
    return procs, outs, ends


@pytest.mark.parametrize("mode", ["raise", "default"])
def test_killed_rank(mode):
    before = shm_entries()
    procs, outs, ends = launch(mode)
    log = "\n".join(f"--- rank {r} (rc {p.returncode}) ---\n{o}" for r, (p, o) in
                    enumerate(zip(procs, outs)))
    assert procs[N - 1].returncode == -signal.SIGKILL, log
    died = float(outs[N - 1].split("victim ")[1].split()[0])
    for r in range(N - 1):
        if mode == "raise":
            assert procs[r].returncode == 0, log
            assert f"timeout naming {N - 1}: True nan: True" in outs[r], log
            assert "next call raises" in outs[r], log
        else:
            assert procs[r].returncode == -signal.SIGABRT, log
            assert ends[r] - died <= 2.0 + 2.0, log  # timeout 2 s, + 2 s
            assert "of comm 'failure'" in outs[r] and f"[{N - 1}] did not arrive" in outs[r], log
            assert f"hook ran on rank {r}" in outs[r], log
    assert shm_entries() - before == set(), "left in /dev/shm: %s" % (shm_entries() - before)
