"""cclx as a torchcomms backend: torchcomms.new_comm("cclx", device, name=...).

torchcomms finds this module through the entry point `cclx` of group `torchcomms.backends`
(pyproject.toml): its first new_comm("cclx", ...) imports it, and importing it registers
CclxBackend with torchcomms.register_backend. Importing it by hand does the same.

CclxBackend is a torchcomms.TorchCommBackend written in Python (torchcomms' Python-backend
route): torchcomms' C++ TorchComm calls these methods, runs its own hooks and flight recorder
around them, and wraps what they return (None: complete; else an object whose wait() it calls)
in a TorchWork. Each method maps one-to-one onto a cclx.Comm method. What that route cannot
carry (per-call hints and timeouts, batched point-to-point, windows, a PREMUL_SUM factor, a
polled is_completed() or wait_blocking() of an asynchronous op) is listed in docs/API.md,
"From torchcomms".

The C++ route: where cclx was built with torchcomms' headers (libcclx_torchcomms.so next to
cclx._C, src/torchcomms), torchcomms loads that library instead (TORCHCOMMS_BACKEND_LIB_PATH_CCLX)
and none of the limits above apply. CCLX_TORCHCOMMS_ROUTE picks: `auto` (the default) takes the
library when it is there and was built for the installed torchcomms version, else this class;
`cxx` requires the library (raises naming what is wrong); `python` always takes this class. A
TORCHCOMMS_BACKEND_LIB_PATH_CCLX set by the user counts as asking for the C++ route. ROUTE tells
which was taken.
"""
from __future__ import annotations

import collections
import ctypes
import importlib.metadata
import os
import sys
from typing import Any, Dict, List, Optional

import torchcomms  # noqa: F401 - the backend exists only with torchcomms installed

from . import _C
from .comm import Comm, new_comm

BACKEND_NAME = "cclx"
_RED_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")
_hint_keys: Optional[frozenset] = None


class _Work:
    """What an async_op=True call returns to torchcomms: its wait() is cclx's Work.wait() (CUDA:
    the caller's current stream waits; CPU: returns once complete; a failed op raises)."""

    __slots__ = ("_w",)

    def __init__(self, w: Any) -> None:
        self._w = w

    def wait(self) -> None:
        self._w.wait()


# torchcomms' C++ TorchWork for a Python backend holds the object returned here and drops it
# wherever its holder dies, possibly without the GIL (c10d's C++ callers: DDP, FSDP): a
# deallocation there ends the process. So every _Work also stays here, and leaves only once
# this list holds its last reference (then nothing else can touch it).
_live: "collections.deque[_Work]" = collections.deque()


def _result(w: Any, async_op: bool) -> Optional[_Work]:
    # A synchronous call has completed on CPU comms (errors raised in the call) and is ordered
    # on the caller's current stream on CUDA comms: torchcomms takes None as complete.
    if not async_op or not getattr(w, "_cuda", True):
        # CPU comms finish every operation in the call: complete too. (A Python work would stay
        # in progress until someone calls its wait(), and c10d's WorkWrapper completes its
        # future only then: DDP's reducer, which waits on that future, would hang.)
        return None
    live = _live
    while live and sys.getrefcount(live[0]) <= 2:  # the list's reference and the argument
        live.popleft()
    if len(live) > 64:  # older works still held: look further than the first
        live.rotate(-1)
    work = _Work(w)
    live.append(work)
    return work


def _ext() -> Any:
    """cclx._cclx_torchcomms (built where torchcomms' C++ headers were at hand, beside the C++
    route's library), or None when it is absent or does not load."""
    global _ext_mod
    if _ext_mod is None:
        global _ext_error
        try:
            from . import _cclx_torchcomms as mod  # type: ignore[attr-defined]
        except ImportError as e:
            mod, _ext_error = False, str(e)
        _ext_mod = mod
    return _ext_mod or None


_ext_mod: Any = None
_ext_error = ""


