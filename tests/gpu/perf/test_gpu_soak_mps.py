"""Ranks sharing the GPU under MPS, through an MPS daemon of this module's own (its own pipe
directory, so no other process becomes its client; stopped at the end): a soak of 3000 mixed
calls at 3 ranks with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 has no wrong element and no
warning, and ranks without a limit are warned, naming the setting to use (core/sharing/mps.h:
without one a rank's kernel can hold the SMs a waiting peer needs)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)
if not shutil.which("nvidia-cuda-mps-control"):
    pytest.skip("nvidia-cuda-mps-control is not installed", allow_module_level=True)

SOAK = os.path.join(harness.ROOT, "bench", "soak.py")


@pytest.fixture(scope="module")
def mps(tmp_path_factory):
    d = tmp_path_factory.mktemp("mps")
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=str(d / "pipe"),
               CUDA_MPS_LOG_DIRECTORY=str(d / "log"))
    os.makedirs(env["CUDA_MPS_PIPE_DIRECTORY"])
    os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"])
    r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"the MPS daemon did not start: {r.stdout}{r.stderr}")
    yield env
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, text=True, timeout=60)


def soak(mps, tmp_path, ranks, calls, percent, *args):
    env = dict(harness.child_env(), CUDA_MPS_PIPE_DIRECTORY=mps["CUDA_MPS_PIPE_DIRECTORY"],
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    env.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
    if percent is not None:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(percent)
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, SOAK, "--ranks", str(ranks), "--device", "cuda",
                        "--calls", str(calls), "--json", str(out), *args], env=env,
                       capture_output=True, text=True, timeout=400)
    return r, (json.load(open(out)) if out.exists() else {})


def test_soak_under_mps_with_an_even_share(mps, tmp_path):
    r, res = soak(mps, tmp_path, 3, 3000, 33, "--seed", "5", "--max-bytes", "16M")
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0 and res.get("ok") and res.get("complete"), log
    assert res["calls"] >= 3000 and res["wrong_elements"] == 0 and res["errors"] == 0, res
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in r.stderr, log


def test_ranks_without_a_limit_are_warned(mps, tmp_path):
    # One call: enough to make the comm (the warning comes from its setup); a short timeout in
    # case that call is the one whose kernels starve each other.
    r, _ = soak(mps, tmp_path, 2, 1, None, "--seed", "5", "--max-bytes", "4K", "--timeout", "10")
    assert "2 ranks share GPU" in r.stderr and "under MPS" in r.stderr, r.stderr[-3000:]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to at most 50 (100 / 2)" in r.stderr, r.stderr[-3000:]
