"""Work: the handle a collective returns, and the caller's CUDA stream it waits on."""
from __future__ import annotations

import sys
from typing import Any

from . import _rendezvous as rdv
from ._tensor import CUPY


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
        self._w.wait_blocking(rdv.op_timeout_seconds(timeout))

    def is_completed(self) -> bool:
        """Non-blocking poll; raises if the operation failed."""
        return self._w.is_completed()
