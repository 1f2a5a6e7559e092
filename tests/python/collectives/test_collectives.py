"""Every collective on numpy arrays across 3 processes (odd world size) and the core subset
on 2 and 4 processes; per-case results from one set of workers per world size."""
import os

import pytest

import harness

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cases_coll.py")
NAMES = harness.case_names(CASES)
QUICK = ["all_reduce_f32", "all_reduce_bf16", "all_reduce_i32", "reduce_scatter_single",
         "all_gather_single", "all_to_all_v_single", "send_recv", "bad_inputs_then_valid"]


@pytest.fixture(scope="module")
def results3():
    return harness.run(CASES, 3)


@pytest.fixture(scope="module")
def results_2_4():
    env = {"CCLX_TEST_ONLY": ",".join(QUICK)}
    return {n: harness.run(CASES, n, env=env) for n in (2, 4)}


@pytest.mark.parametrize("case", NAMES)
def test_3_ranks(results3, case):
    harness.check(results3, case)


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("case", QUICK)
def test_2_and_4_ranks(results_2_4, nranks, case):
    harness.check(results_2_4[nranks], case)
