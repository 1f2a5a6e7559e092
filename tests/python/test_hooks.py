"""Hooks, the flight recorder and NaN check hooks, and the communicator settings on 4
processes. Errors are expected here, so the process-abort-on-error default is turned off."""
import os

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_hooks.py")


@pytest.fixture(scope="module")
def results():
    return harness.run(CASES, 4, env={"CCLX_ABORT_ON_ERROR": "0"})


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_hooks(results, case):
    harness.check(results, case)
