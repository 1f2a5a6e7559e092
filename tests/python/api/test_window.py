"""One-sided windows on CPU comms (cases_window.py) at 2 and 3 processes, and the numpy ring at
8 (without torch, whose import dominates the run time of 8 processes on a small machine)."""
import os

import pytest

import harness

pytest.importorskip("torch")
pytest.importorskip("ml_dtypes")  # cases_window.py checks numpy bf16 rings

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_window.py")
NAMES = harness.case_names(CASES)
WIDE = ["ring_numpy_bf16_async"]


@pytest.fixture(scope="module")
def results():
    out = {n: harness.run(CASES, n) for n in (2, 3)}
    out[8] = harness.run(CASES, 8, env={"CCLX_TEST_ONLY": ",".join(WIDE)})
    return out


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("case", NAMES)
def test_window(results, nranks, case):
    harness.check(results[nranks], case)


@pytest.mark.parametrize("case", WIDE)
def test_window_8_ranks(results, case):
    harness.check(results[8], case)
