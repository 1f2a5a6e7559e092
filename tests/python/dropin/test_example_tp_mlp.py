"""examples/tp_mlp.py on CPU tensors over gloo (--cpu): the tensor-parallel MLP's forward and
backward equal the one-rank MLP's. (Its GPU run, every rank on one GPU through the NCCL drop-in,
is tests/gpu/dropin/test_gpu_dropin_shared.py.)"""
import os
import subprocess
import sys

import pytest

import harness

pytest.importorskip("torch.distributed.run", reason="torch is not installed")


def test_tp_mlp_on_cpu():
    ex = os.path.join(harness.ROOT, "examples", "tp_mlp.py")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", str(harness.free_port()), ex, "--cpu"],
                       env=harness.child_env(), capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert out.count(": OK") == 2, out[-4000:]
