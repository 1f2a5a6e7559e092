"""A tensor-parallel MLP under torch.distributed: the first linear layer split by output columns
(column-parallel), the second by input rows (row-parallel), one all_reduce to sum the partial
outputs; forward and backward checked against the same MLP on one rank.

Runs with every rank on ONE GPU through the cclx NCCL drop-in (NCCL alone refuses ranks that
share a GPU):

    cclx-nccl run -- torchrun --nproc-per-node 4 examples/tp_mlp.py

and unchanged on one GPU per rank (`torchrun --nproc-per-node 4 examples/tp_mlp.py`). With
`--cpu` it runs on CPU tensors over gloo (the same check, no GPU).
"""
import os
import sys

import torch
import torch.distributed as dist

HIDDEN, FFN, TOKENS = 256, 1024, 37


class AllReduceSum(torch.autograd.Function):
    """Sum of the partial outputs across ranks; its gradient is the incoming gradient itself."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


class CopyToRanks(torch.autograd.Function):
    """The replicated input of a column-parallel layer; its gradient is summed across ranks."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g)
        return g


def main():
    if "--cpu" in sys.argv[1:]:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        dev = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert FFN % world == 0, f"the FFN width {FFN} must divide by the world size {world}"
    per = FFN // world

    # The full model and input, the same on every rank (one seed).
    g = torch.Generator().manual_seed(1234)
    w1 = (torch.randn(FFN, HIDDEN, generator=g) / HIDDEN ** 0.5).to(dev)
    b1 = (torch.randn(FFN, generator=g) * 0.1).to(dev)
    w2 = (torch.randn(HIDDEN, FFN, generator=g) / FFN ** 0.5).to(dev)
    b2 = (torch.randn(HIDDEN, generator=g) * 0.1).to(dev)
    x = torch.randn(TOKENS, HIDDEN, generator=g).to(dev)

    # This rank's shards: rows of w1 / b1 (output columns of layer 1), columns of w2 (its inputs).
    s = slice(rank * per, (rank + 1) * per)
    w1s = w1[s].clone().requires_grad_()
    b1s = b1[s].clone().requires_grad_()
    w2s = w2[:, s].clone().requires_grad_()
    b2r = b2.clone().requires_grad_()  # replicated: added once, after the sum
    xt = x.clone().requires_grad_()

    h = torch.nn.functional.gelu(CopyToRanks.apply(xt) @ w1s.t() + b1s)  # column-parallel
    y = AllReduceSum.apply(h @ w2s.t()) + b2r                            # row-parallel
    y.pow(2).sum().backward()

    # The same MLP on one rank.
    w1r, b1r, w2r, b2s, xr = (t.clone().requires_grad_() for t in (w1, b1, w2, b2, x))
    yr = torch.nn.functional.gelu(xr @ w1r.t() + b1r) @ w2r.t() + b2s
    yr.pow(2).sum().backward()

    checks = {
        "output": (y, yr),
        "grad input": (xt.grad, xr.grad),
        "grad w1 shard": (w1s.grad, w1r.grad[s]),
        "grad w2 shard": (w2s.grad, w2r.grad[:, s]),
        "grad b2": (b2r.grad, b2s.grad),
    }
    worst = {k: float((a.detach() - b.detach()).abs().max() / b.detach().abs().max().clamp_min(1e-12))
             for k, (a, b) in checks.items()}
    ok = all(v < 1e-4 for v in worst.values())  # float32: the sums run in another order
    print(f"tp_mlp rank {rank} of {world} on {dev}: largest relative difference to one rank "
          f"{max(worst.values()):.2e} ({', '.join(f'{k} {v:.1e}' for k, v in worst.items())}): "
          f"{'OK' if ok else 'WRONG'}", flush=True)
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
