"""GPU suite (2 processes, one GPU each): DDA algorithms and the FP8 hint."""
import pytest

from gpu_env import case_suite, require_two_gpus

require_two_gpus()
import harness  # noqa: E402

results, CASES = case_suite("cases_gpu_dda.py")


@pytest.mark.parametrize("case", CASES)
def test_gpu_dda(results, case):
    harness.check(results, case)
