"""cclx-perf -C allreduce_rmsnorm at world size 1 on one GPU: the fused call (NCCL's allreduce of
one rank + the local norm kernel) and NCCL + torch add + rms_norm, eager and under CUDA graphs,
both checked against float64 (0 wrong elements)."""
import json
import os
import subprocess
import sys

import pytest

try:
    import torch
except ImportError as e:
    pytest.skip(f"torch is not importable ({e})", allow_module_level=True)
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)
import harness  # noqa: E402


@pytest.mark.parametrize("graph", [[], ["-G", "4"]])
def test_perf_allreduce_rmsnorm_ws1(tmp_path, graph):
    j = tmp_path / "r.json"
    env = harness.child_env({"CUDA_VISIBLE_DEVICES":
                             os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0],
                             "NCCL_NVLS_ENABLE": "0"})
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "cclx.perf", "-N", "1", "-C", "allreduce_rmsnorm", "--tokens",
           "1,64,1024", "--hidden", "4096,1000", "-n", "8", "-R", "2", "--json", str(j), *graph]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                       cwd=str(tmp_path))
    assert r.returncode == 0, (r.stdout + r.stderr)[-8000:]
    data = json.loads(j.read_text())
    rows = data["results"]
    assert [(x["hidden"], x["tokens"]) for x in rows] == [(h, t) for h in (4096, 1000)
                                                          for t in (1, 64, 1024)]
    for x in rows:
        for col in ("cclx", "nccl"):
            assert x[col]["wrong"] == 0 and x[col]["time_us"] > 0, (col, x)
        assert "speedup_vs" in x and x["speedup_vs"]["nccl"] > 0
    assert data["summary"]["passed"]
