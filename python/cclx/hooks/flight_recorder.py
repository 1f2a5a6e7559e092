"""FlightRecorderHook: the last N operations of each communicator it is registered with.

Each entry (JSON keys as in torchcomms' flight recorder where they exist):
  record_id, op_id, comm, rank, profiling_name ("cclx:<op>"), state, async_op,
  input_sizes / input_dtypes / output_sizes / output_dtypes (one per tensor),
  root / peer when the op has one, algorithm (all_reduce: what the comm selects for the call;
  null where not known), timeout_ms, time_created_ns (pre-hook), time_enqueued_ns (the call
  returned), time_discovered_completed_ns, duration_ms (created -> completion discovered), error.
States: "scheduled" (the call is running), "started" (returned; the Work is not known complete:
async or CUDA work), "completed", "failed" (the call raised or its Work reported an error).
Completion of outstanding Works is polled (never waited for) on every dump and every new record.
"""
from __future__ import annotations

import collections
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import weakref
from typing import Any, Deque, Dict, List, Optional

from .. import _C
from .._hooks import OpName, RemovableHandle
from .._rendezvous import timeout_seconds
from .._tensor import dtype_of

_VERSION = "cclx-fr-1"


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _tensors(x: Any) -> List[Any]:
    if x is None:
        return []
    if _is_tensor(x):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for t in x if _is_tensor(t)]
    return []


def _sizes(ts: List[Any]) -> List[List[int]]:
    return [[int(s) for s in t.shape] for t in ts]


_DTYPE_NAMES: Dict[Any, str] = {}


def _dtype_name(d: Any) -> str:
    name = _DTYPE_NAMES.get(d)
    if name is None:
        name = _DTYPE_NAMES[d] = str(d).replace("torch.", "")
    return name


def _dtypes(ts: List[Any]) -> List[str]:
    return [_dtype_name(t.dtype) for t in ts]


def _io(op: OpName, args: Any):
    """(inputs, outputs) of an operation's pre-hook args."""
    g = args.__dict__.get
    if op is OpName.batch_op_issue:
        ops = g("ops") or ()
        return ([o.tensor for o in ops if o.type.name == "SEND"],
                [o.tensor for o in ops if o.type.name == "RECV"])
    if op is OpName.send:
        return _tensors(g("tensor")), []
    if op is OpName.recv:
        return [], _tensors(g("tensor"))
    if op in (OpName.all_reduce, OpName.reduce, OpName.broadcast):
        t = _tensors(g("tensor"))
        out = _tensors(g("output"))
        return t, out or t
    return _tensors(g("input")), _tensors(g("output"))


class _Ring:
    __slots__ = ("comm", "name", "rank", "size", "backend", "version", "entries")

    def __init__(self, comm: Any, max_entries: int) -> None:
        self.comm = weakref.ref(comm)
        self.name = comm.get_name()
        self.rank = comm.get_rank()
        self.size = comm.get_size()
        self.backend = comm.get_backend()
        try:
            self.version = comm.get_backend_version()
        except Exception:  # noqa: BLE001 - informational
            self.version = None
        self.entries: Deque[Dict[str, Any]] = collections.deque(maxlen=max_entries)


