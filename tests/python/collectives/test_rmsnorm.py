"""Comm.all_reduce_rmsnorm on 3 CPU processes (odd world size), cases in cases_rmsnorm.py; the
torch cases skip without torch, numpy bf16 without ml_dtypes."""
import importlib.util
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
HAVE_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None


def _missing(name):
    """The package `name` needs and this interpreter lacks, or None."""
    if name.startswith("torch") and not HAVE_TORCH:
        return "torch"
    if name.startswith("numpy") and "bf16" in name and not HAVE_ML_DTYPES:
        return "ml_dtypes"
    return None


@pytest.fixture(scope="module")
def results():
    names = [n for n in NAMES if _missing(n) is None]
    return harness.run(CASES, 3, timeout=600, env={"CCLX_TEST_ONLY": ",".join(names)})


@pytest.mark.parametrize("case", NAMES)
def test_rmsnorm_3_ranks(results, case):
    if _missing(case):
        pytest.skip(f"needs {_missing(case)}")
    harness.check(results, case)
