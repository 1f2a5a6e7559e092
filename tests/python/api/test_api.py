"""Communicator life cycle and API cases across 3 processes (one set of workers)."""
import os

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_api.py")


@pytest.fixture(scope="module")
def results():
    return harness.run(CASES, 3)


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_api(results, case):
    harness.check(results, case)
