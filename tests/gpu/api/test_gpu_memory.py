"""Communication memory on CUDA comms (cases in cases_gpu_memory.py): world size 1, 2 and 3
ranks sharing the first GPU, and 2 ranks with a GPU each where there are two."""
from gpu_env import shared_suite

results, test_gpu_memory = shared_suite("cases_gpu_memory.py")
