"""One rank of a two-rank NCCL drop-in scenario (run under `cclx-nccl run`, one GPU per rank):
the drop-in's NCCL API through ctypes, torch for device memory and streams. Prints one line per
step and "<SCENARIO> OK" at the end; any failed check raises.

    dropin_faults.py SCENARIO RANK IDFILE
Scenarios: setup_fail (CCLX_TEST_SETUP_FAIL set by the caller: every rank forwards, results
exact), settings (the ranks' CCLX_DDA_STAGING_BYTES differ: creation fails on both, naming it),
abort_dead (rank 1 dies; rank 0's ncclCommAbort returns within 1 s and its spinning allreduce
stops with NaN), graph (two intercepted allreduces captured on forked streams, replayed),
teardown (ncclCommDestroy on both ranks after async calls: exact results, nothing leaked)."""
import ctypes
import math
import os
import sys
import time

import torch

NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def load():
    lib = ctypes.CDLL(None)
    assert hasattr(lib, "cclxDropinSetIntercept"), "the drop-in is not loaded (LD_PRELOAD)"
    lib.ncclGetLastError.restype = ctypes.c_char_p
    lib.ncclGetLastError.argtypes = [ctypes.c_void_p]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                     ctypes.c_int]
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    for f in ("ncclCommAbort", "ncclCommDestroy"):
        getattr(lib, f).argtypes = [ctypes.c_void_p]
    return lib


def barrier(idfile, rank, name):
    """A file barrier of the two ranks."""
    open(f"{idfile}.{name}.{rank}", "w").close()
    t0 = time.time()
    while not os.path.exists(f"{idfile}.{name}.{1 - rank}"):
        assert time.time() - t0 < 120, f"rank {1 - rank} never reached '{name}'"
        time.sleep(0.01)


def init(lib, rank, idfile):
    uid = UniqueId()
    if rank == 0:
        assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
        with open(idfile + ".tmp", "wb") as f:
            f.write(bytes(uid.internal))
        os.rename(idfile + ".tmp", idfile)
    else:
        t0 = time.time()
        while not os.path.exists(idfile):
            assert time.time() - t0 < 120, "rank 0 never wrote the unique id"
            time.sleep(0.01)
        uid.internal = open(idfile, "rb").read()
    comm = ctypes.c_void_p()
    rc = lib.ncclCommInitRank(ctypes.byref(comm), 2, uid, rank)
    return rc, comm


def data(rank, n, call):
    i = torch.arange(n, device="cuda", dtype=torch.int64)
    return ((i * 7 + rank * 13 + call * 29) % 61 - 30).to(torch.float32)


def expected(n, call):
    return data(0, n, call) + data(1, n, call)


def allreduce(lib, comm, x, stream):
    rc = lib.ncclAllReduce(x.data_ptr(), x.data_ptr(), x.numel(), NCCL_FLOAT32, NCCL_SUM, comm,
                           stream.cuda_stream)
    assert rc == 0, f"ncclAllReduce returned {rc}: {lib.ncclGetLastError(comm)}"


def main():
    scenario, rank, idfile = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.cuda.set_device(rank)
    lib = load()
    rc, comm = init(lib, rank, idfile)
    print(f"rank {rank}: ncclCommInitRank -> {rc}", flush=True)
    s = torch.cuda.Stream()
    if scenario == "settings":
        msg = (lib.ncclGetLastError(None) or b"").decode()
        assert rc == 5 and not comm.value, (rc, comm.value, msg)  # ncclInvalidUsage, no comm
        assert "CCLX_DDA_STAGING_BYTES differs" in msg and "on rank(s) 1" in msg, msg
        print(f"rank {rank}: {msg}", flush=True)
        print("SETTINGS OK", flush=True)
        return
    assert rc == 0, lib.ncclGetLastError(None)
    n = 50000
    x = data(rank, n, 0)
    with torch.cuda.stream(s):
        allreduce(lib, comm, x, s)
    s.synchronize()
    assert torch.equal(x, expected(n, 0)), "the first allreduce is wrong"
    print(f"rank {rank}: allreduce exact", flush=True)

    if scenario == "setup_fail":
        for call in range(1, 5):
            y = data(rank, n, call)
            allreduce(lib, comm, y, s)
            s.synchronize()
            assert torch.equal(y, expected(n, call)), f"call {call} is wrong"
        assert lib.ncclCommDestroy(comm) == 0
        print("SETUP_FAIL OK", flush=True)
    elif scenario == "abort_dead":
        barrier(idfile, rank, "warm")
        if rank == 1:
            os._exit(0)  # dead: no destroy, no destructors
        time.sleep(0.3)
        y = data(rank, 3000, 1)
        allreduce(lib, comm, y, s)  # waits for rank 1 (no deadline: NCCL's semantics)
        time.sleep(0.5)
        t0 = time.time()
        assert lib.ncclCommAbort(comm) == 0
        took = time.time() - t0
        print(f"rank 0: ncclCommAbort took {took:.3f} s", flush=True)
        assert took < 1.0, f"ncclCommAbort took {took:.3f} s"
        t1 = time.time()
        while not s.query():
            assert time.time() - t1 < 10, "the allreduce still runs 10 s after the abort"
            time.sleep(0.001)
        assert torch.isnan(y).all().item(), "the aborted allreduce left values that are not NaN"
        print(f"rank 0: the kernel stopped {time.time() - t1:.3f} s after the abort; output NaN",
              flush=True)
        print("ABORT_DEAD OK", flush=True)
    elif scenario == "graph":
        a = torch.empty(n, device="cuda")
        b = torch.empty(n, device="cuda")
        side = torch.cuda.Stream()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            side.wait_stream(s)
            allreduce(lib, comm, a, s)
            with torch.cuda.stream(side):
                allreduce(lib, comm, b, side)
            s.wait_stream(side)
        for rep in range(8):
            a.copy_(data(rank, n, 2 * rep + 1))
            b.copy_(data(rank, n, 2 * rep + 2))
            torch.cuda.synchronize()
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(a, expected(n, 2 * rep + 1)), f"replay {rep}: a is wrong"
            assert torch.equal(b, expected(n, 2 * rep + 2)), f"replay {rep}: b is wrong"
        print(f"rank {rank}: 8 replays exact", flush=True)
        assert lib.ncclCommDestroy(comm) == 0
        print("GRAPH OK", flush=True)
    elif scenario == "teardown":
        ys = [data(rank, n, c) for c in range(1, 9)]
        for y in ys:
            allreduce(lib, comm, y, s)
        t0 = time.time()
        assert lib.ncclCommDestroy(comm) == 0  # waits for this comm's calls, then a peer barrier
        print(f"rank {rank}: ncclCommDestroy {time.time() - t0:.3f} s", flush=True)
        s.synchronize()
        for c, y in enumerate(ys, 1):
            assert torch.equal(y, expected(n, c)), f"call {c} is wrong"
        print("TEARDOWN OK", flush=True)
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()
