"""Memory for communication: the allocator of torchcomms' `get_mem_allocator`.

`get_mem_allocator()` returns a torch CUDA allocator (for `torch.cuda.MemPool`) whose memory
every cclx transport can share: one-host windows map it on the peers (`Comm.new_window`), and a
registered buffer (`Comm.tensor_register`) lets NCCL skip its staging copies. CUDA builds
allocate it with the driver's virtual memory management API (`cclx::memAlloc`), rounded up to
the allocation granularity (2 MiB); torch's caching allocator serves tensors out of those
segments and returns them to cclx only when the pool is emptied.

    pool = torch.cuda.MemPool(cclx.get_mem_allocator())
    with torch.cuda.use_mem_pool(pool):
        buf = torch.empty(n, device="cuda")
    win = comm.new_window(buf)
"""
from __future__ import annotations

import threading
from typing import Any

from . import _C

_BACKENDS = ("cclx", "nccl")
_lock = threading.Lock()
_allocator: Any = None


def get_mem_allocator(backend: str = "cclx") -> Any:
    """The process's allocator for `backend` ("cclx" or "nccl": the same memory), a torch
    `_cuda_CUDAAllocator` that `torch.cuda.MemPool` takes. Created once, then shared."""
    global _allocator
    if backend not in _BACKENDS:
        raise _C.CclxInvalidArgument(
            f"get_mem_allocator: backend {backend!r} is not one of {list(_BACKENDS)}")
    if not _C.has_cuda:
        raise _C.CclxUnsupportedError(
            "get_mem_allocator: cclx was built without CUDA: there is no device memory to give")
    with _lock:
        if _allocator is None:
            try:
                import torch
                from torch.cuda.memory import CUDAPluggableAllocator
            except ImportError as e:
                raise _C.CclxUnsupportedError(
                    f"get_mem_allocator: needs torch with CUDA ({e})") from e
            if not hasattr(torch._C, "_cuda_customAllocator"):
                raise _C.CclxUnsupportedError(
                    "get_mem_allocator: this torch was built without CUDA")
            plug = CUDAPluggableAllocator(_C.library_path(), "cclxTorchAlloc", "cclxTorchFree")
            _allocator = plug.allocator()
        return _allocator
