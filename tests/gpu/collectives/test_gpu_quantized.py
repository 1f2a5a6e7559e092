"""GPU suite: reduce_scatter_quantized at world size 1, 2 and 3 ranks sharing one GPU, and 2 ranks
with a GPU each where there are two (cases in tests/gpu/cases_gpu_quantized.py)."""
from gpu_env import shared_suite

results, test_gpu_quantized = shared_suite("cases_gpu_quantized.py")
