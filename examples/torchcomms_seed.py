#!/usr/bin/env python3
"""torchcomms' seed example with the cclx backend: new_comm, then an all_reduce whose sums every
rank prints and checks (needs torchcomms and cclx installed).

    torchrun --nproc_per_node 4 examples/torchcomms_seed.py            # CPU
    torchrun --nproc_per_node 4 examples/torchcomms_seed.py --device cuda
"""
import argparse

import torch
from torchcomms import ReduceOp, new_comm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--backend", default="cclx")
    a = ap.parse_args()
    comm = new_comm(a.backend, torch.device(a.device), name="main_comm")
    rank, world = comm.get_rank(), comm.get_size()
    if a.device == "cuda":
        device = torch.device(f"cuda:{rank % torch.cuda.device_count()}")
    else:
        device = torch.device("cpu")
    tensor = torch.full((1024,), float(rank + 1), dtype=torch.float32, device=device)
    print(f"Rank {rank}/{world}: before all_reduce: {tensor[0].item()}")
    comm.all_reduce(tensor, ReduceOp.SUM, async_op=False)
    expected = world * (world + 1) / 2
    got = tensor.cpu()
    assert torch.all(got == expected), f"rank {rank}: got {got[:4]}..., expected {expected}"
    print(f"Rank {rank}/{world}: after all_reduce: {got[0].item()} (expected {expected})")
    comm.finalize()


if __name__ == "__main__":
    main()
