"""examples/hello_torch.py under torchrun with 2 processes, and cclx-perf on 2 GPUs."""
import json
import os
import subprocess
import sys

from gpu_env import require_two_gpus

require_two_gpus()
import harness  # noqa: E402


def test_hello_torch_torchrun():
    ex = os.path.join(harness.ROOT, "examples", "hello_torch.py")
    env = harness.child_env({"NCCL_NVLS_ENABLE": "0"})
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", str(harness.free_port()), ex], env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "I am rank 0 of 2!" in out and "I am rank 1 of 2!" in out
    assert out.count(": OK") == 2, out[-4000:]


def test_perf_gpu_quick(tmp_path):
    j = tmp_path / "p.json"
    env = harness.child_env({"NCCL_NVLS_ENABLE": "0"})
    r = subprocess.run([sys.executable, "-m", "cclx.perf", "-C", "all", "-b", "1K", "-e", "1M",
                        "-f", "32", "-n", "5", "-w", "2", "-R", "2", "--json", str(j)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    data = json.loads(j.read_text())
    assert data["summary"]["passed"] and all("nccl" in row for row in data["results"])
    r = subprocess.run([sys.executable, "-m", "cclx.perf", "-b", "1K", "-e", "64K", "-f", "8",
                        "-G", "5", "-n", "10", "-w", "2", "-R", "2"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
