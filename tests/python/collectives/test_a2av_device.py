"""device_alltoallv_single on CPU comms (cases_a2av_device.py) on 2, 3, 5 and 8 processes
(4 KiB staging slots: the larger calls take many rounds)."""
import os

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_a2av_device.py")
SIZES = (2, 3, 5, 8)


@pytest.fixture(scope="module", params=SIZES, ids=[f"n{n}" for n in SIZES])
def results(request):
    return harness.run(CASES, request.param,
                       env={"CCLX_SHM_CHUNK_BYTES": "4096", "CCLX_ABORT_ON_ERROR": "0"})


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_a2av_device(results, case):
    harness.check(results, case)
