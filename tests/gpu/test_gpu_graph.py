"""GPU suite (2 processes, one GPU each): CUDA graphs and async_op."""
import os

import pytest

from gpu_env import require_two_gpus

require_two_gpus()
import harness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(name):
    env = {"CCLX_TEST_PG_PORT": str(harness.free_port()), "NCCL_NVLS_ENABLE": "0"}
    return harness.run(os.path.join(HERE, name), 2, timeout=420, env=env)


@pytest.fixture(scope="module")
def results():
    return _run("cases_gpu_graph.py")


@pytest.mark.parametrize("case", harness.case_names(os.path.join(HERE, "cases_gpu_graph.py")))
def test_gpu_graph(results, case):
    harness.check(results, case)
