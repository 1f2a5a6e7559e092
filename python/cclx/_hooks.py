"""Hooks on a communicator's operations, with torchcomms' signatures:

* pre-hook ``cb(name: OpName, op_id: int, args)`` before an operation runs, where ``args``
  carries the call's arguments under torchcomms' names (``tensor``, ``input``, ``output``,
  ``root``, ``peer``, ``op``, ``async_op``, ``num_ops``, ...), also under the method's own
  parameter names, and the OpName as ``op_name``;
* post-hook ``cb(op_id: int, args)`` once the operation returned (``args.work``: its Work,
  ``args.new_comm`` for split) or raised (``args.error``: the exception, then re-raised);
* abort hook ``cb()`` (or ``cb(reason)``) once when the communicator aborts: ``abort()``, or a
  timeout or error with abort_process_on_timeout_or_error on (the library calls
  ``Comm._run_abort_hooks(reason)``).

Each registration returns a RemovableHandle. Op ids increase across all communicators of the
process. A communicator without pre/post hooks keeps ``_hooks`` None, and its call path tests only
that (one attribute load): hooks cost nothing until registered. This module knows an operation
through its description (Op: name, method, parameters) and a communicator only through the
attributes it keeps hooks in; it imports nothing of Comm.
"""
from __future__ import annotations

import enum
import inspect
import itertools
import sys
from typing import Any, Callable, Dict, Optional

from ._work import Work


class OpName(enum.Enum):
    """The operation a hook is called for (torchcomms' OpName)."""

    send = "send"
    recv = "recv"
    broadcast = "broadcast"
    all_reduce = "all_reduce"
    reduce = "reduce"
    all_gather = "all_gather"
    all_gather_v = "all_gather_v"
    all_gather_single = "all_gather_single"
    reduce_scatter = "reduce_scatter"
    reduce_scatter_v = "reduce_scatter_v"
    reduce_scatter_single = "reduce_scatter_single"
    all_to_all_single = "all_to_all_single"
    all_to_all_v_single = "all_to_all_v_single"
    device_alltoallv_single = "device_alltoallv_single"  # NCCLX's: split sizes where the data is
    all_to_all = "all_to_all"
    barrier = "barrier"
    scatter = "scatter"
    gather = "gather"
    gather_single = "gather_single"
    split = "split"
    new_window = "new_window"
    batch_op_issue = "batch_op_issue"
    finalize = "finalize"


def op_of(method_name: str) -> Optional[OpName]:
    """The OpName of a Comm method ('_batch_op_issue' -> batch_op_issue), or None."""
    return OpName.__members__.get(method_name.lstrip("_"))


class RemovableHandle:
    """Returned by register_*_hook; remove() unregisters the hook (idempotent)."""

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn: Optional[Callable[[], None]] = fn

    def remove(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn()


class HookArgs:
    """Arguments of one operation, as attributes (see the module docstring)."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={type(v).__name__}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({items})"


class PreHookArgs(HookArgs):
    """Arguments a pre-hook gets."""


class PostHookArgs(HookArgs):
    """What a post-hook gets: name / op_name (the OpName), work (or None), new_comm (split),
    error (or None)."""


# torchcomms' attribute names for this package's parameter names.
_RENAME = {
    "dst": "peer",
    "src": "peer",
    "tensor_list": "output",
    "input_list": "input",
    "input_tensor_list": "input",
    "output_tensor_list": "output",
    "output_tensor": "output",
    "input_tensor": "input",
}
_GATHERS = (OpName.all_gather, OpName.all_gather_v)  # their `tensor` is the input

_op_ids = itertools.count()


class _Binder:
    """Maps a call's positional and keyword arguments to parameter names (a light
    inspect.Signature.bind: hooks run on every call)."""

    __slots__ = ("names", "defaults", "required", "renames")

    def __init__(self, method: Callable, op: OpName) -> None:
        params = list(inspect.signature(method).parameters.values())[1:]  # without self
        self.names = [p.name for p in params]
        self.defaults = {p.name: p.default for p in params if p.default is not p.empty}
        self.required = [p.name for p in params if p.default is p.empty]
        self.renames = [(k, v) for k, v in _RENAME.items() if k in self.names]
        if op in _GATHERS:
            self.renames.append(("tensor", "input"))

    def bind(self, args: tuple, kwargs: dict) -> Optional[dict]:
        if len(args) > len(self.names):
            return None
        d = dict(self.defaults)
        d.update(zip(self.names, args))
        d.update(kwargs)
        for k in self.required:
            if k not in d:
                return None  # the call itself raises TypeError
        return d


class Op:
    """What the hooks know of an operation (an op description, made once per wrapped method):
    its OpName (None for a method without one), the method, and its parameters bound to
    torchcomms' names (prepared on the first call with a pre-hook)."""

    __slots__ = ("name", "method", "_binder")

    def __init__(self, method: Callable) -> None:
        self.name: Optional[OpName] = op_of(method.__name__)
        self.method = method
        self._binder: Optional[_Binder] = None

    def pre_args(self, args: tuple, kwargs: dict) -> Optional[PreHookArgs]:
        """The pre-hooks' arguments of one call, or None when the call does not bind (it raises
        TypeError itself)."""
        op = self.name
        b = self._binder
        if b is None:
            b = self._binder = _Binder(self.method, op)
        kw = b.bind(args, kwargs)
        if kw is None:
            return None
        for k, v in b.renames:
            kw[v] = kw[k]
        if op is OpName.batch_op_issue:
            kw["num_ops"] = len(kw.get("ops") or ())
        kw["op_name"] = op  # (`name` is split's argument)
        pre = PreHookArgs.__new__(PreHookArgs)
        pre.__dict__ = kw
        return pre


