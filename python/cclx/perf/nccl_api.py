"""cclx-perf --api nccl: the NCCL C API itself, called with ctypes, through the cclx drop-in
(libnccl.so.2, loaded RTLD_LOCAL) and through the real NCCL behind it (the file that
cclxDropinRealNccl names), one comm through each library."""
from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, Tuple

# ncclDataType_t and ncclRedOp_t values of nccl.h.
_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7,
           "float64": 8, "bfloat16": 9}
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
# cclx-perf collective -> NCCL function
FUNCS = {"all_reduce": "ncclAllReduce", "all_gather": "ncclAllGather",
         "reduce_scatter": "ncclReduceScatter", "all_to_all": "ncclAlltoAll",
         "broadcast": "ncclBroadcast", "reduce": "ncclReduce"}
_P, _N, _I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
_ARGTYPES = {
    "ncclAllReduce": [_P, _P, _N, _I, _I, _P, _P],
    "ncclReduceScatter": [_P, _P, _N, _I, _I, _P, _P],
    "ncclAllGather": [_P, _P, _N, _I, _P, _P],
    "ncclAlltoAll": [_P, _P, _N, _I, _P, _P],
    "ncclBroadcast": [_P, _P, _N, _I, _I, _P, _P],
    "ncclReduce": [_P, _P, _N, _I, _I, _I, _P, _P],
}


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def _prepare(lib: ctypes.CDLL) -> None:
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetErrorString.argtypes = [_I]
    lib.ncclGetLastError.restype = ctypes.c_char_p
    lib.ncclGetLastError.argtypes = [_P]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(_P), _I, _UniqueId, _I]
    for f, types in _ARGTYPES.items():
        fn = getattr(lib, f, None)
        if fn is not None:
            fn.argtypes, fn.restype = types, _I


def _check(lib: ctypes.CDLL, r: int, what: str, comm: Any = None) -> None:
    if r != 0:
        last = lib.ncclGetLastError(comm) or b""
        raise RuntimeError(f"{what}: NCCL error {r} ({lib.ncclGetErrorString(r).decode()})"
                           f"{': ' + last.decode() if last else ''}")


class NcclApiComm:
    """One NCCL comm made through `lib`, with the methods of a cclx comm that cclx-perf calls.
    Every call goes on torch's current stream."""

    def __init__(self, lib: ctypes.CDLL, torch: Any, rank: int, n: int, uid: bytes,
                 device: int):
        self.lib, self.torch, self.rank, self.n, self.device = lib, torch, rank, n, device
        self.fn = {f: getattr(lib, f) for f in _ARGTYPES if hasattr(lib, f)}
        self.dt = {getattr(torch, k): v for k, v in _DTYPES.items()}
        self.one = torch.zeros(1, dtype=torch.float32, device=self.get_device())
        self.comm = _P()
        _check(lib, lib.ncclCommInitRank(ctypes.byref(self.comm), n,
                                         _UniqueId.from_buffer_copy(uid), rank),
               "ncclCommInitRank")

    def has(self, coll: str) -> bool:
        return coll in FUNCS and FUNCS[coll] in self.fn

    def _run(self, f: str, *args: Any) -> None:
        r = self.fn[f](*args, self.comm, self.torch.cuda.current_stream().cuda_stream)
        if r != 0:
            _check(self.lib, r, f, self.comm)

    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.n

    def get_device(self) -> Any:
        return self.torch.device("cuda", self.device)

    def all_reduce(self, s, op, async_op=False, hints=None, output=None):
        self._run("ncclAllReduce", s.data_ptr(), output.data_ptr(), s.numel(), self.dt[s.dtype],
                  _OPS[op])

    def reduce(self, s, root, op, async_op=False, hints=None, output=None):
        self._run("ncclReduce", s.data_ptr(), output.data_ptr(), s.numel(), self.dt[s.dtype],
                  _OPS[op], root)

    def broadcast(self, s, root, async_op=False, hints=None, output=None):
        self._run("ncclBroadcast", s.data_ptr(), output.data_ptr(), s.numel(),
                  self.dt[s.dtype], root)

    def all_gather_single(self, o, s, async_op=False, hints=None):
        self._run("ncclAllGather", s.data_ptr(), o.data_ptr(), s.numel(), self.dt[s.dtype])

    def reduce_scatter_single(self, o, s, op, async_op=False, hints=None):
        self._run("ncclReduceScatter", s.data_ptr(), o.data_ptr(), o.numel(), self.dt[s.dtype],
                  _OPS[op])

    def all_to_all_single(self, o, s, async_op=False, hints=None):
        self._run("ncclAlltoAll", s.data_ptr(), o.data_ptr(), s.numel() // self.n,
                  self.dt[s.dtype])

    def barrier(self) -> None:
        """A 1-element allreduce, then the host waits for it."""
        self._run("ncclAllReduce", self.one.data_ptr(), self.one.data_ptr(), 1, 7, 0)
        self.torch.cuda.current_stream().synchronize()

    def finalize(self) -> None:
        if self.comm:
            self.torch.cuda.synchronize()
            _check(self.lib, self.lib.ncclCommFinalize(self.comm), "ncclCommFinalize")
            _check(self.lib, self.lib.ncclCommDestroy(self.comm), "ncclCommDestroy")
            self.comm = _P()


def open_comms(torch: Any, rank: int, n: int, store: Any,
               timeout: float) -> Tuple[Dict[str, NcclApiComm], Dict[str, Any]]:
    """{"dropin": comm through the drop-in, "nccl": comm through the real NCCL} on
    cuda:LOCAL_RANK, rank 0's unique ids shared through `store`; and facts for the report."""
    from .._rendezvous import set_nccl_pip_dir
    from ..dropin import library_path

    set_nccl_pip_dir()  # the drop-in then loads the NCCL torch uses
    device = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
    torch.cuda.set_device(device)
    path = library_path()
    dl = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    _prepare(dl)
    dl.cclxDropinRealNccl.restype = _P
    dl.cclxDropinRealNccl.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    version = ctypes.c_int(0)
    _check(dl, dl.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion (drop-in)")
    real_path = ctypes.c_char_p()
    if not dl.cclxDropinRealNccl(ctypes.byref(real_path)):
        raise SystemExit("cclx-perf: the drop-in found no real NCCL")
    real = ctypes.CDLL(real_path.value.decode(), mode=os.RTLD_LOCAL)
    _prepare(real)
    comms = {}
    for name, lib in (("dropin", dl), ("nccl", real)):
        key = f"cclx-perf/uid/{name}"
        if rank == 0:
            uid = _UniqueId()
            _check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), f"ncclGetUniqueId ({name})")
            store.set(key, bytes(uid))
        comms[name] = NcclApiComm(lib, torch, rank, n, bytes(store.get(key, timeout)), device)
    facts = {"dropin": path, "real_nccl": real_path.value.decode(),
             "real_nccl_version": version.value}
    return comms, facts
