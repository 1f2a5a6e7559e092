"""Turning user tensors (numpy, torch, cupy, any DLPack producer) into what cclx._C accepts.

Each argument becomes (object for _C, cclx dtype code, framework). torch CUDA tensors are
exported with torch.utils.dlpack.to_dlpack, which performs no stream synchronization (the
array-API __dlpack__() without a stream would make the legacy default stream wait, which is
both slow and illegal during CUDA graph capture). Types DLPack cannot describe (ml_dtypes'
bfloat16 / float8 in numpy, torch float8) are exported as same-size integer views with the
cclx dtype passed alongside.
"""
from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

import numpy as np

from . import _C

_DT = _C.DataType
NUMPY = 0
TORCH = 1
CUPY = 2
OTHER = 3

_FP8 = (int(_DT.fp8_e4m3), int(_DT.fp8_e5m2))

_NP_DTYPES = {
    np.dtype(np.float32): (int(_DT.f32), None),
    np.dtype(np.float64): (int(_DT.f64), None),
    np.dtype(np.float16): (int(_DT.f16), None),
    np.dtype(np.int8): (int(_DT.i8), None),
    np.dtype(np.uint8): (int(_DT.u8), None),
    np.dtype(np.int32): (int(_DT.i32), None),
    np.dtype(np.int64): (int(_DT.i64), None),
    np.dtype(np.uint32): (int(_DT.u32), None),
    np.dtype(np.uint64): (int(_DT.u64), None),
}
# ml_dtypes types, recognized by name so ml_dtypes need not be imported here.
_NP_NAMED = {
    "bfloat16": (int(_DT.bf16), np.uint16),
    "float8_e4m3fn": (int(_DT.fp8_e4m3), np.uint8),
    "float8_e5m2": (int(_DT.fp8_e5m2), np.uint8),
}

_torch_map: Optional[dict] = None
_torch_to_dlpack = None


def _torch_dtypes(torch) -> dict:
    global _torch_map, _torch_to_dlpack
    if _torch_map is None:
        m = {
            torch.float32: int(_DT.f32),
            torch.float64: int(_DT.f64),
            torch.float16: int(_DT.f16),
            torch.bfloat16: int(_DT.bf16),
            torch.int8: int(_DT.i8),
            torch.uint8: int(_DT.u8),
            torch.int32: int(_DT.i32),
            torch.int64: int(_DT.i64),
        }
        for name, code in (("uint32", _DT.u32), ("uint64", _DT.u64),
                           ("float8_e4m3fn", _DT.fp8_e4m3), ("float8_e5m2", _DT.fp8_e5m2)):
            if hasattr(torch, name):
                m[getattr(torch, name)] = int(code)
        import torch.utils.dlpack as tdl

        fn = getattr(tdl, "to_dlpack", None)
        # stream=-1: the array-API value for "no synchronization".
        _torch_to_dlpack = fn if fn is not None else (lambda x: x.__dlpack__(stream=-1))
        _torch_map = m
    return _torch_map


def _bad(what: str, text: str) -> _C.CclxInvalidArgument:
    return _C.CclxInvalidArgument(f"{what}: {text}")


def adapt(t: Any, what: str, writable: bool = False) -> Tuple[Any, int, int]:
    """Returns (object for _C, cclx dtype code, framework) for tensor `t` (named `what`)."""
    if isinstance(t, np.ndarray):
        ent = _NP_DTYPES.get(t.dtype)
        if ent is None:
            ent = _NP_NAMED.get(t.dtype.name)
            if ent is None:
                raise _bad(what, f"numpy dtype {t.dtype} is not supported by cclx")
        if writable and not t.flags.writeable:
            raise _bad(what, "the output array is read-only")
        if ent[1] is not None:
            t = t.view(ent[1])
        return t, ent[0], NUMPY
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(t, torch.Tensor):
        code = _torch_dtypes(torch).get(t.dtype)
        if code is None:
            raise _bad(what, f"{t.dtype} is not supported by cclx")
        if t.requires_grad:
            t = t.detach()
        if code in _FP8:
            t = t.view(torch.uint8)
        if t.is_cuda:
            return _torch_to_dlpack(t), code, TORCH
        return t, code, TORCH
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(t, cupy.ndarray):
        return t.toDlpack(), -1, CUPY
    if hasattr(t, "__dlpack__"):
        return t, -1, OTHER
    raise _bad(what, f"expected a numpy array, torch tensor or DLPack array, got "
                     f"{type(t).__module__}.{type(t).__qualname__}")


def same_dtype(code: int, other: int, what: str) -> None:
    """Raises unless two resolved dtype codes agree (-1 = inferred later by _C)."""
    if code != other and code >= 0 and other >= 0:
        raise _bad(what, f"dtype {_C.dtype_name(_DT(other))} differs from the input's "
                         f"{_C.dtype_name(_DT(code))}")


def dtype_of(t: Any) -> "_C.DataType":
    """The cclx DataType a tensor or array is communicated as."""
    _, code, _ = adapt(t, "dtype_of")
    if code < 0:
        raise _bad("dtype_of", "cannot tell the dtype of this array type")
    return _DT(code)


def rows(t: Any) -> Tuple[int, int]:
    """(size of dim 0, elements per dim-0 row) of an array or tensor."""
    shape = tuple(t.shape)
    if len(shape) == 0:
        return 1, 1
    n = 1
    for s in shape[1:]:
        n *= int(s)
    return int(shape[0]), n
