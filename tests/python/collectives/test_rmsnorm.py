"""Comm.all_reduce_rmsnorm on 3 CPU processes (odd world size), cases in cases_rmsnorm.py; the
torch cases skip without torch."""
import os

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_rmsnorm.py")
NAMES = harness.case_names(CASES)
try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


@pytest.fixture(scope="module")
def results():
    names = [n for n in NAMES if HAVE_TORCH or not n.startswith("torch")]
    return harness.run(CASES, 3, timeout=600, env={"CCLX_TEST_ONLY": ",".join(names)})


@pytest.mark.parametrize("case", NAMES)
def test_rmsnorm_3_ranks(results, case):
    if case.startswith("torch") and not HAVE_TORCH:
        pytest.skip("needs torch")
    harness.check(results, case)
