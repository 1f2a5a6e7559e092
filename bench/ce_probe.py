"""Link probe: how long the copy engines take to move the FP8 bytes of a 64 MiB bf16 allreduce
(33 MiB: codes and block scales) from GPU 0 to GPU 1, alone and with the reverse copy running at
the same time. A floor for any FP8 allreduce of that size on 2 ranks, whatever moves the bytes.
Usage (2 GPUs with P2P): python3 bench/ce_probe.py"""
import statistics

import torch

N = 33 << 20


def main() -> None:
    assert torch.cuda.device_count() >= 2 and torch.cuda.can_device_access_peer(0, 1)
    a0, b0 = (torch.empty(N, dtype=torch.uint8, device="cuda:0") for _ in range(2))
    a1, b1 = (torch.empty(N, dtype=torch.uint8, device="cuda:1") for _ in range(2))
    s0, s1 = torch.cuda.Stream(device=0), torch.cuda.Stream(device=1)

    def run(both: bool, iters: int = 20) -> None:
        ts = []
        for it in range(iters + 3):
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            with torch.cuda.stream(s0):
                ev[0].record(s0)
                b1.copy_(a0, non_blocking=True)
                ev[1].record(s0)
            if both:
                with torch.cuda.stream(s1):
                    ev[2].record(s1)
                    b0.copy_(a1, non_blocking=True)
                    ev[3].record(s1)
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            if it >= 3:
                t = ev[0].elapsed_time(ev[1])
                if both:
                    t = max(t, ev[2].elapsed_time(ev[3]))
                ts.append(t * 1000)
        m = statistics.median(ts)
        print(f"{'both directions' if both else 'one direction'}: {N / 1e6:.1f} MB in {m:.1f} us "
              f"= {N / m / 1e3:.0f} GB/s per direction")

    run(False)
    run(True)


if __name__ == "__main__":
    main()
