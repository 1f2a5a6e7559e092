"""Comm.all_reduce_rmsnorm on GPUs from Python (cases in cases_gpu_rmsnorm.py): world size 1 on
one GPU (NCCL's allreduce + the local norm kernel), 2 and 3 ranks sharing the first GPU (the
fused peer kernels), and 2 ranks with a GPU each where there are two."""
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
if NGPU < 1:
    pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)
import harness  # noqa: E402

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_gpu_rmsnorm.py")
NAMES = harness.case_names(PATH)
FIRST = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
SETUPS = {"ws1": (1, FIRST), "shared2": (2, FIRST), "shared3": (3, FIRST)}
if NGPU >= 2:
    SETUPS["own2"] = (2, os.environ.get("CUDA_VISIBLE_DEVICES", ""))


@pytest.fixture(scope="module", params=sorted(SETUPS))
def results(request):
    n, visible = SETUPS[request.param]
    env = {"NCCL_NVLS_ENABLE": "0"}
    if visible:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return harness.run(PATH, n, timeout=600, env=env)


@pytest.mark.parametrize("case", NAMES)
def test_gpu_rmsnorm(results, case):
    harness.check(results, case)
