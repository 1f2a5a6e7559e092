"""A CUDA rank that fails during creation (a device that does not exist) makes the other rank
fail at once with its message (2 ranks: skipped where CCLX_TEST_RANKS leaves 2 out); the
CPU twin is tests/python/failure/test_rendezvous.py."""
import json
import os
import subprocess
import sys
import time

import pytest


def _need_one_gpu():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        pytest.skip("needs a CUDA GPU", allow_module_level=True)
    import cclx

    if not cclx._C.has_cuda:
        pytest.skip("cclx was built without CUDA", allow_module_level=True)


_need_one_gpu()
import harness  # noqa: E402
from gpu_env import note_world_size, require_world_size  # noqa: E402


def test_bad_cuda_device_fails_the_other_rank_at_once(request):
    require_world_size(2)
    note_world_size(request, 2)
    worker = os.path.join(harness.HERE, "rdv_worker.py")
    port = harness.free_port()
    procs = []
    for r in range(2):
        env = harness.child_env({"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": str(port), "NCCL_NVLS_ENABLE": "0",
                                 "RDV_KW": '{"timeout": 120}',
                                 "RDV_DEVICE": "cuda:0" if r == 0 else "cuda:99"})
        procs.append(subprocess.Popen([sys.executable, worker], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    t0 = time.monotonic()
    res = {}
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=180)
        lines = [json.loads(x[7:]) for x in out.splitlines() if x.startswith("RESULT ")]
        assert lines, out
        res[r] = lines[0]
    assert time.monotonic() - t0 < 60, res  # not the 120 s timeout
    assert not res[1]["ok"] and "99" in res[1]["msg"], res
    assert not res[0]["ok"] and res[0]["msg"].startswith("rank 1 failed: "), res
    assert res[1]["msg"] in res[0]["msg"], res
