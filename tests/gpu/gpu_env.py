"""Skip logic and the runners shared by the GPU test modules (visible reasons with pytest -rs):
case_suite (2 processes, one GPU each) and shared_suite (world size 1, ranks sharing one GPU,
and a GPU each where there are two)."""
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


def shared_suite(name, timeout=600):
    """Skips the calling module without a GPU; else returns (module fixture running
    tests/gpu/<name> at world size 1 and with 2 and 3 ranks sharing the first GPU, plus 2 ranks
    with a GPU each where there are two; a test parametrized over its cases). Assign them in the
    test module as `results` and a test_* name."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if ngpu < 1:
        pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
    import cclx

    if not cclx._C.has_cuda:
        pytest.skip("cclx was built without CUDA", allow_module_level=True)
    import harness

    path = os.path.join(HERE, name)
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    setups = {"ws1": (1, first), "shared2": (2, first), "shared3": (3, first)}
    if ngpu >= 2:
        setups["own2"] = (2, os.environ.get("CUDA_VISIBLE_DEVICES", ""))

    @pytest.fixture(scope="module", params=sorted(setups))
    def results(request):
        n, visible = setups[request.param]
        env = {"NCCL_NVLS_ENABLE": "0"}
        if visible:
            env["CUDA_VISIBLE_DEVICES"] = visible
        return harness.run(path, n, timeout=timeout, env=env)

    @pytest.mark.parametrize("case", harness.case_names(path))
    def test_case(results, case):
        harness.check(results, case)

    return results, test_case
