"""Skip logic and the 2-process runner shared by the GPU test modules (visible reasons with
pytest -rs)."""
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def require_two_gpus():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        pytest.skip(f"needs 2 CUDA GPUs, found {n}", allow_module_level=True)
    import cclx

    if not cclx._C.has_cuda:
        pytest.skip("cclx was built without CUDA", allow_module_level=True)
    return torch


def case_suite(name):
    """Skips the calling module without 2 GPUs; else returns (module fixture running
    tests/gpu/<name> on 2 processes, one GPU each; a test parametrized over its cases). Assign
    them in the test module as `results` and a test_* name."""
    require_two_gpus()
    import harness

    path = os.path.join(HERE, name)

    @pytest.fixture(scope="module")
    def results():
        env = {"CCLX_TEST_PG_PORT": str(harness.free_port()), "NCCL_NVLS_ENABLE": "0"}
        return harness.run(path, 2, timeout=420, env=env)

    @pytest.mark.parametrize("case", harness.case_names(path))
    def test_case(results, case):
        harness.check(results, case)

    return results, test_case
