"""GPU suite (2 processes, one GPU each): eager collectives vs references and torch NCCL."""
import pytest

from gpu_env import case_suite, require_two_gpus

require_two_gpus()
import harness  # noqa: E402

results, CASES = case_suite("cases_gpu.py")


@pytest.mark.parametrize("case", CASES)
def test_gpu(results, case):
    harness.check(results, case)
