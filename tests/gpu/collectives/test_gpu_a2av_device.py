"""GPU suite: device_alltoallv_single (cases_gpu_a2av_device.py) at world size 1 (a local kernel),
with 2, 3, 5 and 8 ranks sharing the first GPU (the peer-memory kernel; or the sizes of
CCLX_TEST_RANKS, gpu_env.world_sizes) and 2 ranks with a GPU each where there are two."""
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
from gpu_env import note_world_size, world_sizes  # noqa: E402

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_gpu_a2av_device.py")
FIRST = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
SIZES = world_sizes((1, 2, 3, 5, 8))
SETUPS = {("ws1" if n == 1 else f"shared{n}"): (n, FIRST) for n in SIZES}
if NGPU >= 2 and 2 in SIZES:
    SETUPS["own2"] = (2, os.environ.get("CUDA_VISIBLE_DEVICES", ""))


@pytest.fixture(scope="module", params=sorted(SETUPS))
def results(request):
    n, visible = SETUPS[request.param]
    env = {"NCCL_NVLS_ENABLE": "0", "CCLX_ABORT_ON_ERROR": "0"}
    if visible:
        env["CUDA_VISIBLE_DEVICES"] = visible
    res = harness.run(PATH, n, timeout=600, env=env)
    res["__world_size__"] = n
    return res


@pytest.mark.parametrize("case", harness.case_names(PATH))
def test_gpu_a2av_device(request, results, case):
    note_world_size(request, results["__world_size__"], results, case)
    harness.check(results, case)
