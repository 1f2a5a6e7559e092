"""Failure semantics of CUDA comms through the Python API, 4 ranks (or each size of
CCLX_TEST_RANKS, gpu_env.world_sizes) sharing the GPUs present (one GPU suffices): the last
rank is SIGKILLed. With abort_process_on_timeout_or_error=False the failed op's
output is NaN after torch.cuda.synchronize(), its Work.is_completed() raises naming the dead rank
and the next call raises; by default the watchdog ends every survivor by SIGABRT, also when the
failed collective is a CUDA-graph replay that no API call observes. After set_timeout() on a comm
created with a longer timeout, the errors name the timeout the call ran with."""
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
TIMEOUT = 3.0


def _require_gpu():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        pytest.skip("needs a CUDA GPU", allow_module_level=True)
    import cclx

    if not cclx._C.has_cuda:
        pytest.skip("cclx was built without CUDA", allow_module_level=True)


_require_gpu()
from gpu_env import note_world_size, world_sizes  # noqa: E402
from harness import child_env, free_port  # noqa: E402


def launch(mode, n):
    port = free_port()
    procs = []
    for r in range(n):
        env = child_env({"RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_RANK": str(r),
                         "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                         "MASTER_PORT": str(port), "FAILURE_MODE": mode,
                         "FAILURE_TIMEOUT": str(TIMEOUT), "NCCL_NVLS_ENABLE": "0"})
        if mode not in ("raise", "set_timeout"):
            env.pop("CCLX_ABORT_ON_ERROR", None)
            env.pop("TORCHCOMM_ABORT_ON_ERROR", None)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "failure_gpu_worker.py")],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    ends = [None] * n
    deadline = time.time() + 180
    while any(e is None for e in ends) and time.time() < deadline:
        for r, p in enumerate(procs):
            if ends[r] is None and p.poll() is not None:
                ends[r] = time.time()
        time.sleep(0.02)
    outs = []
    for p in procs:
        if p.poll() is None:
            p.kill()
        outs.append(p.communicate()[0])
    return procs, outs, ends


@pytest.mark.parametrize("ranks", world_sizes((4,)))
@pytest.mark.parametrize("mode", ["raise", "default", "graph", "set_timeout"])
def test_gpu_killed_rank(request, mode, ranks):
    N = ranks  # noqa: N806
    note_world_size(request, N)
    procs, outs, ends = launch(mode, N)
    log = "\n".join(f"--- rank {r} (rc {p.returncode}) ---\n{o[-3000:]}" for r, (p, o) in
                    enumerate(zip(procs, outs)))
    assert procs[N - 1].returncode == -signal.SIGKILL, log
    died = float(outs[N - 1].split("victim ")[1].split()[0])
    for r in range(N - 1):
        if mode in ("raise", "set_timeout"):
            assert procs[r].returncode == 0, log
            assert "nan after synchronize: True" in outs[r], log
            assert f"is_completed raises naming {N - 1}: True" in outs[r], log
            assert "next call raises" in outs[r], log
            if mode == "set_timeout":  # the timeout the call ran with, not the creation's 60 s
                msg = outs[r].split("message: ", 1)[1].splitlines()[0]
                assert f"after {int(TIMEOUT * 1000)} ms" in msg and "60000" not in msg, log
        else:
            assert procs[r].returncode == -signal.SIGABRT, log
            # The kernel waits TIMEOUT from its start; the watchdog polls every 100 ms; the
            # shared GPU adds scheduling delay.
            assert ends[r] - died <= TIMEOUT + 4.0, log
            assert f"waiting for rank(s) {N - 1}" in outs[r], log
            assert f"hook ran on rank {r}" in outs[r], log
