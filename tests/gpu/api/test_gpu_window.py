"""One-sided windows with torch CUDA tensors (cases_gpu_window.py) on 2 processes (or at the
sizes of CCLX_TEST_RANKS, gpu_env.world_sizes): rank r on GPU r % count, so on one GPU
every rank shares GPU 0."""
import os

import pytest

import harness
from gpu_env import note_world_size, world_sizes

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_gpu_window.py")


@pytest.fixture(scope="module", params=world_sizes((2,)))
def results(request):
    res = harness.run(CASES, request.param, timeout=480, env={"NCCL_NVLS_ENABLE": "0"})
    res["__world_size__"] = request.param
    return res


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_gpu_window(request, results, case):
    note_world_size(request, results["__world_size__"], results, case)
    harness.check(results, case)
