"""One rank of tests/python/failure/test_failure.py: a CPU comm of WORLD_SIZE ranks whose last rank is
SIGKILLed after two allreduces. FAILURE_MODE=raise: abort_process_on_timeout_or_error=False, the
survivors must get an error naming the dead rank; FAILURE_MODE=default: no argument (the
default), the survivors must end by SIGABRT after their abort hooks ran."""
import os
import signal
import sys
import time

import numpy as np

import cclx

mode = os.environ["FAILURE_MODE"]
kwargs = {"abort_process_on_timeout_or_error": False} if mode == "raise" else {}
comm = cclx.new_comm("cclx", "cpu", name="failure", timeout=2.0, **kwargs)
rank, size = comm.get_rank(), comm.get_size()
victim = size - 1
comm.register_abort_hook(lambda reason: print(f"hook ran on rank {rank}: {reason}", flush=True))
x = np.full(1001, rank + 1, dtype=np.float32)
for i in range(2):
    comm.all_reduce(x)
if rank == victim:
    print(f"victim {time.time():.3f}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
y = np.full(1001, 7.0, dtype=np.float32)
try:
    comm.all_reduce(y)
    print("the call after the kill returned", flush=True)
    sys.exit(3)
except cclx.CclxTimeoutError as e:
    print(f"timeout naming {victim}: {str(victim) in str(e)} nan: {bool(np.isnan(y).all())}", flush=True)
try:
    comm.all_reduce(y)
    sys.exit(4)
except cclx.CclxError as e:
    print(f"next call raises {type(e).__name__}", flush=True)
comm.abort()
sys.exit(0)
