"""cclx-perf baselines: the libraries cclx is measured against, in the same process.

    nccl        a cclx communicator with backend "nccl" (NCCL's ordinary kernels, user buffers)
    nccl-sym    NCCL with symmetric windows: a comm made through the NCCL library cclx loaded
                (never a second copy: dlopen with RTLD_NOLOAD), buffers from ncclMemAlloc
                registered with ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC), so NCCL
                2.27+ can run its symmetric-memory kernels
    torch-symm  torch.distributed._symmetric_memory: one-shot and two-shot allreduce (the best of
                them per size), multicast disabled (TORCH_SYMM_MEM_DISABLE_MULTICAST=1)

NVLink multicast (NVLS) is never used: NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1
are set before any comm or symmetric allocation exists (force_no_multicast), no multimem op is
called, and a torch symmetric buffer that reports multicast support is refused.

Each set-up ends with every rank posting its outcome to the tool's store; a baseline that failed
on any rank is skipped on every rank, with the reason printed."""
from __future__ import annotations

import ctypes
import json
import os
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

NAMES = ("nccl", "nccl-sym", "torch-symm")
NCCL_WIN_COLL_SYMMETRIC = 0x01     # nccl.h (2.27+)
NCCL_WIN_REQUIRED_ALIGNMENT = 4096  # nccl.h: window base and size alignment
SYMM_FUNCS = ("ncclMemAlloc", "ncclMemFree", "ncclCommWindowRegister",
              "ncclCommWindowDeregister")
TORCH_SYMM_DTYPES = ("bf16", "f32")  # one_shot / two_shot_all_reduce dispatch on these only
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def force_no_multicast() -> List[str]:
    """Sets NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 in this process (and so in
    the ranks it starts); returns a note for each value that was different before."""
    notes = []
    for k, v in NO_MULTICAST_ENV.items():
        old = os.environ.get(k)
        if old is not None and old != v:
            notes.append(f"{k}={old} overridden with {v} (NVLink multicast is never used)")
        os.environ[k] = v
    return notes


def parse(text: str) -> Tuple[List[str], bool]:
    """--baseline value -> (names in table order, explicit). 'auto' (all the machine can run,
    skips silent on CPU), 'all' (all, every skip explained), 'none', or a comma list."""
    t = text.strip().lower()
    if t in ("auto", ""):
        return list(NAMES), False
    if t == "all":
        return list(NAMES), True
    if t == "none":
        return [], True
    names = [x.strip() for x in t.split(",") if x.strip()]
    bad = [x for x in names if x not in NAMES]
    if bad:
        raise ValueError(f"unknown baseline {bad[0]!r} (choose from {', '.join(NAMES)}, or "
                         "auto, all, none)")
    return [x for x in NAMES if x in names], True


def torch_symm_size_skip(coll: str, dtype: str, op: str, nbytes: int) -> Optional[str]:
    """Why torch-symm has no number for this row, or None."""
    if coll != "all_reduce":
        return "torch symmetric memory has one-shot/two-shot allreduce only"
    if op != "sum":
        return "torch symmetric memory allreduce supports sum only"
    if dtype not in TORCH_SYMM_DTYPES:
        return "torch symmetric memory allreduce supports bf16 and f32 only"
    if nbytes % 4:
        return "torch symmetric memory allreduce needs a multiple of 4 bytes"
    return None


def agree(store: Any, key: str, rank: int, n: int, err: Optional[str],
          timeout: float) -> Optional[str]:
    """Every rank posts its outcome of a collective set-up; returns the first error of any rank
    ('rank R: ...') or None, the same on every rank."""
    store.set(f"{key}/{rank}", json.dumps(err))
    for r in range(n):
        e = json.loads(store.get(f"{key}/{r}", timeout))
        if e is not None:
            return e if r == rank else f"rank {r}: {e}"
    return None


