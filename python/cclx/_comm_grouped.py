"""cclx.Comm's collectives that are lowered in the C++ core onto one grouped point-to-point
operation: all_gather_v, reduce_scatter_v, all_to_all (lists), scatter, gather, gather_single;
batched point to point (batch_op_create, BatchSendRecv, P2POp); the persistent all-gather
(all_gather_p_init / _exec / _free, an all_gather_single underneath).

GroupedOps is a base class of cclx.Comm; comm.py wraps the methods named in CHECKED with the same
checks, error handling and hooks as every other collective. The collectives below are lowered in
the C++ core onto one grouped point-to-point operation (reduce_scatter_v has its own), so they
run alike on CPU and CUDA communicators.
"""
from __future__ import annotations

import enum
from typing import Any, Dict, List, Optional, Sequence

from . import _C
from . import _rendezvous as rdv
from ._tensor import adapt, same_dtype

_U8 = int(_C.DataType.u8)


class P2POpType(enum.Enum):
    SEND = "send"
    RECV = "recv"


class P2POp:
    """One entry of a BatchSendRecv: type, tensor, peer."""

    __slots__ = ("type", "tensor", "peer")

    def __init__(self, type: P2POpType, tensor: Any, peer: int) -> None:  # noqa: A002
        self.type = type
        self.tensor = tensor
        self.peer = int(peer)

    def __repr__(self) -> str:
        return f"P2POp({self.type.name}, peer={self.peer})"


class BatchSendRecv:
    """Sends and receives collected with send()/recv() and run by issue() as one grouped
    operation: every rank makes progress on all of them at once, so no listing order deadlocks.
    Messages between two ranks match in order (also against plain send/recv calls)."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self.ops: List[P2POp] = []

    def send(self, tensor: Any, dst: int) -> None:
        """Adds a send of `tensor` to rank `dst`."""
        self.ops.append(P2POp(P2POpType.SEND, tensor, dst))

    def recv(self, tensor: Any, src: int) -> None:
        """Adds a receive from rank `src` into `tensor`."""
        self.ops.append(P2POp(P2POpType.RECV, tensor, src))

    def issue(self, async_op: bool = False, options: Any = None, *,
              hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Any:
        """Runs the batch; returns a Work. `options` may carry .hints and .timeout (torchcomms'
        BatchP2POptions)."""
        if options is not None:
            hints = hints if hints is not None else getattr(options, "hints", None)
            timeout = timeout if timeout is not None else getattr(options, "timeout", None)
        return self._comm._batch_op_issue(list(self.ops), async_op, hints, timeout)


class AllGatherPHandle:
    """A persistent all-gather (all_gather_p_init): its output buffer, fixed for the handle's
    life, and the hints and timeout its executions take unless they name their own. Each
    all_gather_p_exec(handle, input) fills the first get_size() x input's elements of the output
    with every rank's input in rank order; all_gather_p_free(handle) ends it."""

    __slots__ = ("_comm", "output", "numel", "hints", "timeout")

    def __init__(self, comm: Any, output: Any, numel: int, hints: Any, timeout: Any) -> None:
        self._comm = comm
        self.output = output
        self.numel = numel
        self.hints = hints
        self.timeout = timeout

    @property
    def freed(self) -> bool:
        return self.output is None

    def __repr__(self) -> str:
        return f"AllGatherPHandle(numel={self.numel}, freed={self.freed})"


def _numel(t: Any) -> int:
    n = 1
    for d in tuple(t.shape):
        n *= int(d)
    return n