def _trace(backend: "CclxBackend", name: str, rank: int, inputs: List[Any],
           outputs: List[Any]) -> Any:
    """torchcomms' profiler event for one operation ("record_param_comms", as its own backends
    emit it): with cclx._cclx_torchcomms, torchcomms' TracingGuard itself (the collective's name,
    group, sizes and dtype in the event's args); without it, torch.profiler.record_function with
    the same name (an event without those args: Python cannot attach them)."""
    ext = _ext()
    if ext is not None:
        return ext.trace(backend._name, backend._c().get_size(), name, rank, list(inputs),
                         list(outputs))
    import torch

    return torch.profiler.record_function("record_param_comms", name)


_OPS = {getattr(torchcomms.RedOpType, n): getattr(_C.ReduceOp, n) for n in _RED_OPS}


def _op(op: Any) -> Any:
    """torchcomms.ReduceOp -> cclx.ReduceOp. torchcomms gives Python backends the op's type only,
    so PREMUL_SUM (whose factor it does not expose) cannot be mapped."""
    kind = getattr(op, "type", op)
    mine = _OPS.get(kind)
    if mine is not None:
        return mine
    if kind == torchcomms.RedOpType.PREMUL_SUM:
        raise _C.CclxUnsupportedError(
            "cclx torchcomms backend: PREMUL_SUM is not available, torchcomms does not pass "
            "the factor to Python backends (use cclx.new_comm directly for it)")
    raise _C.CclxInvalidArgument(f"cclx torchcomms backend: unknown reduce op {op!r}")


def _known_hint_keys() -> frozenset:
    """The hint keys cclx knows, from its table of settings and hints (docs/SETTINGS.md)."""
    global _hint_keys
    if _hint_keys is None:
        _hint_keys = frozenset(_C.hint_keys())
    return _hint_keys


def cclx_hints(comm: Comm, hints: Dict[str, str]) -> Dict[str, str]:
    """torchcomms hints -> cclx hints: `cclx.KEY` / `cclx::KEY` always (cclx checks the key and
    value), a plain key when cclx knows it; the rest belong to torchcomms or other backends and
    are ignored, as torchcomms' own backends ignore hints they do not read."""
    out: Dict[str, str] = {}
    known = _known_hint_keys()
    for k, v in hints.items():
        key = _cclx_key(k)
        if key != k or k in known:
            out[key] = str(v)
    return out


def _cclx_key(k: str) -> str:
    """A hint key without its `cclx::` / `cclx.` prefix."""
    for p in ("cclx::", "cclx."):
        if k.startswith(p):
            return k[len(p):]
    return k


def _gather_lists(comm: Comm, mine: List[int]) -> List[List[int]]:
    """Every rank's list (at most get_size() ranks each) by one all_gather_single."""
    import torch

    n = comm.get_size()
    if len(mine) > n:
        raise _C.CclxInvalidArgument(f"split: {len(mine)} ranks listed, the comm has {n}")
    dev = comm.get_device()
    row = torch.full((n + 1,), -1, dtype=torch.int64)
    row[0] = len(mine)
    if mine:
        row[1:len(mine) + 1] = torch.tensor(mine, dtype=torch.int64)
    out = torch.empty(n * (n + 1), dtype=torch.int64, device=dev)
    comm.all_gather_single(out, row.to(dev))
    table = out.cpu().view(n, n + 1).tolist()
    return [t[1:1 + t[0]] for t in table]


