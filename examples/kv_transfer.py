"""KV-cache transfer with one-sided windows (disaggregated serving, in miniature).

    torchrun --nproc-per-node 2 examples/kv_transfer.py            # GPUs when torch sees them
    torchrun --nproc-per-node 2 examples/kv_transfer.py --device cpu

Ranks pair up: rank 2i is a prefill worker, rank 2i+1 a decode worker. Every rank registers
its paged KV cache (pages x page elements) in one window. For each request the prefill worker
computes the request's pages, puts them straight into free pages of the decode worker's cache
(the decode worker takes no part) and signals; the decode worker waits for the signal, consumes
the pages and signals back that those pages are free again, so the prefill worker never
overwrites pages that are still being read. Every page is checked on arrival.
"""
from __future__ import annotations

import argparse
import sys

import torch

import cclx

PAGES = 16          # pages in each rank's cache
PAGE = 4096         # elements per page
PAGES_PER_REQ = 3   # pages one request's KV takes
REQUESTS = 40


def page_data(req: int, j: int, device) -> torch.Tensor:
    """Page j of request `req`, as the prefill worker computes it (exact in bfloat16)."""
    i = torch.arange(PAGE, device=device, dtype=torch.float32)
    return ((i * 7 + req * 13 + j * 5) % 251 - 125).to(torch.bfloat16)


def slots(req: int) -> list:
    """Cache pages request `req` lands in on the decode side: rotating through the cache, so
    pages are reused once the decode worker has freed them."""
    first = (req * PAGES_PER_REQ) % (PAGES - PAGES % PAGES_PER_REQ)
    return [first + j for j in range(PAGES_PER_REQ)]


def main(argv=None, comm=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = p.parse_args(argv)
    dev = args.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    own = comm is None
    if own:
        comm = cclx.new_comm("cclx", torch.device(dev), name="kv")
    device = comm.get_device()
    rank, size = comm.get_rank(), comm.get_size()
    cache = torch.zeros(PAGES, PAGE, dtype=torch.bfloat16, device=device)
    win = comm.new_window(cache)               # collective: every rank the same shape
    ok = True
    # In flight: how many requests ahead of the decode worker the prefill worker may be.
    depth = (PAGES - PAGES % PAGES_PER_REQ) // PAGES_PER_REQ
    if rank % 2 == 0 and rank + 1 < size:      # prefill
        dst = rank + 1
        for req in range(REQUESTS):
            if req >= depth:
                win.wait_signal(dst)           # the decode worker freed request req - depth
            for j, slot in enumerate(slots(req)):
                win.put(page_data(req, j, device), dst, slot * PAGE, async_op=False)
            win.signal(dst)                    # after every put above is visible on dst
        for _ in range(min(depth, REQUESTS)):  # the last acknowledgements
            win.wait_signal(dst)
    elif rank % 2 == 1:                        # decode
        src = rank - 1
        for req in range(REQUESTS):
            win.wait_signal(src)               # request req's pages are in the cache
            for j, slot in enumerate(slots(req)):
                got = cache[slot]
                if not torch.equal(got, page_data(req, j, device)):
                    print(f"rank {rank}: request {req} page {j} (slot {slot}) is wrong",
                          file=sys.stderr)
                    ok = False
            cache[slots(req)] = 0              # consumed
            win.signal(src)                    # those pages may be written again
    if device.type == "cuda":
        torch.cuda.synchronize()
    win.tensor_deregister()                    # collective
    if own:
        comm.finalize()
    role = "prefill" if rank % 2 == 0 and rank + 1 < size else "decode" if rank % 2 else "idle"
    print(f"rank {rank} ({role}): {REQUESTS} requests {'OK' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