class HookSet:
    """A communicator's pre and post hooks, in registration order."""

    __slots__ = ("pre", "post", "_next")

    def __init__(self) -> None:
        self.pre: Dict[int, Callable] = {}
        self.post: Dict[int, Callable] = {}
        self._next = 0

    def add(self, kind: str, cb: Callable) -> int:
        self._next += 1
        getattr(self, kind)[self._next] = cb
        return self._next


def register(comm: Any, kind: str, cb: Callable) -> RemovableHandle:
    """Adds a 'pre' or 'post' hook to `comm`."""
    if not callable(cb):
        raise TypeError(f"register_{kind}_hook: {cb!r} is not callable")
    hooks = comm._hooks
    if hooks is None:
        hooks = comm._hooks = HookSet()
    key = hooks.add(kind, cb)

    def remove() -> None:
        getattr(hooks, kind).pop(key, None)
        if comm._hooks is hooks and not hooks.pre and not hooks.post:
            comm._hooks = None  # back to the hook-free path

    return RemovableHandle(remove)


def _takes_reason(cb: Callable) -> bool:
    """True when `cb` can be called with one positional argument but not with none."""
    try:
        sig = inspect.signature(cb)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind()
        return False
    except TypeError:
        pass
    try:
        sig.bind("reason")
        return True
    except TypeError:
        return False


def register_abort(comm: Any, cb: Callable) -> RemovableHandle:
    if not callable(cb):
        raise TypeError(f"register_abort_hook: {cb!r} is not callable")
    if comm._abort_hooks is None:
        comm._abort_hooks = {}
    hooks = comm._abort_hooks
    key = object()
    hooks[key] = (cb, _takes_reason(cb))
    return RemovableHandle(lambda: hooks.pop(key, None))


def run_abort(comm: Any, reason: str) -> None:
    """Calls every abort hook of `comm` once (later calls do nothing): cb(), or cb(reason) for a
    hook that takes an argument; a hook that raises is reported on stderr and the others still
    run."""
    if comm._abort_hooks_ran:
        return
    comm._abort_hooks_ran = True
    comm._abort_reason = reason
    for cb, with_reason in list((comm._abort_hooks or {}).values()):
        try:
            if with_reason:
                cb(reason)
            else:
                cb()
        except Exception as e:  # noqa: BLE001 - on the way to an abort: keep going
            sys.stderr.write(f"cclx: abort hook {cb!r} raised {type(e).__name__}: {e}\n")
            sys.stderr.flush()


def call(comm: Any, desc: Op, args: tuple, kwargs: dict) -> Any:
    """Runs the operation `desc` on `comm` with `comm`'s pre and post hooks around it."""
    hooks: HookSet = comm._hooks
    op = desc.name
    op_id = next(_op_ids)
    try:
        if hooks.pre and op is not None:
            pre = desc.pre_args(args, kwargs)
            if pre is not None:
                for cb in list(hooks.pre.values()):
                    cb(op, op_id, pre)
        result = desc.method(comm, *args, **kwargs)
    except BaseException as e:
        if hooks.post:
            post = PostHookArgs(name=op, op_name=op, work=None, new_comm=None, error=e)
            for cb in list(hooks.post.values()):
                cb(op_id, post)
        raise
    if hooks.post:
        post = PostHookArgs(name=op, op_name=op,
                            work=result if isinstance(result, Work) else None,
                            new_comm=result if op is OpName.split else None, error=None)
        for cb in list(hooks.post.values()):
            cb(op_id, post)
    return result
