"""One-sided windows with torch CUDA tensors (cases_gpu_window.py) on 2 processes: one GPU each
when there are two, else both sharing GPU 0."""
import os

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_gpu_window.py")


@pytest.fixture(scope="module")
def results():
    return harness.run(CASES, 2, timeout=480, env={"NCCL_NVLS_ENABLE": "0"})


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_gpu_window(results, case):
    harness.check(results, case)
