"""One-sided windows (torchcomms' TorchCommWindow): Comm.new_window() returns a Window.

    win = comm.new_window(buf)                  # collective; same size and dtype on every rank
    win.put(x, dst_rank=1, target_offset_nelems=0, async_op=False)
    win.signal(1)                               # after every earlier put to rank 1 is visible
    # on rank 1:
    win.wait_signal(0)                          # stream-ordered on CUDA comms
    y = buf[: x.numel()]

CPU communicators: the registered memory must be shared memory the peers map. A torch CPU
tensor's storage is moved into a named shared-memory file at registration (torch's file-system
sharing; every view of the storage follows); numpy arrays must come from cclx.empty_shared().
"""
from __future__ import annotations

import enum
import sys
from typing import Any, Dict, Optional

import numpy as np

from . import _C
from ._tensor import TORCH, NUMPY, adapt


class TorchCommWinAccessType(enum.IntEnum):
    """Whether a peer's window is directly addressable (map_remote_tensor works)."""

    WIN_ACCESS_TYPE_UNIFIED = 0
    WIN_ACCESS_TYPE_SEPARATE = 1


class TorchCommWindowAttr:
    """What get_attr(peer) returns."""

    __slots__ = ("access_type",)

    def __init__(self, access_type: TorchCommWinAccessType =
                 TorchCommWinAccessType.WIN_ACCESS_TYPE_SEPARATE) -> None:
        self.access_type = access_type

    def __repr__(self) -> str:
        return f"TorchCommWindowAttr(access_type={self.access_type.name})"


def empty_shared(shape: Any, dtype: Any = np.float32) -> np.ndarray:
    """A numpy array in a new shared-memory file (zeroed): memory a CPU window can register."""
    dt = np.dtype(dtype)
    shp = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    n = int(np.prod(shp, dtype=np.int64)) if shp else 1
    raw = _C.alloc_shared(max(1, n) * dt.itemsize)
    return raw[: n * dt.itemsize].view(dt).reshape(shp)


def _share_cpu_storage(t: Any) -> None:
    """Moves a torch CPU tensor's storage into a named shared-memory file (in place: every view
    of the storage follows), unless it is shared already."""
    st = t.untyped_storage()
    if not st.is_shared():
        st._share_filename_cpu_()


