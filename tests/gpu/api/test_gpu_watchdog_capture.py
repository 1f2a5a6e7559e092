"""The watchdog thread queries the events of eager NCCL operations every ~100 ms: those queries
must neither fail nor invalidate a CUDA graph that the application captures meanwhile on another
thread in global mode (torch.cuda.graph's default). One rank, one GPU, in a fresh process."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)

CHILD = r"""
import time, torch, cclx
comm = cclx.new_comm("cclx", torch.device("cuda"), name="wdcap")
x = torch.randn(1 << 16, device="cuda")
for rep in range(6):
    # eager allreduces on the NCCL path (world size 1): the watchdog holds their events
    for _ in range(20):
        comm.all_reduce(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # global capture mode
        y = x * 2
        time.sleep(0.35)       # the watchdog polls (queries the events) during the capture
        z = y + 1
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(z, x * 2 + 1), rep
    print("CAPTURED", rep, flush=True)
comm.finalize()
"""


def test_watchdog_polls_do_not_break_a_global_capture():
    env = dict(os.environ, CCLX_WATCHDOG="1", RANK="0", WORLD_SIZE="1", NCCL_NVLS_ENABLE="0")
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert r.stdout.count("CAPTURED") == 6, r.stdout
