"""Comm.all_reduce_rmsnorm on GPUs from Python (cases in cases_gpu_rmsnorm.py): world size 1 on
one GPU (NCCL's allreduce + the local norm kernel), 2 and 3 ranks sharing the first GPU (the
fused peer kernels), and 2 ranks with a GPU each where there are two."""
from gpu_env import shared_suite

results, test_gpu_rmsnorm = shared_suite("cases_gpu_rmsnorm.py")
