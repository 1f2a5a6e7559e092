"""A rank whose collective times out with abort_process_on_timeout_or_error on: the library runs
the abort hooks (the flight recorder dumps its JSON) and aborts the process. Rank 0 never joins
the barrier. Usage: abort_fr_worker.py DUMP_PATTERN (run by test_hooks.py, 2 ranks)."""
import sys
import time

import numpy as np

import cclx
from cclx.hooks import FlightRecorderHook

comm = cclx.new_comm("cclx", "cpu", name="frabort", timeout=30,
                     abort_process_on_timeout_or_error=True)
fr = FlightRecorderHook(dump_path=sys.argv[1])
fr.register_with_comm(comm)
comm.register_abort_hook(lambda: print("abort hook without arguments ran", flush=True))
comm.register_abort_hook(lambda reason: print(f"abort hook got: {reason}", flush=True))
x = np.ones(256, np.float32)
comm.all_reduce(x)
if comm.get_rank() == 0:
    time.sleep(10)  # the other rank's barrier times out meanwhile
    sys.exit(0)
comm.barrier(timeout=2)
print("the barrier returned", flush=True)
