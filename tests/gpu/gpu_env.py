"""Skip logic shared by the GPU test modules (visible reasons with pytest -rs)."""
import pytest


def require_two_gpus():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        pytest.skip(f"needs 2 CUDA GPUs, found {n}", allow_module_level=True)
    import cclx

    if not cclx._C.has_cuda:
        pytest.skip("cclx was built without CUDA", allow_module_level=True)
    return torch
