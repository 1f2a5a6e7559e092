"""Latency floor of the peer kernels on the GPUs (run with torchrun, one process per GPU).

Times, in CUDA-graph replay of K back-to-back ops: an empty kernel (the graph-launch floor), the
peer barrier kernel (one cross-GPU flag round trip: what any flag-barrier allreduce pays at least
once), and the flat allreduce of 1 KiB and 64 KiB bf16 (LL packets: data and flag in one store, no
barrier). Prints one line per measurement from rank 0.

    torchrun --nproc-per-node 2 bench/floor.py
"""
import torch

import cclx

K, REPS = 20, 50


def time_graph(fn) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(K):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(REPS):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / (REPS * K))
    return sorted(times)[len(times) // 2]


def main() -> None:
    comm = cclx.new_comm("cclx", torch.device("cuda"), name="floor")
    rank = comm.get_rank()
    x = torch.zeros(1, device="cuda")
    rows = [("empty kernel (graph-launch floor)", lambda: x.add_(0))]
    rows.append(("peer barrier kernel", lambda: comm.barrier()))
    for n in (512, 32768):
        t = torch.randn(n, device="cuda").to(torch.bfloat16)
        rows.append((f"flat allreduce {n * 2 // 1024} KiB bf16",
                     lambda t=t: comm.all_reduce(t, cclx.ReduceOp.SUM, hints={"algo": "flat"})))
    for name, fn in rows:
        try:
            us = time_graph(fn)
        except Exception as e:  # report and go on: one failing row must not hide the others
            print(f"[floor] rank {rank} {name}: FAILED {type(e).__name__}: {e}")
            continue
        if rank == 0:
            print(f"[floor] {name}: {us:.2f} us per op ({comm.get_size()} ranks, graph of {K})")
    comm.finalize()


if __name__ == "__main__":
    main()
