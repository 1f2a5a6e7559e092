"""GPU suite (2 processes, one GPU each): CUDA graphs and async_op."""
from gpu_env import case_suite

results, test_gpu_graph = case_suite("cases_gpu_graph.py")
