"""Comm, Work and new_comm(): the torchcomms-style front end over cclx._C."""
from __future__ import annotations

import collections
import functools
import sys
import weakref
from typing import Any, Dict, List, Optional, Sequence

from . import _C, _rendezvous as rdv
from ._tensor import CUPY, TORCH, adapt, rows, same_dtype

ReduceOp = _C.ReduceOp


def _current_stream(framework: int, device_index: int) -> int:
    """The caller's current CUDA stream (cudaStream_t as int) for `framework`."""
    if framework == CUPY:
        import cupy  # type: ignore[import-not-found]

        return int(cupy.cuda.get_current_stream().ptr)
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(device_index))
    return int(torch.cuda.current_stream(device_index).cuda_stream)


def _capturing() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_current_stream_capturing()


def _checked(method):
    """Runs `method` on a live communicator. A timeout or error with
    abort_process_on_timeout_or_error on ends the process in the library itself (one line on
    stderr, the abort hooks, then abort), in the call or from the watchdog thread."""

    @functools.wraps(method)
    def wrapper(self: "Comm", *args, **kwargs):
        if self._closed is not None:
            raise _C.CclxUsageError(f"{method.__name__}: communicator {self._name!r} was "
                                    f"{self._closed}")
        return method(self, *args, **kwargs)

    return wrapper


class _HookHandle:
    """Returned by register_*_hook; remove() unregisters the hook."""

    __slots__ = ("_hooks", "_key")

    def __init__(self, hooks: Dict[int, Any], key: int) -> None:
        self._hooks = hooks
        self._key = key

    def remove(self) -> None:
        self._hooks.pop(self._key, None)


class Work:
    """Handle on a collective. Keeps the tensors it uses alive until it is dropped."""

    __slots__ = ("_w", "_tensors", "_cuda", "_dev", "_fw")

    def __init__(self, w: Any, tensors: tuple, cuda: bool, dev: int, fw: int) -> None:
        self._w = w
        self._tensors = tensors
        self._cuda = cuda
        self._dev = dev
        self._fw = fw

    def wait(self) -> None:
        """CUDA: the caller's current stream waits for the operation (the host does not block).
        CPU: returns once the operation is complete."""
        stream = _current_stream(self._fw, self._dev) if self._cuda else 0
        self._w.wait(stream)

    def wait_blocking(self, timeout: Any = None) -> None:
        """Blocks the host until the operation completes. timeout (timedelta or seconds; None =
        the communicator's) expiring raises CclxTimeoutError."""
        t = 0.0 if timeout is None else rdv.timeout_seconds(timeout)
        self._w.wait_blocking(t)

    def is_completed(self) -> bool:
        """Non-blocking poll; raises if the operation failed."""
        return self._w.is_completed()


