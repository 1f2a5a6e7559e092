"""Cost of the watchdog on the eager path: 10^4 eager 1 KiB allreduces on a CUDA comm of one rank
(the NCCL path, which the watchdog also tracks with start/end events), with the watchdog
(CCLX_WATCHDOG=1, the default) and without (0), in alternating fresh processes; prints and
writes (--json) the host time per call and the ratio.

    python bench/watchdog_overhead.py [--calls 10000] [--reps 3] [--json out.json]
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
n = int(%d)
t0 = time.perf_counter()
for _ in range(n):
    comm.all_reduce(x)
torch.cuda.synchronize()
print("US_PER_CALL", (time.perf_counter() - t0) / n * 1e6)
comm.finalize()
"""


def one(on: bool, calls: int) -> float:
    env = dict(os.environ, CCLX_WATCHDOG="1" if on else "0", RANK="0", WORLD_SIZE="1")
    out = subprocess.run([sys.executable, "-c", CHILD % calls], env=env, capture_output=True,
                         text=True, timeout=600)
    for line in out.stdout.splitlines():
        if line.startswith("US_PER_CALL"):
            return float(line.split()[1])
    raise RuntimeError(out.stdout + out.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=10000, help="allreduces per measurement")
    ap.add_argument("--reps", type=int, default=3, help="measurements per setting (alternating)")
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    on, off = [], []
    for _ in range(a.reps):
        off.append(one(False, a.calls))
        on.append(one(True, a.calls))
    res = {"calls": a.calls, "us_per_call_watchdog_on": on, "us_per_call_watchdog_off": off,
           "median_on": statistics.median(on), "median_off": statistics.median(off),
           "ratio_on_over_off": statistics.median(on) / statistics.median(off)}
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
