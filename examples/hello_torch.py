"""Hello world on GPUs with torch tensors.

    torchrun --nproc-per-node 2 examples/hello_torch.py
"""
import torch

import cclx

comm = cclx.new_comm("cclx", torch.device("cuda"), name="my_comm")
print(f"I am rank {comm.get_rank()} of {comm.get_size()}!")
# torch.full names its fill argument fill_value (value= raises a TypeError).
t = torch.full((10, 20), fill_value=comm.get_rank(), dtype=torch.float, device="cuda")
comm.allreduce(t, cclx.ReduceOp.SUM, async_op=False)
size = comm.get_size()
expected = size * (size - 1) / 2
ok = bool((t == expected).all().item())
print(f"rank {comm.get_rank()}: sum {t[0, 0].item()} expected {expected}: "
      f"{'OK' if ok else 'WRONG'}")
comm.finalize()
if not ok:
    raise SystemExit(1)