class GroupedOps:
    """The collectives of cclx.Comm lowered onto one grouped point-to-point operation, batched
    point to point and the persistent all-gather (see the module docstring)."""

    def batch_op_create(self) -> BatchSendRecv:
        """A new, empty batch of point-to-point operations."""
        return BatchSendRecv(self)

    # ----------------------------------------------------------------- collectives
    def all_gather_v(self, tensor_list: Sequence[Any], tensor: Any, async_op: bool = False,
                     hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Any:
        """tensor_list[r] = rank r's `tensor`; entries may differ in size (this rank's `tensor`
        has the size of tensor_list[rank]; in place: tensor is tensor_list[rank])."""
        a, code, fw = adapt(tensor, "all_gather_v: tensor")
        outs = [self._out(t, "all_gather_v: tensor_list entry", code) for t in tensor_list]
        w = self._c.all_gather_v(a, outs, code, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (tensor, list(tensor_list)))

    def reduce_scatter_v(self, output: Any, input_list: Sequence[Any], op: Any = _C.ReduceOp.SUM,
                         async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                         timeout: Any = None) -> Any:
        """output = reduction over ranks of input_list[rank]; input_list[r] has rank r's output
        size (the same list of sizes on every rank). In place: output is input_list[rank]."""
        o_obj, code, fw = adapt(output, "reduce_scatter_v: output", writable=True)
        ins = self._inputs(input_list, "reduce_scatter_v: input_list entry", code)
        w = self._c.reduce_scatter_v(ins, o_obj, code, op,
                                     *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, list(input_list)))

    def all_to_all(self, output_tensor_list: Sequence[Any], input_tensor_list: Sequence[Any],
                   async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                   timeout: Any = None) -> Any:
        """input_tensor_list[r] goes to rank r, landing in its output_tensor_list[rank]; sizes may
        differ per pair (rank i's input i->j has rank j's output j<-i size)."""
        if not input_tensor_list:
            raise _C.CclxInvalidArgument("all_to_all: input_tensor_list is empty")
        a0, code, fw = adapt(input_tensor_list[0], "all_to_all: input_tensor_list entry")
        ins = [a0] + self._inputs(input_tensor_list[1:], "all_to_all: input_tensor_list entry",
                                  code)
        outs = [self._out(t, "all_to_all: output_tensor_list entry", code)
                for t in output_tensor_list]
        w = self._c.all_to_all_list(outs, ins, code, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (list(output_tensor_list), list(input_tensor_list)))

    def scatter(self, output_tensor: Any, input_tensor_list: Sequence[Any], root: int,
                async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
                timeout: Any = None) -> Any:
        """output_tensor = root's input_tensor_list[rank] (the list is read on root only)."""
        o_obj, code, fw = adapt(output_tensor, "scatter: output_tensor", writable=True)
        ins = []
        if self._rank == int(root):
            ins = self._inputs(input_tensor_list, "scatter: input_tensor_list entry", code)
        w = self._c.scatter(o_obj, ins, code, int(root), *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output_tensor, list(input_tensor_list or ())))

    def gather(self, output_tensor_list: Sequence[Any], input_tensor: Any, root: int,
               async_op: bool = False, hints: Optional[Dict[str, Any]] = None,
               timeout: Any = None) -> Any:
        """On root: output_tensor_list[r] = rank r's input_tensor (the list is used on root
        only)."""
        a, code, fw = adapt(input_tensor, "gather: input_tensor")
        outs = []
        if self._rank == int(root):
            outs = [self._out(t, "gather: output_tensor_list entry", code)
                    for t in output_tensor_list]
        w = self._c.gather(a, outs, code, int(root), *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (input_tensor, list(output_tensor_list or ())))

    def gather_single(self, output: Any, input: Any, root: int, async_op: bool = False,
                      hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Any:
        """On root: output (get_size() x input's size) = concatenation over ranks of `input`
        (output is used on root only and may be None elsewhere)."""
        a, code, fw = adapt(input, "gather_single: input")
        o = None
        if self._rank == int(root):
            if output is None:
                raise _C.CclxInvalidArgument("gather_single: the root needs an output")
            o = self._out(output, "gather_single: output", code)
        w = self._c.gather_single(a, o, code, int(root),
                                  *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, (output, input))

    # ----------------------------------------------------------------- persistent all-gather
    def all_gather_p_init(self, output: Any, hints: Optional[Dict[str, Any]] = None,
                          timeout: Any = None) -> AllGatherPHandle:
        """A persistent all-gather into `output` (non-empty, writable, on this communicator's
        device; kept alive by the handle). Checks everything about the output once, here; local:
        no communication. The hints and timeout become the executions' defaults."""
        self._live("all_gather_p_init")
        what = "all_gather_p_init: output"
        obj, code, _ = adapt(output, what, writable=True)
        n = self._c.check_buffer(obj, code, what)  # dtype, contiguity, device
        if n == 0:
            raise _C.CclxInvalidArgument("all_gather_p_init: the output is empty")
        rdv.hints_dict(hints)  # bad hints or timeouts fail here, not at the first execution
        if timeout is not None:
            rdv.op_timeout_seconds(timeout)
        return AllGatherPHandle(self, output, n, hints, timeout)

    def all_gather_p_exec(self, handle: AllGatherPHandle, input: Any, async_op: bool = False,
                          hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Any:
        """Runs the persistent all-gather: the handle's output[r * n .. (r + 1) * n) = rank r's
        `input` (n elements, the same on every rank, n x get_size() at most the output's size;
        the dtype the output's). An all_gather_single underneath: the same algorithms, checks,
        failure semantics and hooks (which see it as all_gather_single)."""
        h = self._p_handle(handle, "all_gather_p_exec")
        n = _numel(input)
        need = n * self._size
        if need > h.numel:
            raise _C.CclxInvalidArgument(
                f"all_gather_p_exec: input has {n} elements; {self._size} ranks need {need} "
                f"elements of the output, which has {h.numel}")
        out = h.output if need == h.numel else h.output.reshape(-1)[:need]
        return self.all_gather_single(out, input, async_op,
                                      h.hints if hints is None else hints,
                                      h.timeout if timeout is None else timeout)

    def all_gather_p_free(self, handle: AllGatherPHandle) -> None:
        """Ends a persistent all-gather (its output is released; the handle can run no more)."""
        h = self._p_handle(handle, "all_gather_p_free")
        h.output = None

    def _p_handle(self, handle: Any, what: str) -> AllGatherPHandle:
        self._live(what)
        if not isinstance(handle, AllGatherPHandle):
            raise _C.CclxInvalidArgument(f"{what}: expected the handle all_gather_p_init "
                                         f"returned, got {type(handle).__name__}")
        if handle._comm is not self:
            raise _C.CclxInvalidArgument(f"{what}: the handle belongs to another communicator")
        if handle.freed:
            raise _C.CclxInvalidArgument(f"{what}: the handle was freed (all_gather_p_free)")
        return handle

    def _batch_op_issue(self, ops: List[P2POp], async_op: bool = False,
                        hints: Optional[Dict[str, Any]] = None, timeout: Any = None) -> Any:
        """Runs a BatchSendRecv's operations as one grouped operation."""
        if not ops:
            raise _C.CclxInvalidArgument("batch_op_issue: the batch is empty")
        items, codes, fw = [], [], None
        for i, op in enumerate(ops):
            send = op.type is P2POpType.SEND
            obj, code, f = adapt(op.tensor, f"batch_op_issue: op {i} ({op.type.name.lower()})",
                                 writable=not send)
            fw = f if fw is None else fw
            items.append((send, obj, op.peer, code))
            codes.append(code)
        # One dtype for the group: the ops' own when they agree, else bytes.
        group = codes[0] if codes[0] >= 0 and all(c == codes[0] for c in codes) else _U8
        w = self._c.send_recv(items, group, *self._opts(fw, async_op, hints, timeout))
        return self._work(w, async_op, fw, tuple(op.tensor for op in ops))

    def _inputs(self, tensors: Sequence[Any], what: str, code: int) -> list:
        out = []
        for t in tensors:
            obj, c2, _ = adapt(t, what)
            same_dtype(code, c2, what)
            out.append(obj)
        return out


# Wrapped by comm.py with the checks, error handling and hooks every collective gets.
CHECKED = ("all_gather_v", "reduce_scatter_v", "all_to_all", "scatter", "gather",
           "gather_single", "_batch_op_issue")
