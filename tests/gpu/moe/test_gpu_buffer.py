"""cclx.moe.Buffer on a GPU (cases in cases_gpu_buffer.py): world sizes 1, 2, 3, 4 and 8 with the
ranks sharing the first GPU (CCLX_TEST_RANKS, e.g. "2 3" or "2,3", picks others: gpu_env), plus
one rank per GPU where there are several. Skips, saying why, without a GPU or a CUDA build."""
import os

import pytest

import harness
from gpu_env import note_world_size, world_sizes

torch = pytest.importorskip("torch", reason="torch is not installed")
NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
if NGPU < 1:
    pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_gpu_buffer.py")
FIRST = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
SIZES = world_sizes((1, 2, 3, 4, 8))
SETUPS = {f"shared{n}": (n, FIRST) for n in SIZES}
if NGPU >= 2 and min(NGPU, 8) in SIZES:
    SETUPS[f"own{min(NGPU, 8)}"] = (min(NGPU, 8), os.environ.get("CUDA_VISIBLE_DEVICES", ""))


@pytest.fixture(scope="module", params=sorted(SETUPS))
def results(request):
    n, visible = SETUPS[request.param]
    env = {"NCCL_NVLS_ENABLE": "0"}
    if visible:
        env["CUDA_VISIBLE_DEVICES"] = visible
    res = harness.run(CASES, n, timeout=1200, env=env)
    res["__world_size__"] = n  # type: ignore[assignment]
    return res


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_gpu_buffer(request, results, case):
    note_world_size(request, results["__world_size__"], results, case)
    harness.check(results, case)