class CclxBackend(torchcomms.TorchCommBackend):
    """A torchcomms backend over one cclx.Comm (CPU or CUDA)."""

    def __init__(self) -> None:
        super().__init__()
        self._comm: Optional[Comm] = None
        self._name = ""

    @classmethod
    def _wrap(cls, comm: Comm, name: str) -> "CclxBackend":
        b = cls()
        b._comm = comm
        b._name = name
        return b

    def _c(self) -> Comm:
        if self._comm is None:
            raise _C.CclxUsageError("cclx torchcomms backend: the communicator was not "
                                    "initialized (or was finalized)")
        return self._comm

    # ------------------------------------------------------------------ lifetime
    def init(self, device: Any, name: str, options: Any) -> None:
        hints = dict(getattr(options, "hints", {}) or {})
        comm = new_comm(BACKEND_NAME, device, name=name, store=options.store,
                        timeout=options.timeout,
                        abort_process_on_timeout_or_error=options.abort_process_on_timeout_or_error)
        mine = cclx_hints(comm, hints)
        if mine:
            comm.set_hints(mine)
        self._comm = comm
        self._name = name

    def finalize(self) -> None:
        if self._comm is not None:
            comm, self._comm = self._comm, None
            comm.finalize()

    def split(self, ranks: List[int], name: str, options: Any) -> Optional["CclxBackend"]:
        """torchcomms' split: every rank calls it with the list of its own new group (empty: in
        none), so lists differ between groups. The lists are gathered over this comm, checked
        (each listed rank passed the same list), and each group is made by one cclx split (a
        collective with one list on every rank), groups ordered by their first rank."""
        comm = self._c()
        mine = [int(r) for r in ranks]
        lists = _gather_lists(comm, mine)
        groups: List[List[int]] = []
        for r, lst in enumerate(lists):
            for m in lst:
                if not 0 <= m < comm.get_size() or lists[m] != lst:
                    raise _C.CclxInvalidArgument(
                        f"split: rank {r} passed {lst}, but rank {m} passed "
                        f"{lists[m] if 0 <= m < comm.get_size() else 'nothing (no such rank)'}")
            if lst and lst not in groups:
                groups.append(lst)
        groups.sort(key=lambda g: min(g))
        result = None
        for g in groups:
            sub = comm.split(g, name)
            if sub is not None:
                result = sub
        if result is None:
            return None
        hints = cclx_hints(result, dict(getattr(options, "hints", {}) or {}))
        if hints:
            result.set_hints(hints)
        return CclxBackend._wrap(result, name)

    def set_timeout(self, timeout: Any) -> None:
        self._c().set_timeout(timeout)

    # ------------------------------------------------------------------ identity
    def get_rank(self) -> int:
        return self._c().get_rank()

    def _rank(self) -> int:
        return self._c().get_rank()

    def get_size(self) -> int:
        return self._c().get_size()

    def get_backend_name(self) -> str:
        return BACKEND_NAME

    def get_comm_name(self) -> str:
        return self._name

    # ------------------------------------------------------------------ point-to-point
    def send(self, tensor, dst, async_op):
        with _trace(self, "send", dst, [tensor], [tensor]):
            return _result(self._c().send(tensor, dst, async_op), async_op)

    def recv(self, tensor, src, async_op):
        with _trace(self, "recv", src, [tensor], [tensor]):
            return _result(self._c().recv(tensor, src, async_op), async_op)

    # ------------------------------------------------------------------ collectives
    def broadcast(self, tensor, root, async_op):
        with _trace(self, "broadcast", self._rank(), [tensor], [tensor]):
            return _result(self._c().broadcast(tensor, root, async_op), async_op)

    def all_reduce(self, tensor, op, async_op):
        with _trace(self, "all_reduce", self._rank(), [tensor], [tensor]):
            return _result(self._c().all_reduce(tensor, _op(op), async_op), async_op)

    def reduce(self, tensor, root, op, async_op):
        with _trace(self, "reduce", root, [tensor], [tensor]):
            return _result(self._c().reduce(tensor, root, _op(op), async_op), async_op)

    def all_gather(self, tensor_list, tensor, async_op):
        with _trace(self, "all_gather", self._rank(), list(tensor_list), [tensor]):
            return _result(self._c().all_gather(list(tensor_list), tensor, async_op), async_op)

    def all_gather_v(self, tensor_list, tensor, async_op):
        with _trace(self, "all_gather_v", self._rank(), list(tensor_list), [tensor]):
            return _result(self._c().all_gather_v(list(tensor_list), tensor, async_op), async_op)

    def all_gather_single(self, output, input, async_op):
        with _trace(self, "all_gather_single", self._rank(), [input], [output]):
            return _result(self._c().all_gather_single(output, input, async_op), async_op)

    def reduce_scatter(self, output, input_list, op, async_op):
        with _trace(self, "reduce_scatter", self._rank(), list(input_list), [output]):
            return _result(self._c().reduce_scatter(output, list(input_list), _op(op), async_op),
                           async_op)

    def reduce_scatter_v(self, output, input_list, op, async_op):
        with _trace(self, "reduce_scatter_v", self._rank(), list(input_list), [output]):
            return _result(self._c().reduce_scatter_v(output, list(input_list), _op(op), async_op),
                           async_op)

    def reduce_scatter_single(self, output, input, op, async_op):
        with _trace(self, "reduce_scatter_single", self._rank(), [input], [output]):
            return _result(self._c().reduce_scatter_single(output, input, _op(op), async_op),
                           async_op)

    def all_to_all_single(self, output, input, async_op):
        with _trace(self, "all_to_all_single", self._rank(), [input], [output]):
            return _result(self._c().all_to_all_single(output, input, async_op), async_op)

    def all_to_all_v_single(self, output, input, output_split_sizes, input_split_sizes,
                            async_op):
        with _trace(self, "all_to_all_v_single", self._rank(), [input], [output]):
            return _result(self._c().all_to_all_v_single(output, input, list(output_split_sizes),
                                                         list(input_split_sizes), async_op),
                           async_op)

    def all_to_all(self, output_tensor_list, input_tensor_list, async_op):
        with _trace(self, "all_to_all", self._rank(), list(input_tensor_list), list(output_tensor_list)):
            return _result(self._c().all_to_all(list(output_tensor_list), list(input_tensor_list),
                                                async_op), async_op)

    def barrier(self, async_op):
        with _trace(self, "barrier", self._rank(), [], []):
            return _result(self._c().barrier(async_op), async_op)

    def scatter(self, output_tensor, input_tensor_list, root, async_op):
        with _trace(self, "scatter", root, list(input_tensor_list), [output_tensor]):
            return _result(self._c().scatter(output_tensor, list(input_tensor_list), root,
                                             async_op), async_op)

    def gather(self, output_tensor_list, input_tensor, root, async_op):
        with _trace(self, "gather", root, [input_tensor], list(output_tensor_list)):
            return _result(self._c().gather(list(output_tensor_list), input_tensor, root,
                                            async_op), async_op)

    # ------------------------------------------------------------------ beyond the generic API
    # torchcomms routes none of these to Python backends: they are reached as
    # torchcomm.get_backend_impl().<method> (as NCCLX's are), with cclx.Comm's arguments, and
    # return cclx's Work (always: the caller, not torchcomms, waits on it).
    def comm_dump(self) -> Dict[str, str]:
        """The communicator's state for hang debugging (cclx.Comm.comm_dump; NCCLX's comm_dump
        returns the same type, dict[str, str])."""
        return self._c().comm_dump()

    def set_config(self, hints: Dict[str, str]) -> None:
        """Sets the named cclx hints and keeps the others (NCCLX's set_config; keys as cclx's
        hints, `cclx::KEY` / `cclx.KEY` too): an unknown key or a value not listed raises
        CclxInvalidArgument (a RuntimeError) and changes nothing."""
        self._c().set_config({_cclx_key(k): str(v) for k, v in dict(hints).items()})

    def all_gather_p_init(self, output, hints=None, timeout=None):
        """Persistent all-gather into `output` (cclx.Comm.all_gather_p_init): a handle."""
        return self._c().all_gather_p_init(output, hints, timeout)

    def all_gather_p_exec(self, handle, input, async_op=False, hints=None, timeout=None):
        with _trace(self, "all_gather_p_exec", self._rank(), [input], []):
            return self._c().all_gather_p_exec(handle, input, async_op, hints, timeout)

    def all_gather_p_free(self, handle) -> None:
        self._c().all_gather_p_free(handle)

    def device_alltoallv_single(self, output, input, output_split_sizes, input_split_sizes,
                                async_op=False, hints=None, timeout=None):
        """All-to-all-v with split sizes in device tensors (cclx.Comm.device_alltoallv_single)."""
        with _trace(self, "device_alltoallv_single", self._rank(), [input], [output]):
            return _method(self._c(), "device_alltoallv_single")(
                output, input, output_split_sizes, input_split_sizes, async_op, hints, timeout)

    def reduce_scatter_quantized(self, output, input, op, seed, async_op=False, hints=None,
                                 timeout=None):
        """f32 reduce-scatter over bf16 stochastic rounding (cclx.Comm.reduce_scatter_quantized)."""
        with _trace(self, "reduce_scatter_quantized", self._rank(), [input], [output]):
            return _method(self._c(), "reduce_scatter_quantized")(
                output, input, _op(op), seed, async_op, hints, timeout)