class Window:
    """A one-sided window of a communicator. Create it with Comm.new_window()."""

    def __init__(self, comm: Any, w: Any) -> None:
        self._comm = comm
        self._w = w
        self._tensor: Any = None     # the registered tensor (owning registration)
        self._shape: Optional[tuple] = None
        self._dtype: Any = None      # torch or numpy dtype of the registered tensor
        self._code = -1
        self._fw = TORCH
        self._devidx = 0
        self._nbytes = 0

    def __repr__(self) -> str:
        reg = f"{self._shape} {self._dtype}" if self._shape is not None else "nothing registered"
        return f"cclx.Window({self._w.transport}, {reg})"

    # ----------------------------------------------------------------- registration
    def tensor_register(self, tensor: Any, owning: bool = True) -> None:
        """Collective: registers `tensor` (contiguous; every rank the same size and dtype).
        owning=False: the window keeps no reference; the caller keeps the tensor alive until
        tensor_deregister()."""
        self._comm._require_open("tensor_register")
        torch = sys.modules.get("torch")
        if (not self._comm._cuda and torch is not None and isinstance(tensor, torch.Tensor)
                and tensor.device.type == "cpu"):
            if not tensor.is_contiguous():
                raise _C.CclxInvalidArgument("tensor_register: tensor must be contiguous")
            _share_cpu_storage(tensor)
        a, code, fw = adapt(tensor, "tensor_register: tensor", writable=True)
        self._w.register(a, code)
        self._tensor = tensor if owning else None
        self._shape = tuple(int(s) for s in tensor.shape)
        self._dtype = tensor.dtype
        self._code = int(self._w.dtype)
        self._fw = fw
        is_torch = torch is not None and isinstance(tensor, torch.Tensor)
        idx = tensor.device.index if is_torch else None
        self._devidx = int(idx) if idx is not None else max(self._comm._dev, 0)
        self._nbytes = int(self._w.count) * _C.dtype_size(self._w.dtype)

    def tensor_deregister(self) -> None:
        """Collective: waits until every rank is done with the window, then releases the peers'
        memory. Tensors from map_remote_tensor become invalid."""
        try:
            self._w.deregister()
        finally:
            if not self._w.registered:
                self._tensor = None
                self._shape = None
                self._nbytes = 0

    # ----------------------------------------------------------------- one-sided operations
    def put(self, tensor: Any, dst_rank: int, target_offset_nelems: int, async_op: bool = False,
            hints: Optional[Dict[str, Any]] = None, timeout: Any = None):
        """Copies `tensor` into dst_rank's window at element offset target_offset_nelems. The
        peer does not take part; it reads the data after wait_signal for a later signal."""
        self._comm._require_open("put")
        a, code, fw = adapt(tensor, "put: tensor")
        w = self._w.put(a, code, int(dst_rank), int(target_offset_nelems),
                        *self._comm._opts(fw, async_op, hints, timeout))
        return self._comm._work(w, async_op, fw, (tensor, self._tensor))

    def signal(self, peer_rank: int, async_op: bool = False,
               hints: Optional[Dict[str, Any]] = None, timeout: Any = None):
        """Adds one to peer_rank's signal counter for this rank, once every earlier put from
        this rank to peer_rank is visible there."""
        self._comm._require_open("signal")
        w = self._w.signal(int(peer_rank), *self._comm._opts(self._fw, async_op, hints, timeout))
        return self._comm._work(w, async_op, self._fw, ())

    def wait_signal(self, peer_rank: int, async_op: bool = False,
                    hints: Optional[Dict[str, Any]] = None, timeout: Any = None):
        """Waits (stream-ordered on CUDA comms) for the next signal from peer_rank; a signal
        that never comes fails with the communicator's timeout naming peer_rank."""
        self._comm._require_open("wait_signal")
        w = self._w.wait_signal(int(peer_rank),
                                *self._comm._opts(self._fw, async_op, hints, timeout))
        return self._comm._work(w, async_op, self._fw, (self._tensor,))

    # ----------------------------------------------------------------- direct access
    def map_remote_tensor(self, rank: int) -> Any:
        """A tensor view of `rank`'s registered memory (same shape and dtype as this rank's)
        when it is directly accessible (get_attr(rank) is UNIFIED); raises otherwise."""
        self._comm._require_open("map_remote_tensor")
        rank = int(rank)
        if rank == self._comm.get_rank() and self._tensor is not None:
            self._w.remote_ptr(rank)  # the checks (registered, rank) as for a peer
            return self._tensor
        torch = sys.modules.get("torch")
        if self._fw == TORCH and torch is not None:
            return self._w.remote_view(rank, True, self._devidx).view(self._dtype).view(self._shape)
        if self._fw == NUMPY and not self._comm._cuda:
            return self._w.remote_view(rank, False, 0).view(self._dtype).reshape(self._shape)
        raise _C.CclxUnsupportedError("map_remote_tensor: supported for torch tensors and numpy "
                                      "arrays")

    def get_attr(self, peer_rank: int) -> TorchCommWindowAttr:
        """UNIFIED when peer_rank's window is directly accessible from this rank, else SEPARATE."""
        self._comm._require_open("get_attr")
        acc = self._w.access(int(peer_rank))
        return TorchCommWindowAttr(TorchCommWinAccessType(acc.value))

    # ----------------------------------------------------------------- device windows
    def get_device_window(self, signal_count: int = -1, counter_count: int = -1,
                          barrier_count: int = 1) -> int:
        """torchcomms' get_device_window: the device address of this window's handle, which a
        kernel takes as `cclx::DeviceWindow*` (<cclx/device_window.cuh>) or torchcomms'
        `TorchCommDeviceWindow<CclxDeviceBackend>*` (<cclx/torchcomms/device_window.cuh>).
        Collective on the first call after tensor_register (every rank the same counts; negative
        signal_count / counter_count: the comm's size); later calls return the same address. It
        lives until tensor_deregister, by which time kernels using it must have finished on every
        rank. CUDA comms of one host; CPU comms get the same handle in host memory (a twin for
        checks: its methods are device code)."""
        self._comm._require_open("get_device_window")
        return int(self._w.device_window(int(signal_count), int(counter_count),
                                         int(barrier_count)))

    def get_device_window_info(self) -> Dict[str, Any]:
        """The handle get_device_window() placed, as the host built it: rank, num_ranks, base,
        size, the counts, the resource areas' offsets and every rank's resource area and window
        as this process addresses them ("resources", "peers")."""
        return dict(self._w.device_window_info())

    # ----------------------------------------------------------------- properties
    def get_size(self) -> int:
        """Bytes of the registered buffer (0 when nothing is registered)."""
        return self._nbytes if self._w.registered else 0

    def get_tensor(self) -> Any:
        """The registered tensor (None when nothing is registered or owning=False)."""
        return self._tensor

    @property
    def dtype(self) -> Any:
        return self._dtype

    @property
    def shape(self) -> list:
        return list(self._shape or ())

    @property
    def device(self) -> Any:
        return self._comm.get_device()

    @property
    def transport(self) -> str:
        """'shm' (host shared memory), 'ipc' (CUDA IPC) or 'nccl' (NCCL's one-sided API)."""
        return self._w.transport
