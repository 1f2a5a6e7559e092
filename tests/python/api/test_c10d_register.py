"""cclx_c10d's device list for torch.distributed's backend "cclx" (python/cclx_c10d): torch makes
one comm, on the first device listed, for a backend that names itself for every device, so
"cuda" comes first where a GPU may be visible (cclx's CUDA comm takes CPU tensors too) and only
"cpu" is listed where none can be. Needs neither torch nor torchcomms."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import cclx_c10d  # noqa: E402


def test_cuda_first_where_a_gpu_may_be_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(cclx_c10d.os.path, "exists", lambda p: p == "/dev/nvidiactl")
    assert cclx_c10d._devices() == ["cuda", "cpu"]


def test_cpu_only_without_gpus(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(cclx_c10d.os.path, "exists", lambda p: False)
    assert cclx_c10d._devices() == ["cpu"]
    monkeypatch.setattr(cclx_c10d.os.path, "exists", lambda p: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cclx_c10d._devices() == ["cpu"]
