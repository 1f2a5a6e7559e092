"""Hooks, the flight recorder and NaN check hooks, and the communicator settings on 4
processes. Errors are expected here, so the process-abort-on-error default is turned off."""
import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_hooks.py")


@pytest.fixture(scope="module")
def results():
    return harness.run(CASES, 4, env={"CCLX_ABORT_ON_ERROR": "0"})


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_hooks(results, case):
    harness.check(results, case)


def test_flight_recorder_dumps_when_the_process_aborts():
    """abort_process_on_timeout_or_error on: rank 1's barrier times out (rank 0 never joins), the
    library runs the abort hooks (the flight recorder writes its JSON, plain and reason-taking
    hooks run) and the process ends with SIGABRT."""
    out = tempfile.mkdtemp(prefix="cclx-frabort-")
    pattern = os.path.join(out, "fr_rank{rank}.json")
    worker = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "abort_fr_worker.py")
    port = harness.free_port()
    procs = []
    for r in range(2):
        env = harness.child_env({"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": str(port)})
        env.pop("CCLX_ABORT_ON_ERROR", None)
        procs.append(subprocess.Popen([sys.executable, worker, pattern], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[0].returncode == 0, outs[0]
    assert procs[1].returncode == -signal.SIGABRT, outs[1]
    assert "abort hook without arguments ran" in outs[1], outs[1]
    assert "abort hook got:" in outs[1] and "did not arrive" in outs[1], outs[1]
    assert "the barrier returned" not in outs[1]
    with open(pattern.format(rank=1)) as f:
        doc = json.load(f)
    names = [(e["profiling_name"], e["state"]) for e in doc["entries"]]
    assert names == [("cclx:all_reduce", "completed"), ("cclx:barrier", "scheduled")], names
    assert "[0]" in doc["abort_reason"] and "did not arrive" in doc["abort_reason"], doc
    assert doc["entries"][1]["timeout_ms"] == 2000.0
    assert not os.path.exists(pattern.format(rank=0))