def _method(comm: Comm, name: str) -> Any:
    fn = getattr(comm, name, None)
    if fn is None:
        raise _C.CclxUnsupportedError(f"cclx torchcomms backend: {name} is not available in "
                                      f"this cclx build")
    return fn


def register() -> None:
    """Registers CclxBackend as torchcomms backend "cclx" (once per process)."""
    if not torchcomms._comms._is_backend_registered(BACKEND_NAME):
        torchcomms.register_backend(BACKEND_NAME, CclxBackend)


LIB_ENV = "TORCHCOMMS_BACKEND_LIB_PATH_CCLX"
CXX_LIBRARY_NAME = "libcclx_torchcomms.so"


def cxx_library() -> str:
    """Where libcclx_torchcomms.so would be: next to cclx._C (build tree and wheel alike)."""
    return os.path.join(os.path.dirname(os.path.abspath(_C.__file__)), CXX_LIBRARY_NAME)


def cxx_problem(path: str) -> Optional[str]:
    """None when the library at `path` loads and was built for the installed torchcomms;
    else what is wrong. Loading it resolves every symbol it takes from libtorchcomms, torch and
    libcclx (a library built against another torchcomms usually fails here already); the
    version it reports (cclx_torchcomms_build_info) must equal the installed torchcomms', whose
    headers fix TORCHCOMM_BACKEND_ABI_VERSION and the class layout torchcomms calls through."""
    if not os.path.isfile(path):
        return f"{path} does not exist"
    try:
        lib = ctypes.CDLL(path)
        fn = lib.cclx_torchcomms_build_info
    except (OSError, AttributeError) as e:
        return f"{path} does not load: {e}"
    fn.restype = ctypes.c_char_p
    info = dict(kv.split("=", 1) for kv in fn().decode().split(";") if "=" in kv)
    try:
        have = importlib.metadata.version("torchcomms")
    except importlib.metadata.PackageNotFoundError:
        have = getattr(torchcomms, "__version__", "unknown")
    if info.get("torchcomms") != have:
        return (f"{path} was built for torchcomms {info.get('torchcomms')}, torchcomms {have} "
                f"is installed")
    return None