# ----------------------------------------------------------------------------- nccl-sym
class _DeviceBytes:
    """A device allocation seen by torch.as_tensor (CUDA array interface), bytes."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 2}


def nccl_library() -> Tuple[Optional[ctypes.CDLL], str, str]:
    """(the NCCL cclx loaded, opened again without loading a second copy, its path, why not)."""
    from .. import _C
    from .._rendezvous import set_nccl_pip_dir

    set_nccl_pip_dir()  # as for cclx's own comms: the NCCL torch uses, when pip installed it
    path_fn = getattr(_C, "nccl_path", None)
    path = path_fn() if path_fn is not None else ""
    if not path:
        return None, "", "cclx loaded no NCCL library (a build without CUDA, or none found)"
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        return None, path, f"cannot reach the NCCL cclx loaded ({path}): {e}"
    return lib, path, ""


def version_str(v: int) -> str:
    """NCCL_VERSION_CODE (22809) -> '2.28.9'."""
    return f"{v // 10000}.{(v // 100) % 100}.{v % 100}" if v else "?"


def nccl_sym_missing(lib: ctypes.CDLL, path: str, version: int) -> Optional[str]:
    """Why `lib` cannot make symmetric windows, or None."""
    missing = [f for f in SYMM_FUNCS if not hasattr(lib, f)]
    if missing:
        return (f"NCCL {version_str(version)} ({path}) has no {', '.join(missing)} "
                "(symmetric windows need NCCL 2.27 or newer)")
    return None


class NcclSymComm:
    """An NCCL comm of the library cclx loaded with two arenas (send, receive) from ncclMemAlloc,
    each registered as a symmetric window; Case buffers are views at the start of an arena.
    Collectives are those of NcclApiComm (same calls, torch's current stream)."""

    def __init__(self, api: Any, lib: ctypes.CDLL, torch: Any, arena_bytes: int) -> None:
        self.api, self.lib, self.torch = api, lib, torch
        self.bytes = -(-max(arena_bytes, 1) // NCCL_WIN_REQUIRED_ALIGNMENT) * \
            NCCL_WIN_REQUIRED_ALIGNMENT
        self.ptrs: List[ctypes.c_void_p] = []
        self.wins: List[ctypes.c_void_p] = []
        self.arenas: List[Any] = []
        P = ctypes.c_void_p
        lib.ncclMemAlloc.argtypes = [ctypes.POINTER(P), ctypes.c_size_t]
        lib.ncclMemAlloc.restype = ctypes.c_int
        lib.ncclMemFree.argtypes = [P]
        lib.ncclMemFree.restype = ctypes.c_int
        lib.ncclCommWindowRegister.argtypes = [P, P, ctypes.c_size_t, ctypes.POINTER(P),
                                               ctypes.c_int]
        lib.ncclCommWindowRegister.restype = ctypes.c_int
        lib.ncclCommWindowDeregister.argtypes = [P, P]
        lib.ncclCommWindowDeregister.restype = ctypes.c_int

    def register(self) -> None:
        """Allocates and registers both arenas (collective: every rank, same sizes)."""
        from .nccl_api import _check

        for _ in range(2):
            p = ctypes.c_void_p()
            _check(self.lib, self.lib.ncclMemAlloc(ctypes.byref(p), self.bytes), "ncclMemAlloc")
            self.ptrs.append(p)
            w = ctypes.c_void_p()
            _check(self.lib, self.lib.ncclCommWindowRegister(
                self.api.comm, p, self.bytes, ctypes.byref(w), NCCL_WIN_COLL_SYMMETRIC),
                "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)", self.api.comm)
            self.wins.append(w)
            self.arenas.append(self.torch.as_tensor(_DeviceBytes(p.value, self.bytes),
                                                    device=self.api.get_device()))

    def alloc(self, which: int, numel: int, dtype: Any) -> Any:
        """A view of `numel` elements at the start of arena `which` (0 send, 1 receive)."""
        esize = self.torch.empty((), dtype=dtype).element_size()
        if numel * esize > self.bytes:
            raise ValueError(f"nccl-sym arena of {self.bytes} bytes < {numel * esize}")
        return self.arenas[which][:numel * esize].view(dtype)

    # the cclx-perf comm interface, forwarded
    def __getattr__(self, name: str) -> Any:
        if name == "api":
            raise AttributeError(name)
        return getattr(self.api, name)

    def finalize(self) -> None:
        """Deregisters the windows (collective), frees the arenas, finalizes the comm."""
        from .nccl_api import _check

        self.torch.cuda.synchronize()
        self.arenas = []
        for w in self.wins:
            _check(self.lib, self.lib.ncclCommWindowDeregister(self.api.comm, w),
                   "ncclCommWindowDeregister", self.api.comm)
        self.wins = []
        self.api.finalize()
        for p in self.ptrs:
            _check(self.lib, self.lib.ncclMemFree(p), "ncclMemFree")
        self.ptrs = []

    def abort(self) -> None:
        """Local teardown after a failed set-up (no collective call)."""
        self.arenas = []
        if self.api.comm:
            self.lib.ncclCommAbort.argtypes = [ctypes.c_void_p]
            self.lib.ncclCommAbort(self.api.comm)
            self.api.comm = ctypes.c_void_p()
        for p in self.ptrs:
            self.lib.ncclMemFree(p)
        self.ptrs = []


def open_nccl_sym(torch: Any, rank: int, n: int, store: Any, timeout: float,
                  arena_bytes: int) -> Tuple[Optional[NcclSymComm], Dict[str, Any]]:
    """(the nccl-sym comm, or None with facts['skipped'] saying why; the same on every rank)."""
    from . import nccl_api as NA

    lib, path, why = nccl_library()
    version = 0
    if lib is not None:
        NA._prepare(lib)
        v = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(v)) == 0:
            version = v.value
        why = nccl_sym_missing(lib, path, version) or ""
    facts: Dict[str, Any] = {"library": path, "version": version_str(version)}
    err = agree(store, "cclx-perf/nccl-sym/lib", rank, n, why or None, timeout)
    if err:
        facts["skipped"] = err
        return None, facts
    key = "cclx-perf/nccl-sym/uid"
    sym: Optional[NcclSymComm] = None
    try:
        if rank == 0:
            uid = NA._UniqueId()
            NA._check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
            store.set(key, bytes(uid))
        device = torch.cuda.current_device()
        api = NA.NcclApiComm(lib, torch, rank, n, bytes(store.get(key, timeout)), device)
        sym = NcclSymComm(api, lib, torch, arena_bytes)
        sym.register()
        err = None
    except Exception as e:  # noqa: BLE001 - reported as the skip reason on every rank
        err = f"{type(e).__name__}: {e}"
    err = agree(store, "cclx-perf/nccl-sym/ready", rank, n, err, timeout)
    if err:
        if sym is not None:
            sym.abort()
        facts["skipped"] = err
        return None, facts
    facts["window_bytes"] = sym.bytes if sym else 0
    return sym, facts


# ----------------------------------------------------------------------------- torch-symm
class TorchSymm:
    """One symmetric buffer (rendezvoused once over torch.distributed's world group) and the
    allreduce variants on views at its start: 'oneshot' (one_shot_all_reduce_out into a normal
    output), 'twoshot' (two_shot_all_reduce_ in place), 'twoshot-out' (two_shot_all_reduce_out,
    world sizes 2, 4 and 8)."""

    def __init__(self, torch: Any, group_name: str, buf: Any, world: int) -> None:
        self.torch, self.group, self.buf, self.world = torch, group_name, buf, world
        ops = torch.ops.symm_mem
        self.variants = ["oneshot", "twoshot"]
        if world in (2, 4, 8) and hasattr(ops, "two_shot_all_reduce_out"):
            self.variants.append("twoshot-out")

    def input(self, numel: int) -> Any:
        return self.buf[:numel]

    def call(self, variant: str, src: Any, out: Any) -> Callable[[], Any]:
        """src: a view from input(); out: the result (src itself for 'twoshot')."""
        ops, g = self.torch.ops.symm_mem, self.group
        if variant == "oneshot":
            return lambda: ops.one_shot_all_reduce_out(src, "sum", g, out)
        if variant == "twoshot":
            return lambda: ops.two_shot_all_reduce_(src, "sum", g)
        return lambda: ops.two_shot_all_reduce_out(src, "sum", g, out)

    def finalize(self) -> None:
        self.torch.cuda.synchronize()
        self.buf = None


def _torch_group(torch: Any, rank: int, n: int, store: Any, timeout: float) -> str:
    """The world group of torch.distributed (gloo, store of our own), initialized if needed."""
    import datetime

    import torch.distributed as dist

    if not dist.is_initialized():
        host = os.environ.get("MASTER_ADDR") or "127.0.0.1"
        tmo = datetime.timedelta(seconds=timeout)
        if rank == 0:
            ts = dist.TCPStore(host, 0, n, True, timeout=tmo, wait_for_workers=False)
            store.set("cclx-perf/torch-symm/store", f"{host}:{ts.port}")
        else:
            addr = store.get("cclx-perf/torch-symm/store", timeout).decode()
            h, _, p = addr.rpartition(":")
            ts = dist.TCPStore(h, int(p), n, False, timeout=tmo)
        dist.init_process_group("gloo", store=ts, rank=rank, world_size=n, timeout=tmo)
    return dist.group.WORLD.group_name


def open_torch_symm(torch: Any, rank: int, n: int, store: Any, timeout: float, dtype: Any,
                    numel: int, why_not: Optional[str]) -> Tuple[Optional[TorchSymm],
                                                                Dict[str, Any]]:
    """(TorchSymm, or None with facts['skipped'] saying why; the same on every rank).
    why_not: a reason known before any set-up (wrong dtype, no allreduce in the run)."""
    facts: Dict[str, Any] = {"torch": getattr(torch, "__version__", None)}
    err = why_not
    if err is None and os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST") != "1":
        err = "TORCH_SYMM_MEM_DISABLE_MULTICAST is not 1 (multicast must stay off)"
    if err is None:
        try:
            import importlib

            import torch.distributed as dist

            importlib.import_module("torch.distributed._symmetric_memory")
            if not dist.is_available():
                err = "torch.distributed is not available in this torch build"
            else:
                for op in ("one_shot_all_reduce_out", "two_shot_all_reduce_"):
                    if not hasattr(torch.ops.symm_mem, op):
                        err = f"torch {torch.__version__} has no torch.ops.symm_mem.{op}"
        except Exception as e:  # noqa: BLE001
            err = f"torch symmetric memory is not available: {type(e).__name__}: {e}"
    err = agree(store, "cclx-perf/torch-symm/avail", rank, n, err, timeout)
    if err:
        facts["skipped"] = err
        return None, facts
    ts: Optional[TorchSymm] = None
    try:
        symm = sys.modules["torch.distributed._symmetric_memory"]  # imported above
        group = _torch_group(torch, rank, n, store, timeout)
        if hasattr(symm, "set_backend"):
            try:
                symm.set_backend("CUDA")  # the CUDA (IPC handle) backend, not NVSHMEM / NCCL
            except Exception:  # noqa: BLE001 - already chosen; reported below
                pass
        if hasattr(symm, "enable_symm_mem_for_group"):
            with warnings.catch_warnings():  # deprecated (a no-op need) in newer torch
                warnings.simplefilter("ignore")
                symm.enable_symm_mem_for_group(group)
        device = torch.device("cuda", torch.cuda.current_device())
        backend = symm.get_backend(device) if hasattr(symm, "get_backend") else None
        if backend not in (None, "CUDA"):  # NVSHMEM / NCCL backends may use NVLink multicast
            raise RuntimeError(f"symmetric memory backend {backend!r} is not 'CUDA'; refused")
        buf = symm.empty(max(numel, 1), dtype=dtype, device=device)
        hdl = symm.rendezvous(buf, group)
        if getattr(hdl, "has_multicast_support", lambda: False)():
            raise RuntimeError("the symmetric buffer has multicast support although "
                               "TORCH_SYMM_MEM_DISABLE_MULTICAST=1; refused")
        facts["backend"] = backend or "CUDA (default)"
        ts = TorchSymm(torch, group, buf, n)
        facts["variants"] = list(ts.variants)
        facts["buffer_bytes"] = buf.numel() * buf.element_size()
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    err = agree(store, "cclx-perf/torch-symm/ready", rank, n, err, timeout)
    if err:
        facts["skipped"] = err
        return None, facts
    return ts, facts


def close_torch_group() -> None:
    """Destroys the torch.distributed group open_torch_symm made (if any)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
