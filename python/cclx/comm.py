"""Comm and new_comm(): the torchcomms-style front end over cclx._C.

Where Comm's methods live: this module: creation (new_comm), split, finalize, abort, the
collectives all_reduce, reduce, broadcast, all_gather(_single), reduce_scatter(_single),
reduce_scatter_quantized, all_to_all_single, all_to_all_v_single,
device_alltoallv_single, send, recv, barrier,
all_reduce_rmsnorm, new_window and get_algo; _comm_grouped.py: all_gather_v, reduce_scatter_v, all_to_all (lists), scatter, gather,
gather_single, batch_op_create and the persistent all-gather (all_gather_p_*); _comm_settings.py:
get_options, set_timeout, set_hints, the hooks' registration, get_mem_allocator and
tensor_register. Work (what a call returns) is in _work.py, the hooks' call path in _hooks.py.
"""
from __future__ import annotations

import collections
import functools
import sys
import weakref
from typing import Any, Dict, List, Optional, Sequence

from . import _C, _fused_op, _hooks, _rendezvous as rdv
from ._comm_grouped import CHECKED as _CHECKED_OPS, GroupedOps
from ._comm_settings import CommSettings
from ._tensor import TORCH, adapt, rows, same_dtype
from ._work import Work, _capturing, _current_stream

ReduceOp = _C.ReduceOp
_OP_NAMES = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR")


