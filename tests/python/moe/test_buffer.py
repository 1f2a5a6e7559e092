"""cclx.moe.Buffer on CPU processes (cases in cases_buffer.py): the CPU twin of the MoE kernels,
every case at 1, 2, 3 and 4 ranks, the routing cases at 8. Skips without torch."""
import os

import pytest

import harness

pytest.importorskip("torch", reason="cclx.moe needs torch")

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_buffer.py")
NAMES = harness.case_names(CASES)
AT_8 = ["random_bf16_k8", "every_k", "all_tokens_one_expert", "only_rank0_experts",
        "experts_of_a_token_on_one_rank", "uneven_tokens_and_empty_ranks", "expertless_last_rank",
        "ids_out_of_range", "many_calls_changing_routing", "zz_late_rank_fails_naming_it",
        "zz_late_rank_split_fails_naming_it"]


@pytest.fixture(scope="module", params=[1, 2, 3, 4, 8])
def results(request):
    env = {"CCLX_TEST_ONLY": ",".join(AT_8)} if request.param == 8 else None
    return request.param, harness.run(CASES, request.param, timeout=900, env=env)


@pytest.mark.parametrize("case", NAMES)
def test_buffer(results, case):
    n, res = results
    if n == 8 and case not in AT_8:
        pytest.skip("run at 1, 2, 3 and 4 ranks (8 ranks: the routing cases)")
    harness.check(res, case)