class Comm:
    """A communicator of get_size() ranks on one device (create it with cclx.new_comm)."""

    def __init__(self, c: Any, device: Any, store: Any) -> None:
        self._c = c
        self._device = device
        self._store = store
        self._abort_hooks: Dict[int, Any] = {}
        self._next_hook = 0
        # The library calls this (with the reason) when the comm aborts: abort(), or a timeout /
        # error with abort_process_on_timeout_or_error, just before the process ends.
        me = weakref.ref(self)
        c.add_abort_hook(lambda reason: (lambda s: s and s._run_abort_hooks(reason))(me()))
        self._closed: Optional[str] = None
        self._rank = c.rank
        self._size = c.size
        self._name = c.name
        self._cuda = c.device_type == 1
        self._dev = c.device_index
        self._pending: collections.deque = collections.deque()

    # ----------------------------------------------------------------- properties
    def get_rank(self) -> int:
        """This process's rank in the communicator."""
        return self._rank

    def get_size(self) -> int:
        """Number of ranks."""
        return self._size

    def get_name(self) -> str:
        """The communicator's name."""
        return self._name

    def get_backend(self) -> str:
        """'cclx' or 'nccl'."""
        return self._c.backend

    def get_device(self) -> Any:
        """The device: a torch.device when torch is loaded, else 'cpu' / 'cuda:N'."""
        return self._device

    def __repr__(self) -> str:
        state = f", {self._closed}" if self._closed else ""
        return (f"cclx.Comm(name={self._name!r}, rank={self._rank}, size={self._size}, "
                f"device={self._device!s}, backend={self._c.backend!r}{state})")

    # ----------------------------------------------------------------- helpers
    def _opts(self, fw: int, async_op: bool, hints: Any, timeout: Any):
        stream = _current_stream(fw, self._dev) if self._cuda else 0
        h = rdv.hints_dict(hints)
        t = 0.0 if timeout is None else rdv.timeout_seconds(timeout)
        return bool(async_op), stream, h, t

    def _work(self, w: Any, async_op: bool, fw: int, tensors: tuple) -> Work:
        work = Work(w, tensors, self._cuda, self._dev, fw)
        if self._cuda and async_op:
            # Tensors must outlive an op on the internal stream even if the Work is dropped.
            pend = self._pending
            if pend and not _capturing():
                while pend:
                    try:
                        if not pend[0].is_completed():
                            break
                    except _C.CclxError:
                        pass
                    pend.popleft()
            pend.append(work)
        return work

    def _out(self, t: Any, what: str, code: int):
        obj, c2, _ = adapt(t, what, writable=True)
        same_dtype(code, c2, what)
        return obj

    # ----------------------------------------------------------------- collectives
    @_checked
    def all_reduce(self, tensor: Any, op: Any = ReduceOp.SUM, async_op: bool = False,
                   hints: Optional[Dict[str, Any]] = None, timeout: Any = None, *,
                   output: Any = None) -> Work:
        """Reduces `tensor` over all ranks in place (or into `output` when given)."""
        a, code, fw = adapt(tensor, "all_reduce: tensor", writable=output is None)
        o = None if output is None else self._out(output, "all_reduce: output", code)
        w = self._c.all_reduce(a, o, code, op, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor, output))

    allreduce = all_reduce

    @_checked
    def reduce(self, tensor: Any, root: int, op: Any = ReduceOp.SUM, async_op: bool = False,
               hints: Optional[Dict[str, Any]] = None, timeout: Any = None, *,
               output: Any = None) -> Work:
        """Reduces `tensor` over all ranks into `tensor` (or `output`) on rank `root` only."""
        a, code, fw = adapt(tensor, "reduce: tensor", writable=output is None)
        o = None if output is None else self._out(output, "reduce: output", code)
        w = self._c.reduce(a, o, code, op, root, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor, output))

    @_checked
    def broadcast(self, tensor: Any, root: int, async_op: bool = False,
                  hints: Optional[Dict[str, Any]] = None, timeout: Any = None, *,
                  output: Any = None) -> Work:
        """Copies rank `root`'s `tensor` into `tensor` (or `output`) on every rank."""
        a, code, fw = adapt(tensor, "broadcast: tensor", writable=output is None)
        o = None if output is None else self._out(output, "broadcast: output", code)
        w = self._c.broadcast(a, o, code, root, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor, output))

    @_checked
    def all_gather(self, tensor_list: Sequence[Any], tensor: Any, async_op: bool = False,
                   hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Work:
        """tensor_list[r] = rank r's `tensor` (get_size() tensors of tensor's size)."""
        a, code, fw = adapt(tensor, "all_gather: tensor")
        outs = [self._out(t, "all_gather: tensor_list entry", code) for t in tensor_list]
        w = self._c.all_gather_list(a, outs, code, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor, list(tensor_list)))

    @_checked
    def all_gather_single(self, output: Any, input: Any, async_op: bool = False,
                          hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Work:
        """output = concatenation over ranks of `input` (output has get_size() x its size)."""
        a, code, fw = adapt(input, "all_gather_single: input")
        o = self._out(output, "all_gather_single: output", code)
        w = self._c.all_gather(a, o, code, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, input))

    @_checked
    def reduce_scatter(self, output: Any, input_list: Sequence[Any], op: Any = ReduceOp.SUM,
                       async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                       timeout: Any = None) -> Work:
        """output = reduction over ranks of input_list[rank] (get_size() inputs)."""
        o_obj, code, fw = adapt(output, "reduce_scatter: output", writable=True)
        ins = []
        for t in input_list:
            obj, c2, _ = adapt(t, "reduce_scatter: input_list entry")
            same_dtype(code, c2, "reduce_scatter: input_list entry")
            ins.append(obj)
        w = self._c.reduce_scatter_list(ins, o_obj, code, op,
                                        *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, list(input_list)))

    @_checked
    def reduce_scatter_single(self, output: Any, input: Any, op: Any = ReduceOp.SUM,
                              async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                              timeout: Any = None) -> Work:
        """output = reduction over ranks of block `rank` of `input` (get_size() blocks)."""
        a, code, fw = adapt(input, "reduce_scatter_single: input")
        o = self._out(output, "reduce_scatter_single: output", code)
        w = self._c.reduce_scatter(a, o, code, op, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, input))

    @_checked
    def all_to_all_single(self, output: Any, input: Any, async_op: bool = False,
                          hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Work:
        """Block r of `input` goes to rank r, landing as block `rank` of its `output`."""
        a, code, fw = adapt(input, "all_to_all_single: input")
        o = self._out(output, "all_to_all_single: output", code)
        w = self._c.all_to_all(a, o, code, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, input))

    @_checked
    def all_to_all_v_single(self, output: Any, input: Any, output_split_sizes: Sequence[int],
                            input_split_sizes: Sequence[int], async_op: bool = False,
                            hints: Optional[Dict[str, Any]] = None,
                            timeout: Any = None) -> Work:
        """Like all_to_all_single with per-rank split sizes along dim 0 (torch semantics)."""
        a, code, fw = adapt(input, "all_to_all_v_single: input")
        o = self._out(output, "all_to_all_v_single: output", code)
        # Rows to elements; the counts are checked by the binding (sign, sum) and the C++ API
        # (one per rank).
        send_row, recv_row = rows(input)[1], rows(output)[1]
        send = [int(s) * send_row for s in input_split_sizes]
        recv = [int(s) * recv_row for s in output_split_sizes]
        w = self._c.all_to_all_v(a, o, send, recv, code,
                                 *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, input))

    @_checked
    def send(self, tensor: Any, dst: int, async_op: bool = False,
             hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Work:
        """Sends `tensor` to rank `dst` (which calls recv with a tensor of the same size)."""
        a, code, fw = adapt(tensor, "send: tensor")
        w = self._c.send(a, code, dst, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor,))

    @_checked
    def recv(self, tensor: Any, src: int, async_op: bool = False,
             hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Work:
        """Receives into `tensor` from rank `src`."""
        a, code, fw = adapt(tensor, "recv: tensor", writable=True)
        w = self._c.recv(a, code, src, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor,))

    @_checked
    def barrier(self, async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                timeout: Any = None) -> Work:
        """Returns (or completes the Work) once every rank has entered the barrier."""
        w = self._c.barrier(*self._opts(TORCH, async_op, hints, timeout))
        return self._work(w, async_op, TORCH, ())

    # ----------------------------------------------------------------- one-sided windows
    @_checked
    def new_window(self, tensor: Any = None) -> "Window":
        """Collective: a one-sided window (cclx.window.Window), with `tensor` registered when
        given (tensor_register is collective too: every rank the same size and dtype)."""
        from .window import Window

        w = Window(self, self._c.new_window())
        if tensor is not None:
            w.tensor_register(tensor)
        return w

    def _require_open(self, what: str) -> None:
        if self._closed is not None:
            raise _C.CclxUsageError(f"{what}: communicator {self._name!r} was {self._closed}")

    # ----------------------------------------------------------------- lifetime
    @_checked
    def split(self, ranks: Sequence[int], name: str, hints: Optional[Dict[str, Any]] = None,
              timeout: Any = None) -> Optional["Comm"]:
        """Collective over all ranks: those in `ranks` get a new Comm (renumbered in list order),
        the others None. `hints` and `timeout` are accepted for torchcomms compatibility."""
        ranks = [int(r) for r in ranks]
        if len(set(ranks)) != len(ranks):
            raise _C.CclxInvalidArgument(f"split: ranks {ranks} contain duplicates")
        c = self._c.split(ranks, str(name))
        if c is None:
            return None
        return Comm(c, self._device, self._store)

    @_checked
    def finalize(self) -> None:
        """Orderly shutdown once outstanding work completes; later calls raise CclxUsageError."""
        self._c.finalize()
        self._closed = "finalized"
        self._pending.clear()

    def abort(self) -> None:
        """Abandons outstanding work: this rank's kernels stop and the peers' fail at once (their
        outputs NaN); runs the abort hooks; later calls raise."""
        if self._closed is None:
            self._closed = "aborted"
            self._c.abort()

    def is_aborted(self) -> bool:
        """True after abort() on this rank."""
        return self._c.is_aborted()

    def register_abort_hook(self, hook: Any) -> _HookHandle:
        """hook(reason) runs once when the comm aborts: abort(), or a timeout or error with
        abort_process_on_timeout_or_error on, just before the process ends (then possibly on the
        library's watchdog thread). Returns a handle with remove()."""
        if not callable(hook):
            raise rdv.bad(f"register_abort_hook: hook must be callable, got {type(hook).__name__}")
        key = self._next_hook
        self._next_hook += 1
        self._abort_hooks[key] = hook
        return _HookHandle(self._abort_hooks, key)

    def _run_abort_hooks(self, reason: str) -> None:
        for hook in list(self._abort_hooks.values()):
            try:
                hook(reason)
            except Exception as e:  # a failing hook must not keep the others from running
                sys.stderr.write(f"cclx: abort hook {hook!r} raised {type(e).__name__}: {e}\n")

    def get_algo(self, count: int, dtype: Any, op: Any = ReduceOp.SUM,
                 hints: Optional[Dict[str, Any]] = None) -> str:
        """Algorithm an all_reduce of `count` elements of `dtype` would use (diagnostics)."""
        return self._c.select_all_reduce_algo(int(count), int(dtype), op, rdv.hints_dict(hints))


