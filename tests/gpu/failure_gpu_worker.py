"""One rank of tests/gpu/failure/test_gpu_failure.py: a CUDA comm of WORLD_SIZE ranks sharing the GPUs
(rank r on cuda:r % count) whose last rank is SIGKILLed after two allreduces.
FAILURE_MODE=raise: abort_process_on_timeout_or_error=False; the survivors' next allreduce leaves
NaN after torch.cuda.synchronize(), its Work raises naming the dead rank, the next call raises.
FAILURE_MODE=default: the survivors' watchdog ends them (SIGABRT) after their allreduce.
FAILURE_MODE=graph: as default, but the survivors only replay a captured graph.
FAILURE_MODE=set_timeout: as raise, printing the survivors' errors ("message: ...") so that the
test checks they name the timeout the call ran with. Every mode creates the comm with a 60 s
timeout and then sets FAILURE_TIMEOUT with set_timeout()."""
import os
import signal
import sys
import time

import torch

import cclx

mode = os.environ["FAILURE_MODE"]
timeout = float(os.environ.get("FAILURE_TIMEOUT", "3"))
raises = mode in ("raise", "set_timeout")
kwargs = {"abort_process_on_timeout_or_error": False} if raises else {}
# Creation gets a generous timeout (ranks sharing a busy GPU start slowly); the calls run with
# `timeout`, set after creation in every mode.
comm = cclx.new_comm("cclx", torch.device("cuda"), name="gpu_failure", timeout=60.0, **kwargs)
comm.set_timeout(timeout)
rank, size = comm.get_rank(), comm.get_size()
victim = size - 1
comm.register_abort_hook(lambda reason: print(f"hook ran on rank {rank}", flush=True))
x = torch.full((4099,), float(rank + 1), device="cuda")
graph = None
if mode == "graph":
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        comm.all_reduce(x)  # warm-up outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            comm.all_reduce(x)
    torch.cuda.current_stream().wait_stream(s)
for i in range(2):
    x.fill_(float(rank + 1))
    if graph is not None:
        graph.replay()
    else:
        comm.all_reduce(x)
    torch.cuda.synchronize()
    want = float(sum(range(1, size + 1)))
    assert bool((x == want).all()), f"call {i}: {x[:4]} != {want}"
if rank == victim:
    print(f"victim {time.time():.3f}", flush=True)
    torch.cuda.synchronize()
    os.kill(os.getpid(), signal.SIGKILL)
y = torch.full((4099,), 3.0, device="cuda")
if raises:
    w = comm.all_reduce(y)
    torch.cuda.synchronize()
    print(f"nan after synchronize: {bool(torch.isnan(y).all())}", flush=True)
    try:
        w.is_completed()
        print("is_completed did not raise", flush=True)
    except cclx.CclxTimeoutError as e:
        print(f"is_completed raises naming {victim}: {str(victim) in str(e)}", flush=True)
        print(f"message: {e}", flush=True)
    try:
        comm.all_reduce(y)
        print("the next call did not raise", flush=True)
    except cclx.CclxError as e:
        print(f"next call raises {type(e).__name__}", flush=True)
    comm.abort()
    sys.exit(0)
if graph is not None:
    graph.replay()
else:
    comm.all_reduce(y)
torch.cuda.synchronize()
print(f"synchronized {time.time():.3f} nan {bool(torch.isnan(y).all())}", flush=True)
time.sleep(timeout + 5)  # the watchdog must end the process before this returns
print("still alive", flush=True)
sys.exit(5)