class FlightRecorderHook:
    """Records the last `max_entries` operations of every communicator it is registered with
    (one ring per communicator). dump_json()/dump_file() on demand; registered communicators that
    abort (their abort hooks run) dump to `dump_path` (default: the temp directory,
    cclx_fr_<comm>_rank<rank>_<pid>.json; {name}, {rank}, {pid} are filled in) and say so on
    stderr."""

    def __init__(self, max_entries: int = 2048, dump_path: Optional[str] = None) -> None:
        if int(max_entries) < 1:
            raise ValueError(f"FlightRecorderHook: max_entries must be >= 1 (got {max_entries})")
        self._max = int(max_entries)
        self._dump_path = dump_path
        self._rings: List[_Ring] = []
        self._open: Dict[int, Dict[str, Any]] = {}  # op_id -> entry awaiting its post-hook
        self._live: List[Dict[str, Any]] = []  # entries whose Work is not known complete
        self._ids = itertools.count()
        self._lock = threading.RLock()
        self._handles: List[RemovableHandle] = []
        self.abort_reason: Optional[str] = None

    # ----------------------------------------------------------------- registration
    def register_with_comm(self, comm: Any) -> None:
        """Starts recording `comm`'s operations (pre, post and abort hooks)."""
        ring = _Ring(comm, self._max)
        with self._lock:
            self._rings.append(ring)
        me = weakref.ref(self)

        def pre(name: OpName, op_id: int, args: Any) -> None:
            fr = me()
            if fr is not None:
                fr._pre(ring, name, op_id, args)

        def post(op_id: int, args: Any) -> None:
            fr = me()
            if fr is not None:
                fr._post(op_id, args)

        def on_abort() -> None:
            fr = me()
            if fr is not None:
                fr._on_abort(ring)

        self._handles += [comm.register_pre_hook(pre), comm.register_post_hook(post),
                          comm.register_abort_hook(on_abort)]

    def unregister(self) -> None:
        """Stops recording (the entries stay)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def is_enabled(self) -> bool:
        """True while registered with at least one communicator."""
        return bool(self._handles)

    # ----------------------------------------------------------------- recording
    def _pre(self, ring: _Ring, op: OpName, op_id: int, args: Any) -> None:
        ins, outs = _io(op, args)
        g = args.__dict__.get
        e: Dict[str, Any] = {
            "record_id": next(self._ids), "op_id": op_id, "comm": ring.name, "rank": ring.rank,
            "profiling_name": "cclx:" + op.value, "state": "scheduled",
            "async_op": bool(g("async_op", False)),
            "input_sizes": _sizes(ins), "input_dtypes": _dtypes(ins),
            "output_sizes": _sizes(outs), "output_dtypes": _dtypes(outs),
            "algorithm": None, "timeout_ms": self._timeout_ms(ring, g("timeout")),
            "time_created_ns": time.time_ns(), "time_enqueued_ns": None,
            "time_discovered_completed_ns": None, "duration_ms": None, "error": None,
        }
        for k in ("root", "peer"):
            if g(k) is not None:
                e[k] = int(g(k))
        if op is OpName.all_reduce and ins:
            e["algorithm"] = self._allreduce_algo(ring, ins[0], g("op"), g("hints"))
        with self._lock:
            self._poll()
            ring.entries.append(e)
            self._open[op_id] = e

    def _post(self, op_id: int, args: Any) -> None:
        with self._lock:
            e = self._open.pop(op_id, None)
            if e is None:
                return
            e["time_enqueued_ns"] = time.time_ns()
            if args.error is not None:
                self._finish(e, "failed", args.error)
                return
            w = getattr(args.work, "_w", None)
            if w is None:  # split, finalize: done when the call returns
                self._finish(e, "completed")
                return
            e["state"] = "started"
            e["_work"] = w  # the C++ Work only: the tensors are not kept alive
            self._live.append(e)
            self._poll()

    def _finish(self, e: Dict[str, Any], state: str, error: Any = None) -> None:
        now = time.time_ns()
        e["state"] = state
        e["time_discovered_completed_ns"] = now
        e["duration_ms"] = (now - e["time_created_ns"]) / 1e6
        if error is not None:
            e["error"] = f"{type(error).__name__}: {error}"
        e.pop("_work", None)

    def _poll(self) -> None:
        keep = []
        for e in self._live:
            w = e.get("_work")
            if w is None:
                continue
            try:
                done = w.is_completed()
            except Exception as err:  # noqa: BLE001 - the op failed: record it
                self._finish(e, "failed", err)
                continue
            if done:
                self._finish(e, "completed")
            else:
                keep.append(e)
        self._live = keep

    @staticmethod
    def _timeout_ms(ring: _Ring, t: Any) -> Optional[float]:
        try:
            if t is not None:
                return timeout_seconds(t) * 1000.0
            comm = ring.comm()
            return comm._c.timeout * 1000.0 if comm else None
        except Exception:  # noqa: BLE001 - informational
            return None

    @staticmethod
    def _allreduce_algo(ring: _Ring, t: Any, op: Any, hints: Any) -> Optional[str]:
        comm = ring.comm()
        if comm is None:
            return None
        try:
            n = 1
            for s in t.shape:
                n *= int(s)
            return comm.get_algo(n, dtype_of(t), op if op is not None else _C.ReduceOp.SUM,
                                 hints)
        except Exception:  # noqa: BLE001 - unknown: the call itself reports bad arguments
            return None

    # ----------------------------------------------------------------- dumps
    def entries(self, include_completed: bool = True) -> List[Dict[str, Any]]:
        """Copies of the recorded entries, oldest first."""
        with self._lock:
            self._poll()
            out = []
            for ring in self._rings:
                for e in ring.entries:
                    if include_completed or e["state"] != "completed":
                        out.append({k: v for k, v in e.items() if not k.startswith("_")})
        return sorted(out, key=lambda e: e["record_id"])

    def dump_json(self, include_completed: bool = True) -> str:
        """Every registered communicator's ring as one JSON document."""
        doc = {
            "version": _VERSION,
            "pid": os.getpid(),
            "comm_lib_version": _C.__version__,
            "comms": [{"name": r.name, "rank": r.rank, "size": r.size, "backend": r.backend,
                       "backend_version": r.version} for r in self._rings],
            "abort_reason": self.abort_reason,
            "entries": self.entries(include_completed),
        }
        return json.dumps(doc, indent=1)

    def dump_file(self, path: Optional[str] = None, include_completed: bool = True) -> str:
        """Writes dump_json() to `path` (default: see the class docstring); returns the path."""
        ring = self._rings[0] if self._rings else None
        pattern = path or self._dump_path or os.path.join(
            tempfile.gettempdir(), "cclx_fr_{name}_rank{rank}_{pid}.json")
        dest = pattern.format(name=ring.name if ring else "none",
                              rank=ring.rank if ring else -1, pid=os.getpid())
        tmp = dest + ".tmp"
        with open(tmp, "w") as f:
            f.write(self.dump_json(include_completed))
        os.replace(tmp, dest)
        return dest

    def _on_abort(self, ring: _Ring) -> None:
        comm = ring.comm()
        self.abort_reason = getattr(comm, "_abort_reason", None) if comm else None
        path = self.dump_file()
        sys.stderr.write(f"cclx: flight recorder of comm {ring.name!r} (rank {ring.rank}): "
                         f"{len(ring.entries)} operation(s) written to {path}\n")
        sys.stderr.flush()

    def reset(self) -> None:
        """Forgets every entry."""
        with self._lock:
            for r in self._rings:
                r.entries.clear()
            self._open.clear()
            self._live = []

    def size(self) -> int:
        """Number of entries held."""
        with self._lock:
            return sum(len(r.entries) for r in self._rings)
