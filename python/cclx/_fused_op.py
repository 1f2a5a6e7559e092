"""The fused allreduce + residual add + RMSNorm (+ FP8) as torch custom ops, so that it works
under CUDA graphs and torch.compile:

    torch.ops.cclx.all_reduce_rmsnorm(comm, x, residual, weight, eps) -> (y, residual_out)
    torch.ops.cclx.all_reduce_rmsnorm_fp8(comm, x, residual, weight, eps, scale)
        -> (y_fp8, scales, residual_out)

`comm` is the communicator's registry handle (Comm.handle, an int), so the ops take only types
torch.library knows. Both are functional: they allocate their outputs (y like x; y_fp8 float8_e4m3fn
like x; scales float32 of shape x.shape[:-1] + (1,); residual_out like residual) and never write an
input; their fake implementations give those shapes. Comm.all_reduce_rmsnorm calls them for torch
tensors when no out=, async_op, hints or timeout is asked.

The ops are defined when the first communicator is created in a process that has imported torch
(cclx never imports torch itself)."""
from __future__ import annotations

import itertools
import sys
import threading
import weakref
from typing import Any, Dict

_lock = threading.Lock()
_comms: Dict[int, "weakref.ref[Any]"] = {}
_next = itertools.count(1)
_defined = False


def register(comm: Any) -> int:
    """A handle for `comm` (valid while it lives); defines the ops when torch is loaded."""
    with _lock:
        h = next(_next)
        _comms[h] = weakref.ref(comm)
    torch = sys.modules.get("torch")
    if torch is not None:
        define(torch)
    return h


def lookup(handle: int) -> Any:
    ref = _comms.get(int(handle))
    comm = ref() if ref is not None else None
    if comm is None:
        from ._rendezvous import bad

        raise bad(f"cclx::all_reduce_rmsnorm: no communicator has handle {handle} (destroyed?)")
    return comm


def scales_shape(x: Any) -> tuple:
    return tuple(x.shape[:-1]) + (1,)


def define(torch: Any) -> None:
    """Defines torch.ops.cclx.all_reduce_rmsnorm[_fp8] once per process."""
    global _defined
    with _lock:
        if _defined:
            return
        _defined = True
    # Explicit schemas: nothing depends on how annotations are evaluated.
    @torch.library.custom_op(
        "cclx::all_reduce_rmsnorm", mutates_args=(),
        schema="(int comm, Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)")
    def all_reduce_rmsnorm(comm, x, residual, weight, eps):
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        r = torch.empty_like(residual, memory_format=torch.contiguous_format)
        lookup(comm)._rmsnorm_call(x, residual, weight, eps, y, None, None, None, r)
        return y, r

    @all_reduce_rmsnorm.register_fake
    def _(comm, x, residual, weight, eps):
        return (torch.empty_like(x, memory_format=torch.contiguous_format),
                torch.empty_like(residual, memory_format=torch.contiguous_format))

    @torch.library.custom_op(
        "cclx::all_reduce_rmsnorm_fp8", mutates_args=(),
        schema="(int comm, Tensor x, Tensor residual, Tensor weight, float eps, Tensor? scale) "
               "-> (Tensor, Tensor, Tensor)")
    def all_reduce_rmsnorm_fp8(comm, x, residual, weight, eps, scale):
        q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
        s = torch.empty(scales_shape(x), dtype=torch.float32, device=x.device)
        r = torch.empty_like(residual, memory_format=torch.contiguous_format)
        lookup(comm)._rmsnorm_call(x, residual, weight, eps, None, q, s, scale, r)
        return q, s, r

    @all_reduce_rmsnorm_fp8.register_fake
    def _(comm, x, residual, weight, eps, scale):
        return (torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device),
                torch.empty(scales_shape(x), dtype=torch.float32, device=x.device),
                torch.empty_like(residual, memory_format=torch.contiguous_format))
