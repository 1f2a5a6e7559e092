"""cclx.moe on a GPU (cases in cases_gpu_moe.py): world size 1, 2 and 3 ranks sharing the first
GPU, 2 ranks with a GPU each where there are two. The cases that need a host-sync-free exchange
(no_host_sync, cuda_graph_changing_routing) skip, saying so, while cclx.Comm has no
device_alltoallv_single (the workers then return from them at once)."""
import os

import pytest

import harness
from gpu_env import note_world_size, shared_suite

results, _ = shared_suite("moe/cases_gpu_moe.py")
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases_gpu_moe.py")
NEEDS_DEVICE_A2AV = ("no_host_sync", "cuda_graph_changing_routing")


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_gpu_moe(request, results, case):
    import cclx

    note_world_size(request, results["__world_size__"], results, case)
    if case in NEEDS_DEVICE_A2AV and not hasattr(cclx.Comm, "device_alltoallv_single"):
        pytest.skip("cclx.Comm has no device_alltoallv_single: the exchange reads split sizes "
                    "on the host (host syncs, no graph capture)")
    harness.check(results, case)
