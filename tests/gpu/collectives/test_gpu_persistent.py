"""The persistent all-gather on CUDA tensors (cases in cases_gpu_persistent.py): world size 1,
2 and 3 ranks sharing the first GPU, and 2 ranks with a GPU each where there are two."""
from gpu_env import shared_suite

results, test_gpu_persistent = shared_suite("cases_gpu_persistent.py")
