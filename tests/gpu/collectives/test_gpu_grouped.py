"""GPU suite (2 processes, one GPU each): all_gather_v, reduce_scatter_v, all_to_all, scatter,
gather(_single) and batched point to point through NCCL; hooks on a CUDA comm."""
from gpu_env import case_suite

results, test_gpu_grouped = case_suite("cases_gpu_grouped.py")
