"""Cost of the watchdog on the eager path: 10^4 eager 1 KiB allreduces on a CUDA comm of one rank
(the NCCL path, which the watchdog also tracks with start/end events), with the watchdog
(CCLX_WATCHDOG=1, the default) and without (0), in alternating fresh processes, each timing
its calls in batches; prints and writes (--json) the host time per call of every batch, the
medians and their ratio, the ratio of the medians of the processes' best batches and that of the
fastest processes (less sensitive to a shared host's noise, which comes in whole processes).

    python bench/watchdog_overhead.py [--calls 10000] [--batches 10] [--reps 5] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import time, torch, cclx
comm = cclx.new_comm("cclx", torch.device("cuda"), name="wd")
x = torch.ones(256, device="cuda")
for _ in range(200):
    comm.all_reduce(x)
torch.cuda.synchronize()
n, batches = int(%d), int(%d)
per = max(1, n // batches)
for _ in range(batches):
    t0 = time.perf_counter()
    for _ in range(per):
        comm.all_reduce(x)
    torch.cuda.synchronize()
    print("US_PER_CALL", (time.perf_counter() - t0) / per * 1e6)
comm.finalize()
"""


def one(on: bool, calls: int, batches: int) -> list:
    """Microseconds per call of each batch of one fresh process."""
    env = dict(os.environ, CCLX_WATCHDOG="1" if on else "0", RANK="0", WORLD_SIZE="1")
    out = subprocess.run([sys.executable, "-c", CHILD % (calls, batches)], env=env,
                         capture_output=True, text=True, timeout=600)
    v = [float(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("US_PER_CALL")]
    if len(v) != batches:
        raise RuntimeError(out.stdout + out.stderr)
    return v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=10000, help="allreduces per process")
    ap.add_argument("--batches", type=int, default=10, help="timed batches per process")
    ap.add_argument("--reps", type=int, default=5, help="processes per setting (alternating)")
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    on, off = [], []
    for _ in range(a.reps):
        off.append(one(False, a.calls, a.batches))
        on.append(one(True, a.calls, a.batches))
    # A shared host's noise comes in whole processes (clocks, neighbours; processes land in a fast
    # or a slow mode): each process's best batch, the median over processes of those, and the
    # fastest process of each setting (both in the fast mode when any process of each is),
    # besides the median of every batch.
    best_on = [min(v) for v in on]
    best_off = [min(v) for v in off]
    flat_on = [x for v in on for x in v]
    flat_off = [x for v in off for x in v]
    res = {"calls": a.calls, "batches": a.batches, "reps": a.reps,
           "us_per_call_watchdog_on": on, "us_per_call_watchdog_off": off,
           "median_on": statistics.median(flat_on), "median_off": statistics.median(flat_off),
           "ratio_on_over_off": statistics.median(flat_on) / statistics.median(flat_off),
           "best_batch_on": best_on, "best_batch_off": best_off,
           "ratio_best_on_over_off": statistics.median(best_on) / statistics.median(best_off),
           "ratio_fastest_on_over_off": min(best_on) / min(best_off)}
    print(json.dumps({k: v for k, v in res.items() if not k.startswith("us_per")}, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