def new_comm(backend: str, device: Any, *, name: Optional[str] = None, store: Any = None,
             timeout: Any = None, hints: Optional[Dict[str, Any]] = None,
             abort_process_on_timeout_or_error: Optional[bool] = None) -> Comm:
    """Creates a communicator over all ranks of the job (collective).

    backend: "cclx" (direct-access and FP8 algorithms, NCCL underneath) or "nccl".
    device: torch.device or "cpu" / "cuda" / "cuda:N". Without an index the device is
      LOCAL_RANK (else rank) modulo the device count, and becomes torch's current device.
    Rank and size come from TORCHCOMM_RANK/TORCHCOMM_SIZE, else RANK/WORLD_SIZE; without a
    `store` the ranks meet at MASTER_ADDR:MASTER_PORT (under torchrun through its store).
    timeout: timedelta or seconds; None: CCLX_TIMEOUT (or TORCHCOMM_TIMEOUT_SECONDS; 0 = no
      timeout), else 600 s. hints: e.g. {"algo": "tree"}.
    abort_process_on_timeout_or_error: on a timeout or error, print one line naming the comm, the
      op and the missing ranks, run the abort hooks and abort the process (as torchcomms); off:
      the comm fails and its next call and every Work method raise. None: CCLX_ABORT_ON_ERROR
      (or TORCHCOMM_ABORT_ON_ERROR), else on.
    """
    if backend not in ("cclx", "nccl"):
        raise rdv.bad(f"unknown backend {backend!r} (expected 'cclx' or 'nccl')")
    dev_type, index = rdv.parse_device(device)
    rank, size = rdv.rank_size()
    t = rdv.timeout_seconds(timeout)
    h = rdv.hints_dict(hints)
    name = "default" if name is None else str(name)
    if dev_type == 1:
        index = rdv.resolve_cuda_index(index, rank)
        rdv.set_nccl_pip_dir()
    else:
        index = -1
    prefix = rdv.next_prefix(name)
    if store is None:
        base = rdv.default_store(rank, size, prefix, t)
    elif isinstance(store, _C.Store):
        base = store
    elif hasattr(store, "set") and hasattr(store, "get"):
        base = rdv._via_foreign(store, rank, prefix, t)
    else:
        raise rdv.bad(f"store must be a cclx.Store or a torch.distributed.Store, got "
                      f"{type(store).__name__}")
    abort = -1 if abort_process_on_timeout_or_error is None else int(
        bool(abort_process_on_timeout_or_error))
    c = _C.Comm.create(dev_type, index, name, backend, t, h, _C.prefix_store(base, prefix),
                       rank, size, abort)
    torch = sys.modules.get("torch")
    if dev_type == 1:
        dev_obj: Any = f"cuda:{c.device_index}" if c.device_index >= 0 else "cuda"
    else:
        dev_obj = "cpu"
    if torch is not None:
        dev_obj = torch.device(dev_obj)
    return Comm(c, dev_obj, base)
