"""GPU suite (2 processes, one GPU each): eager collectives vs references and torch NCCL."""
from gpu_env import case_suite

results, test_gpu = case_suite("cases_gpu.py")
