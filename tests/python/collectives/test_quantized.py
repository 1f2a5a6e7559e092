"""Comm.reduce_scatter_quantized on 2..8 CPU processes, cases in cases_quantized.py (the whole
module at 2, 3 and 8 ranks, the model and in-place cases at 4..7)."""
import os

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_quantized.py")
NAMES = harness.case_names(CASES)
CORE = ("matches_model_and_bound", "in_place", "fp8_payload", "bad_arguments_change_nothing",
        "missing_rank_is_named")
SIZES = (2, 3, 4, 5, 6, 7, 8)
_runs = {}


def _names(n):
    return NAMES if n in (2, 3, 8) else [c for c in NAMES if c in CORE]


def _results(n):
    if n not in _runs:
        _runs[n] = harness.run(CASES, n, timeout=600,
                               env={"CCLX_TEST_ONLY": ",".join(_names(n))})
    return _runs[n]


@pytest.mark.parametrize("n,case", [(n, c) for n in SIZES for c in _names(n)])
def test_reduce_scatter_quantized(n, case):
    harness.check(_results(n), case)
