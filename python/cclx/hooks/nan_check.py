"""NanCheckHook: raises NanCheckError before an operation whose input holds a NaN (and, with
check_inf, an Inf), so a bad value is caught on the rank that produced it instead of spreading
to every rank. Floating-point tensors only (numpy, including ml_dtypes' bfloat16/float8, and
torch). On CUDA tensors the check synchronizes the device (a debugging aid: off unless
registered)."""
from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

import numpy as np

from .._hooks import OpName, RemovableHandle

_INPLACE = (OpName.all_reduce, OpName.reduce, OpName.broadcast)
_NP_LOW = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


class NanCheckError(RuntimeError):
    """An operation's tensor held NaN/Inf values (raised before the operation ran)."""


def _bad(t: Any, inf: bool) -> Optional[Tuple[int, int, int]]:
    """(count of bad values, flat index of the first, element count) or None when clean (or
    not a floating-point tensor)."""
    if isinstance(t, np.ndarray):
        if t.dtype.kind != "f" and t.dtype.name not in _NP_LOW:
            return None
        x = t.astype(np.float32) if t.dtype.name in _NP_LOW else t
        mask = ~np.isfinite(x) if inf else np.isnan(x)
        n = int(np.count_nonzero(mask))
        return (n, int(np.flatnonzero(mask)[0]), t.size) if n else None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(t, torch.Tensor):
        if not t.is_floating_point():
            return None
        x = t.detach()
        if x.element_size() == 1:  # float8: no isnan kernels
            x = x.float()
        mask = ~torch.isfinite(x) if inf else torch.isnan(x)
        n = int(mask.sum().item())
        if not n:
            return None
        return n, int(mask.reshape(-1).nonzero()[0].item()), t.numel()
    return None


class NanCheckHook:
    """Checks inputs (and, with check_outputs, outputs) of every operation of the communicators
    it is registered with; raises NanCheckError before the operation runs."""

    def __init__(self, check_inputs: bool = True, check_outputs: bool = False,
                 check_inf: bool = True) -> None:
        self._inputs = check_inputs
        self._outputs = check_outputs
        self._inf = check_inf
        self._handles = []

    def register_with_comm(self, comm: Any) -> RemovableHandle:
        """Starts checking `comm`'s operations; the handle's remove() stops it."""
        where = f"comm {comm.get_name()!r} (rank {comm.get_rank()})"

        def pre(name: OpName, op_id: int, args: Any) -> None:
            g = args.__dict__.get
            if name is OpName.batch_op_issue:
                for o in g("ops") or ():
                    send = o.type.name == "SEND"
                    if (self._inputs and send) or (self._outputs and not send):
                        self._check(o.tensor, "input" if send else "output", name, where)
                return
            if name is OpName.send:
                if self._inputs:
                    self._check(g("tensor"), "input", name, where)
                return
            if name is OpName.recv:
                if self._outputs:
                    self._check(g("tensor"), "output", name, where)
                return
            if name in _INPLACE:
                if self._inputs or self._outputs:
                    self._check(g("tensor"), "input", name, where)
                return
            if self._inputs:
                self._check(g("input"), "input", name, where)
            if self._outputs:
                self._check(g("output"), "output", name, where)

        h = comm.register_pre_hook(pre)
        self._handles.append(h)
        return h

    def is_enabled(self) -> bool:
        """True once registered with a communicator."""
        return bool(self._handles)

    def _check(self, x: Any, label: str, op: OpName, where: str) -> None:
        items = x if isinstance(x, (list, tuple)) else [x]
        for i, t in enumerate(items):
            if t is None:
                continue
            bad = _bad(t, self._inf)
            if bad is not None:
                n, first, total = bad
                which = f"{label} tensor {i}" if isinstance(x, (list, tuple)) else f"{label} tensor"
                kind = "NaN/Inf" if self._inf else "NaN"
                raise NanCheckError(f"{kind} in the {which} of {op.value} on {where}: {n} of "
                                    f"{total} values, the first at flat index {first}")
