"""cclx.Comm's options and state beyond its calls: rank, size, get_options (CommOptions),
get_backend_version, comm_dump, is_aborted, set_timeout, set_hints, set_config; the pre, post and abort hooks'
registration (the hooks themselves: _hooks.py); memory (get_mem_allocator, tensor_register /
tensor_deregister). CommSettings is a base class of cclx.Comm."""
from __future__ import annotations

import datetime
from typing import Any, Callable, Dict, Optional

from . import _C, _hooks
from . import _rendezvous as rdv
from ._tensor import adapt


class CommOptions:
    """What get_options() returns (torchcomms' CommOptions fields)."""

    def __init__(self, **kw: Any) -> None:
        self.abort_process_on_timeout_or_error: bool = kw["abort_process_on_timeout_or_error"]
        self.timeout: datetime.timedelta = kw["timeout"]
        self.store: Any = kw["store"]
        self.name: str = kw["name"]
        self.hints: Dict[str, str] = kw["hints"]
        self.backend: str = kw["backend"]
        self.enable_reconfigure = False

    def __repr__(self) -> str:
        return (f"CommOptions(name={self.name!r}, backend={self.backend!r}, "
                f"timeout={self.timeout}, hints={self.hints}, "
                f"abort_process_on_timeout_or_error={self.abort_process_on_timeout_or_error})")


class CommSettings:
    """Options, hooks and memory of cclx.Comm (see the module docstring)."""

    # Hook state (set per instance on first registration; class defaults keep __init__ as is).
    _hooks: Optional[_hooks.HookSet] = None  # None = no pre/post hooks: the fast call path
    _abort_hooks: Optional[Dict[Any, Callable[[], None]]] = None
    _abort_hooks_ran = False
    _abort_reason: Optional[str] = None

    # ----------------------------------------------------------------- properties / settings
    @property
    def rank(self) -> int:
        """This process's rank (read-only)."""
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks (read-only)."""
        return self._size

    def get_options(self) -> CommOptions:
        """The communicator's options (timeout and hints as currently set)."""
        return CommOptions(abort_process_on_timeout_or_error=self._c.abort_on_error,
                           timeout=datetime.timedelta(seconds=self._c.timeout),
                           store=self._store, name=self._name, hints=dict(self._c.hints),
                           backend=self._c.backend)

    def get_backend_version(self) -> str:
        """'cclx <version>', plus ' NCCL <version>' for CUDA communicators."""
        return self._c.backend_version()

    def comm_dump(self) -> Dict[str, str]:
        """This communicator's state for hang debugging (NCCLX's comm_dump), as text values:
        rank, size, backend, ops_issued / ops_completed / ops_failed / in_flight (operations
        issued and not known to be complete) and in_flight_ops (the oldest 16), last_op,
        last_completed_op, failure ("none", else what broke the comm) and failure_ranks (the
        ranks it names), aborted, finalized, and algo.<collective> (the algorithm its last call
        ran). Local: never waits for peers; works after finalize() and abort()."""
        return dict(self._c.comm_dump())

    def is_abort_supported(self) -> bool:
        """Always True: every cclx communicator can abort."""
        return True

    def is_aborted(self) -> bool:
        """True once the communicator was aborted."""
        return self._closed == "aborted" or self._c.is_aborted()

    def set_timeout(self, timeout: Any) -> None:
        """Default timeout (timedelta or seconds, > 0) of later operations; per-call timeouts
        still win."""
        t = rdv.timeout_seconds(timeout)
        if not t > 0:
            raise _C.CclxInvalidArgument(f"set_timeout: the timeout must be positive (got {t})")
        self._c.set_timeout(t)

    def set_hints(self, hints: Optional[Dict[str, Any]]) -> None:
        """Replaces the communicator's hints; per-call hints still win. An unknown key or a value
        not listed (cclx._C.hint_keys(), docs/SETTINGS.md) raises CclxInvalidArgument and
        changes nothing."""
        self._c.set_hints(rdv.hints_dict(hints))

    def set_config(self, hints: Dict[str, Any]) -> None:
        """Sets the hints it names and keeps the others (NCCLX's set_config); checked as
        set_hints, nothing changes on a bad key or value."""
        self._c.update_hints(rdv.hints_dict(hints))

    # ----------------------------------------------------------------- hooks
    def register_pre_hook(self, callback: Callable) -> _hooks.RemovableHandle:
        """callback(name: OpName, op_id: int, args) before every operation."""
        return _hooks.register(self, "pre", callback)

    def register_post_hook(self, callback: Callable) -> _hooks.RemovableHandle:
        """callback(op_id: int, args) after every operation (args.error set when it raised)."""
        return _hooks.register(self, "post", callback)

    def register_abort_hook(self, callback: Callable[..., None]) -> _hooks.RemovableHandle:
        """callback() once when the communicator aborts: abort(), or a timeout or error with
        abort_process_on_timeout_or_error on, just before the process ends (then possibly on the
        library's watchdog thread). A callback that takes one argument gets the reason."""
        return _hooks.register_abort(self, callback)

    def _run_abort_hooks(self, reason: str = "") -> None:
        """Runs the abort hooks once (later calls do nothing); `reason` (what failed) is kept in
        self._abort_reason (the flight recorder dumps it). The library calls it when the comm
        aborts; a hook that raises is reported on stderr and the others still run."""
        _hooks.run_abort(self, str(reason))

    # ----------------------------------------------------------------- memory
    def get_mem_allocator(self) -> Any:
        """The allocator of this communicator's backend (cclx.get_mem_allocator): CUDA memory
        that windows map on the peers and registration makes zero-copy. CUDA communicators only."""
        if not self._cuda:
            raise _C.CclxUnsupportedError(
                f"get_mem_allocator: communicator {self._name!r} is a CPU communicator; the "
                "allocator gives CUDA memory (CPU windows take cclx.empty_shared())")
        from .memory import get_mem_allocator

        return get_mem_allocator(self.get_backend())

    @property
    def mem_allocator(self) -> Any:
        """get_mem_allocator() (torchcomms' older name)."""
        return self.get_mem_allocator()

    def tensor_register(self, tensor: Any) -> None:
        """Local: registers `tensor`'s memory (contiguous, on this communicator's device) so
        that later operations on it can skip staging copies: on CUDA communicators NCCL's buffer
        registration (zero-copy for memory from get_mem_allocator()); elsewhere checked and
        tracked. The communicator keeps the tensor alive until tensor_deregister or finalize.
        Registering the same memory twice raises CclxInvalidArgument."""
        self._live("tensor_register")
        obj, code, _ = adapt(tensor, "tensor_register: tensor")
        self._registered[self._c.register_memory(obj, code)] = tensor

    def tensor_deregister(self, tensor: Any) -> None:
        """Releases a tensor_register of the same memory (same start and size); anything else
        raises CclxInvalidArgument."""
        self._live("tensor_deregister")
        obj, code, _ = adapt(tensor, "tensor_deregister: tensor")
        self._registered.pop(self._c.deregister_memory(obj, code), None)

    def _live(self, what: str) -> None:
        if self._closed is not None:
            raise _C.CclxUsageError(f"{what}: communicator {self._name!r} was {self._closed}")
