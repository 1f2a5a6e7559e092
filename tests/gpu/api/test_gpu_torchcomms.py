"""cclx's C++ torchcomms backend on CUDA, 2 and 3 ranks sharing the GPU (or CCLX_TEST_RANKS)
(cases_gpu_torchcomms.py beside this file; its windows: cases_gpu_torchcomms_window.py). Skipped, saying
why, without a GPU, torchcomms or libcclx_torchcomms.so; the CPU twin is
tests/python/api/test_torchcomms_cxx.py."""
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
pytest.importorskip("torchcomms", reason="torchcomms is not installed")
import harness  # noqa: E402
from gpu_env import note_world_size, world_sizes  # noqa: E402

import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases_gpu_torchcomms.py")
WINDOW_CASES = os.path.join(HERE, "cases_gpu_torchcomms_window.py")
LIB = os.path.join(os.path.dirname(os.path.abspath(cclx._C.__file__)), "libcclx_torchcomms.so")


def _run(cases, ranks, tmp_path_factory):
    if not os.path.isfile(LIB):
        pytest.skip(f"{LIB} was not built (configure with CCLX_TORCHCOMMS_SRC)")
    env = harness.torchcomms_entry_point(str(tmp_path_factory.mktemp("tc_entry")))
    env.update(CCLX_ABORT_ON_ERROR="0", CCLX_TORCHCOMMS_ROUTE="cxx", NCCL_NVLS_ENABLE="0")
    res = harness.run(cases, ranks, env=env)
    res["__world_size__"] = ranks
    return res


@pytest.fixture(scope="module", params=world_sizes((2, 3)))
def results(request, tmp_path_factory):
    return _run(CASES, request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=world_sizes((2, 3)))
def window_results(request, tmp_path_factory):
    return _run(WINDOW_CASES, request.param, tmp_path_factory)


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_gpu_torchcomms(request, results, case):
    note_world_size(request, results["__world_size__"], results, case)
    harness.check(results, case)


@pytest.mark.parametrize("case", harness.case_names(WINDOW_CASES))
def test_gpu_torchcomms_window(request, window_results, case):
    note_world_size(request, window_results["__world_size__"], window_results, case)
    harness.check(window_results, case)
