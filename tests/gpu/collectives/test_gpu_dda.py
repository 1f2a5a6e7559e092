"""GPU suite (2 processes, one GPU each): DDA algorithms and the FP8 hint."""
from gpu_env import case_suite

results, test_gpu_dda = case_suite("cases_gpu_dda.py")
