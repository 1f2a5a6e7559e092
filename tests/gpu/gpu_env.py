"""Skip logic and the runners shared by the GPU test modules (visible reasons with pytest -rs):
case_suite (2 processes, one GPU each) and shared_suite (world size 1, ranks sharing one GPU,
and a GPU each where there are two).

World sizes: a module whose ranks share a GPU runs at its own list of world sizes, or at those of
CCLX_TEST_RANKS when that is set (world_sizes(); the variable that gives the C++ GPU suites their
world size, here also a list: "2 3 4 8", commas work too); scripts/gpu_verify.py runs each such
module once per world size that way. A test fixed at one
world size skips, saying so, where CCLX_TEST_RANKS leaves that size out
(require_world_size()). Each test notes its world size in the JUnit XML (property world_size)."""
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def world_sizes(default):
    """The world sizes to run at: CCLX_TEST_RANKS when set, else `default`."""
    v = os.environ.get("CCLX_TEST_RANKS", "").replace(",", " ").split()
    return sorted({int(x) for x in v}) if v else list(default)


def require_world_size(n):
    """Skips a test that runs at exactly `n` ranks where CCLX_TEST_RANKS leaves n out."""
    if n not in world_sizes([n]):
        pytest.skip(f"runs at {n} ranks only; CCLX_TEST_RANKS="
                    f"{os.environ.get('CCLX_TEST_RANKS')}")


def note_world_size(request, n, results=None, case=None):
    """Records `n` as the test's world size and, given the runner's `results`, the case's own
    seconds on its slowest rank (properties of its JUnit XML entry: the module's ranks run every
    case in one launch, so pytest's time of the first case holds the launch)."""
    request.node.user_properties.append(("world_size", n))
    per_rank = (results or {}).get(case) or []
    secs = [r["s"] for r in per_rank if isinstance(r, dict) and "s" in r]
    if secs:
        request.node.user_properties.append(("case_seconds", round(max(secs), 3)))


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
    def test_case(request, results, case):
        note_world_size(request, 2, results, case)
        harness.check(results, case)

    return results, test_case


def shared_suite(name, timeout=600):
    """Skips the calling module without a GPU; else returns (module fixture running
    tests/gpu/<name> at world size 1 and with 2 and 3 ranks sharing the first GPU (or at the
    sizes of CCLX_TEST_RANKS, 1 meaning world size 1), plus 2 ranks with a GPU each where
    there are two; a test parametrized over its cases). Assign them in the test module as
    `results` and a test_* name. results["__world_size__"] is the fixture's world size."""
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
    sizes = world_sizes((1, 2, 3))
    setups = {("ws1" if n == 1 else f"shared{n}"): (n, first) for n in sizes}
    if ngpu >= 2 and 2 in sizes:
        setups["own2"] = (2, os.environ.get("CUDA_VISIBLE_DEVICES", ""))

    @pytest.fixture(scope="module", params=sorted(setups))
    def results(request):
        n, visible = setups[request.param]
        env = {"NCCL_NVLS_ENABLE": "0"}
        if visible:
            env["CUDA_VISIBLE_DEVICES"] = visible
        res = harness.run(path, n, timeout=timeout, env=env)
        res["__world_size__"] = n  # type: ignore[assignment]
        return res

    @pytest.mark.parametrize("case", harness.case_names(path))
    def test_case(request, results, case):
        note_world_size(request, results["__world_size__"], results, case)
        harness.check(results, case)

    return results, test_case