def _reduce_op(op: Any, where: str) -> Any:
    """`op` as a cclx.ReduceOp: a cclx.ReduceOp or RedOpType, or torch.distributed's ReduceOp
    (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR)."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, _C.RedOpType) and op != _C.RedOpType.PREMUL_SUM:
        return ReduceOp(op)
    if type(op).__module__.startswith("torch"):
        kind = getattr(op, "op", op)  # torch.distributed.ReduceOp(...) wraps a RedOpType
        name = getattr(kind, "name", str(kind).rpartition(".")[2])
        if name in _OP_NAMES:
            return getattr(ReduceOp, name)
        raise _C.CclxInvalidArgument(f"{where}: torch ReduceOp {name} has no cclx equivalent "
                                     "(for a pre-multiplied sum use "
                                     "cclx.ReduceOp.PREMUL_SUM(factor))")
    raise _C.CclxInvalidArgument(f"{where}: op must be a cclx.ReduceOp (e.g. cclx.ReduceOp.SUM) "
                                 f"or a torch.distributed.ReduceOp, not {op!r}")


def _checked(method):
    """Runs `method` on a live communicator, with its pre/post hooks when any are registered. A
    timeout or error with abort_process_on_timeout_or_error on ends the process in the library
    itself (one line on stderr, the abort hooks, then abort), in the call or from the watchdog
    thread."""
    op = _hooks.Op(method)

    @functools.wraps(method)
    def wrapper(self: "Comm", *args, **kwargs):
        if self._closed is not None:
            raise _C.CclxUsageError(f"{method.__name__}: communicator {self._name!r} was "
                                    f"{self._closed}")
        if self._hooks is None:
            return method(self, *args, **kwargs)
        return _hooks.call(self, op, args, kwargs)

    return wrapper


class Comm(GroupedOps, CommSettings):
    """A communicator of get_size() ranks on one device (create it with cclx.new_comm)."""

    def __init__(self, c: Any, device: Any, store: Any) -> None:
        self._c = c
        self._device = device
        self._store = store
        self._abort_hooks: Dict[Any, Any] = {}  # register_abort_hook (_comm_settings.py)
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
        self._registered: Dict[int, Any] = {}  # tensor_register: address -> tensor (kept alive)
        self._handle = _fused_op.register(self)

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

    @property
    def handle(self) -> int:
        """This communicator's registry handle: the `comm` argument of the torch custom ops
        torch.ops.cclx.all_reduce_rmsnorm[_fp8]."""
        return self._handle

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
        return bool(async_op), stream, h, rdv.op_timeout_seconds(timeout)

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
        w = self._c.all_reduce(a, o, code, _reduce_op(op, "all_reduce"),
                               *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor, output))

    allreduce = all_reduce

    @_checked
    def reduce(self, tensor: Any, root: int, op: Any = ReduceOp.SUM, async_op: bool = False,
               hints: Optional[Dict[str, Any]] = None, timeout: Any = None, *,
               output: Any = None) -> Work:
        """Reduces `tensor` over all ranks into `tensor` (or `output`) on rank `root` only."""
        a, code, fw = adapt(tensor, "reduce: tensor", writable=output is None)
        o = None if output is None else self._out(output, "reduce: output", code)
        w = self._c.reduce(a, o, code, _reduce_op(op, "reduce"), root,
                           *self._opts(fw, async_op, hints, timeout))
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
        w = self._c.reduce_scatter_list(ins, o_obj, code, _reduce_op(op, "reduce_scatter"),
                                        *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, list(input_list)))

    @_checked
    def reduce_scatter_single(self, output: Any, input: Any, op: Any = ReduceOp.SUM,
                              async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                              timeout: Any = None) -> Work:
        """output = reduction over ranks of block `rank` of `input` (get_size() blocks)."""
        a, code, fw = adapt(input, "reduce_scatter_single: input")
        o = self._out(output, "reduce_scatter_single: output", code)
        w = self._c.reduce_scatter(a, o, code, _reduce_op(op, "reduce_scatter_single"),
                                   *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, input))

    @_checked
    def reduce_scatter_quantized(self, output: Any, input: Any, op: Any, seed: Any,
                                 async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                                 timeout: Any = None) -> Work:
        """NCCLX's reduce_scatter_quantized: output (float32, count elements) = SUM or AVG over
        ranks of block `rank` of `input` (float32, get_size() x count elements, any shape), each
        contribution sent as bfloat16 rounded stochastically and summed in float32. `seed`: a
        one-element int64 tensor where the data lives (the comm's GPU; a CPU tensor on CPU
        comms), read when the call runs (a CUDA graph replays it with the seed's current value);
        rank r rounds element i of its input with a hash of (seed, i, r): the same seeds give
        the same result."""
        where = "reduce_scatter_quantized"
        if seed is None:
            raise _C.CclxInvalidArgument(f"{where}: seed is required (a one-element int64 "
                                         "tensor)")
        a, code, fw = adapt(input, f"{where}: input")
        o = self._out(output, f"{where}: output", code)
        s, scode, _ = adapt(seed, f"{where}: seed")
        w = self._c.reduce_scatter_quantized(a, o, code, _reduce_op(op, where), s, scode,
                                             *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, input, seed))

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
    def device_alltoallv_single(self, output: Any, input: Any, output_split_sizes: Any,
                                input_split_sizes: Any, async_op: bool = False,
                                hints: Optional[Dict[str, Any]] = None,
                                timeout: Any = None) -> Work:
        """all_to_all_v_single whose split sizes are int64 tensors where the data is (the GPU of
        a CUDA comm: read by the device, no host synchronization, capturable in a CUDA graph with
        sizes that change between replays; host memory of a CPU comm). Sizes count rows (dim 0);
        input_split_sizes[r] rows go to rank r, output_split_sizes[r] rows come from rank r,
        packed in rank order. input's and output's dim 0 are their capacities: sizes that are
        negative, sum beyond them, or disagree with the sending rank's fail the call naming the
        ranks, with the output poisoned (NaN bytes). Rows past the received ones are unspecified."""
        a, code, fw = adapt(input, "device_alltoallv_single: input")
        o = self._out(output, "device_alltoallv_single: output", code)
        ss, _, _ = adapt(input_split_sizes, "device_alltoallv_single: input_split_sizes")
        rs, _, _ = adapt(output_split_sizes, "device_alltoallv_single: output_split_sizes")
        w = self._c.all_to_all_v_device(a, o, ss, rs, code,
                                        *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw,
                          (output, input, output_split_sizes, input_split_sizes))

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

    @_checked
    def all_reduce_rmsnorm(self, x: Any, residual: Any, weight: Any, eps: float = 1e-6, *,
                           quant: Optional[str] = None, scale: Any = None, out: Any = None,
                           async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                           timeout: Any = None) -> Any:
        """Fused allreduce + residual add + RMSNorm (+ FP8) of tensor-parallel inference:

            residual_out = all_reduce_sum(x) + residual          (rounded to x's dtype)
            y = residual_out * rsqrt(mean(residual_out ** 2, -1) + eps) * weight

        in float32 arithmetic, the same bits on every rank (docs/design/fused-rmsnorm.md
        gives every rounding). x: this rank's partial sums, [..., hidden], float32,
        bfloat16 or float16; residual: x's shape and dtype, the same values on every rank;
        weight: [hidden]. eps is used as a float32.

        Returns (y, residual_out). quant="fp8": (y_fp8, scales, residual_out) with y_fp8 in
        float8_e4m3fn (torch.float8_e4m3fn; numpy: ml_dtypes' float8_e4m3fn, else uint8 codes),
        e4m3(y / scale) rounded to nearest, saturating at 448, and scales float32 of shape
        x.shape[:-1] + (1,) (y ~= y_fp8 * scales): per token amax(|y|) / 448, or with `scale` (a
        one-element float32 tensor on the comm's device) that static scale for every token.

        out: the tensors to write, in the order returned (None: new ones); residual_out may be
        `residual` itself (in place) and y may be `x`; with a static scale the scales entry may
        be None. async_op=True returns (outputs, Work). hints: e.g. {"fused_algo": "fused_oneshot"}
        (auto|fused_oneshot|fused_twoshot|unfused; aliases oneshot, twoshot), {"algo": "tree"} for
        the unfused sequence's allreduce.

        torch tensors without out/async_op/hints/timeout go through the custom ops
        torch.ops.cclx.all_reduce_rmsnorm[_fp8] (CUDA graphs, torch.compile)."""
        if quant not in (None, "fp8"):
            raise rdv.bad(f"all_reduce_rmsnorm: quant must be None or 'fp8', got {quant!r}")
        if scale is not None and quant is None:
            raise rdv.bad("all_reduce_rmsnorm: a static scale needs quant='fp8'")
        torch = sys.modules.get("torch")
        is_torch = torch is not None and isinstance(x, torch.Tensor)
        if is_torch and out is None and not async_op and not hints and timeout is None:
            if not _fused_op._defined:
                _fused_op.define(torch)
            if quant is None:
                return torch.ops.cclx.all_reduce_rmsnorm(self._handle, x, residual, weight,
                                                         float(eps))
            return torch.ops.cclx.all_reduce_rmsnorm_fp8(self._handle, x, residual, weight,
                                                         float(eps), scale)
        if out is None:
            out = self._rmsnorm_outputs(x, residual, quant, is_torch)
        want = 3 if quant else 2
        if not isinstance(out, (tuple, list)) or len(out) != want:
            raise rdv.bad(f"all_reduce_rmsnorm: out must be a tuple of {want} tensors "
                          f"({'y_fp8, scales, residual_out' if quant else 'y, residual_out'})")
        if quant:
            q, s, r = out
            if s is None and scale is None:
                raise rdv.bad("all_reduce_rmsnorm: the scales output is needed without a static "
                              "scale")
            if s is None:
                s = self._rmsnorm_outputs(x, residual, quant, is_torch)[1]
            w = self._rmsnorm_call(x, residual, weight, eps, None, q, s, scale, r, async_op,
                                   hints, timeout)
            outs = (q, s, r)
        else:
            y, r = out
            w = self._rmsnorm_call(x, residual, weight, eps, y, None, None, None, r, async_op,
                                   hints, timeout)
            outs = (y, r)
        return (outs, w) if async_op else outs

    def _rmsnorm_outputs(self, x: Any, residual: Any, quant: Optional[str], is_torch: bool):
        shape = tuple(x.shape)
        sshape = shape[:-1] + (1,)
        if is_torch:
            import torch

            r = torch.empty(tuple(residual.shape), dtype=residual.dtype, device=residual.device)
            if quant:
                return (torch.empty(shape, dtype=torch.float8_e4m3fn, device=x.device),
                        torch.empty(sshape, dtype=torch.float32, device=x.device), r)
            return torch.empty(shape, dtype=x.dtype, device=x.device), r
        import numpy as np

        r = np.empty(residual.shape, dtype=residual.dtype)
        if quant:
            try:
                import ml_dtypes  # type: ignore[import-not-found]

                qt = np.dtype(ml_dtypes.float8_e4m3fn)
            except ImportError:
                qt = np.dtype(np.uint8)
            return np.empty(shape, dtype=qt), np.empty(sshape, dtype=np.float32), r
        return np.empty(shape, dtype=x.dtype), r

    def _rmsnorm_call(self, x: Any, residual: Any, weight: Any, eps: float, y: Any, q: Any,
                      s: Any, scale: Any, r: Any, async_op: bool = False,
                      hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Work:
        """Runs the call into the given outputs (the ops' implementation and the out= path)."""
        n = "all_reduce_rmsnorm"
        shape = tuple(x.shape)
        if len(shape) == 0:
            raise rdv.bad(f"{n}: x must have at least one dimension (hidden)")
        a, code, fw = adapt(x, f"{n}: x")
        res, c2, _ = adapt(residual, f"{n}: residual")
        same_dtype(code, c2, f"{n}: residual")
        wt, c3, _ = adapt(weight, f"{n}: weight")
        same_dtype(code, c3, f"{n}: weight")
        ro = self._out(r, f"{n}: residual_out", code)
        yo = None if y is None else self._out(y, f"{n}: out", code)
        qo = so = sso = None
        if q is not None:
            qo, cq, _ = adapt(q, f"{n}: y_fp8", writable=True)
            if cq not in (int(_C.DataType.fp8_e4m3), int(_C.DataType.u8)):
                raise rdv.bad(f"{n}: y_fp8 must be float8_e4m3fn (or uint8 codes)")
            so = self._out(s, f"{n}: scales", int(_C.DataType.f32))
            if scale is not None:
                sso, cs, _ = adapt(scale, f"{n}: scale")
                same_dtype(int(_C.DataType.f32), cs, f"{n}: scale")
        w = self._c.all_reduce_rmsnorm(a, res, ro, wt, yo, qo, so, sso, code, int(shape[-1]),
                                       float(eps), *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (x, residual, weight, y, q, s, scale, r))

    def get_rmsnorm_algo(self, tokens: int, hidden: int, dtype: Any, *, quant: Optional[str] = None,
                         static_scale: bool = False, out: bool = True,
                         hints: Optional[Dict[str, Any]] = None) -> str:
        """What all_reduce_rmsnorm would run ("fused_oneshot", "fused_twoshot",
        "unfused(<allreduce>)"; the names of docs/ALGORITHMS.md) (diagnostics)."""
        return self._c.select_all_reduce_rmsnorm_algo(int(tokens), int(hidden), int(dtype),
                                                      bool(out), quant == "fp8",
                                                      bool(static_scale), rdv.hints_dict(hints))

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
        self._registered.clear()  # finalize released the registrations

    def abort(self) -> None:
        """Abandons outstanding work: this rank's kernels stop and the peers' fail at once (their
        outputs NaN); runs the abort hooks; later calls raise."""
        if self._closed is None:
            self._closed = "aborted"
            self._c.abort()
            self._registered.clear()

    def get_algo(self, count: int, dtype: Any, op: Any = ReduceOp.SUM,
                 hints: Optional[Dict[str, Any]] = None) -> str:
        """Algorithm an all_reduce of `count` elements of `dtype` would use (diagnostics)."""
        return self._c.select_all_reduce_algo(int(count), int(dtype), _reduce_op(op, "get_algo"),
                                             rdv.hints_dict(hints))


for _name in _CHECKED_OPS:  # the collectives of _comm_grouped.py get the same wrapper
    setattr(Comm, _name, _checked(getattr(GroupedOps, _name)))


def new_comm(backend: str, device: Any, *, name: Optional[str] = None, store: Any = None,
             timeout: Any = None, hints: Optional[Dict[str, Any]] = None,
             abort_process_on_timeout_or_error: Optional[bool] = None) -> Comm:
    """Creates a communicator over all ranks of the job (collective).

    backend: "cclx" (direct-access and FP8 algorithms, NCCL underneath) or "nccl".
    device: torch.device or "cpu" / "cuda" / "cuda:N". Without an index the device is
      LOCAL_RANK (else rank) modulo the device count, and becomes torch's current device.
    Rank and size come from TORCHCOMM_RANK/TORCHCOMM_SIZE, else RANK/WORLD_SIZE; without a
    `store` the ranks meet at MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29500; under torchrun
    through torch's store).
    timeout: timedelta or seconds; None: CCLX_TIMEOUT (or TORCHCOMM_TIMEOUT_SECONDS; 0 = no
      timeout), else 600 s; CCLX_TIMEOUT_MS overrides it. It bounds all of the creation,
      connecting to the store included. hints: e.g. {"algo": "tree"}.
    abort_process_on_timeout_or_error: on a timeout or error, print one line naming the comm, the
      op and the missing ranks, run the abort hooks and abort the process (as torchcomms); off:
      the comm fails and its next call and every Work method raise. None: CCLX_ABORT_ON_ERROR
      (or TORCHCOMM_ABORT_ON_ERROR), else on.
    A rank that fails here (a bad argument or setting, no such device) tells the others, which
    then fail at once with its message.
    """
    rank, size = rdv.rank_size()  # without a rank there is no one to tell
    name = "default" if name is None else str(name)
    prefix = rdv.next_prefix(name)
    early: Optional[BaseException] = None
    try:
        t = 0.0 if timeout is None else rdv.timeout_seconds(timeout)  # 0: the default
    except _C.CclxError as e:
        t, early = 0.0, e
    t = rdv.settings(t)[1]  # read even when a setting is malformed: this rank must report it
    if store is None:
        base = rdv.default_store(rank, size, prefix, t)
    elif isinstance(store, _C.Store):
        base = store
    elif hasattr(store, "set") and hasattr(store, "get"):
        base = rdv._via_foreign(store, rank, prefix, t)
    else:
        raise rdv.bad(f"store must be a cclx.Store or a torch.distributed.Store, got "
                      f"{type(store).__name__}")
    cstore = _C.prefix_store(base, prefix)
    try:
        if early is not None:
            raise early
        if backend not in ("cclx", "nccl"):
            raise rdv.bad(f"unknown backend {backend!r} (expected 'cclx' or 'nccl')")
        dev_type, index = rdv.parse_device(device)
        h = rdv.hints_dict(hints)
        if dev_type == 1:
            index = rdv.resolve_cuda_index(index, rank)
            rdv.set_nccl_pip_dir()
        else:
            index = -1
    except Exception as e:
        rdv.post_failure(cstore, rank, size, e, t)
        raise
    # The C++ core reports its own failures (settings, hints, rendezvous, backend) to the others.
    abort = -1 if abort_process_on_timeout_or_error is None else int(
        bool(abort_process_on_timeout_or_error))
    c = _C._create_comm(dev_type, index, name, backend, t, h, cstore, rank, size, abort)
    torch = sys.modules.get("torch")
    if dev_type == 1:
        dev_obj: Any = f"cuda:{c.device_index}" if c.device_index >= 0 else "cuda"
    else:
        dev_obj = "cpu"
    if torch is not None:
        dev_obj = torch.device(dev_obj)
    return Comm(c, dev_obj, base)
