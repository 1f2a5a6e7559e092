"""all_gather_v, reduce_scatter_v, all_to_all, scatter, gather(_single) and batched point to
point on 4 processes (8 KiB staging slots: batched messages span many channel pieces)."""
import os

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_grouped.py")


@pytest.fixture(scope="module")
def results():
    return harness.run(CASES, 4, env={"CCLX_SHM_CHUNK_BYTES": "8192", "CCLX_ABORT_ON_ERROR": "0"})


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_grouped(results, case):
    harness.check(results, case)