def _select_route() -> str:
    """Sets the route for torchcomms.new_comm("cclx") (module docstring); returns it."""
    want = _C._torchcomms_route()
    given = os.environ.get(LIB_ENV)
    if want == "python":
        register()
        return "python"
    path = given or cxx_library()
    problem = cxx_problem(path)
    if problem is None:
        os.environ[LIB_ENV] = path  # torchcomms' factory reads it (getenv) on new_comm
        # Binds the C++ CclxBackend for Python (NCCLX's extra methods on get_backend_impl());
        # the route works without it, those methods then missing.
        if _ext() is None and os.path.isfile(os.path.join(os.path.dirname(path),
                                                          "libcclx_torchcomms.so")):
            import warnings

            warnings.warn(f"cclx torchcomms backend: cclx._cclx_torchcomms does not load "
                          f"({_ext_error or 'not built'}): get_backend_impl() lacks comm_dump, "
                          f"device_alltoallv_single and reduce_scatter_quantized")
        return "cxx"
    if want == "cxx" or given:
        raise _C.CclxUnsupportedError(
            f"cclx torchcomms backend: the C++ route was asked for "
            f"({'CCLX_TORCHCOMMS_ROUTE=cxx' if want == 'cxx' else LIB_ENV + ' is set'}) but "
            f"{problem}")
    register()
    return "python"


ROUTE = _select_route()
