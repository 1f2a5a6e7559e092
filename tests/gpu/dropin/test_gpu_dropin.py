"""The cclx NCCL drop-in under torch.distributed at world size 1 on one GPU: `cclx-nccl run`
with and without init_process_group(device_id=...), no error lines at exit."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)
import harness  # noqa: E402
from cclx import dropin  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("mode", ["plain", "device_id"])
def test_torch_world1_on_dropin(mode):
    env = harness.child_env({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(harness.free_port()),
                             "CCLX_DEBUG": "INFO", "NCCL_NVLS_ENABLE": "0"})
    cmd = [sys.executable, "-m", "cclx.dropin", "run", "--", sys.executable,
           os.path.join(HERE, "dropin_torch1.py"), mode]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "DROPIN1 OK" in r.stdout, out[-4000:]
    assert "NCCL drop-in: real NCCL" in out, out[-4000:]  # the drop-in loaded the real library
    bad = [ln for ln in out.splitlines()
           if ("error" in ln.lower() or " WARN " in ln) and "CCLX INFO" not in ln]
    assert not bad, "error lines:\n" + "\n".join(bad[:20])


def test_cli_path_and_help():
    lib = dropin.library_path()
    assert os.path.isfile(lib)
    r = subprocess.run([sys.executable, "-m", "cclx.dropin", "--path"], env=harness.child_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == lib
