"""cclx: collective communication for GPUs and CPUs with a torchcomms-style API.

    import cclx, torch
    comm = cclx.new_comm("cclx", torch.device("cuda"), name="main")
    comm.all_reduce(t, cclx.ReduceOp.SUM, async_op=False)

CPU communicators take numpy arrays (or CPU torch tensors); CUDA communicators take torch or
cupy CUDA tensors. Every collective returns a Work.
"""
import os as _os

# A build tree keeps the extension in its own directory: CCLX_EXT_DIR points there and takes
# precedence over an installed one.
_ext_dir = _os.environ.get("CCLX_EXT_DIR")
if _ext_dir:
    __path__.insert(0, _os.path.abspath(_ext_dir))  # noqa: F821 (package __path__)

from . import _C  # noqa: E402
from ._C import (  # noqa: E402
    CclxError,
    CclxInvalidArgument,
    CclxTimeoutError,
    CclxUnsupportedError,
    CclxUsageError,
    DataType,
    RedOpType,
    ReduceOp,
    Result,
    Store,
    TcpStore,
    prefix_store,
)
from .comm import Comm, Work, new_comm  # noqa: E402
from ._comm_grouped import BatchSendRecv, P2POp, P2POpType  # noqa: E402
from ._comm_settings import CommOptions  # noqa: E402
from ._hooks import OpName, RemovableHandle  # noqa: E402
from .window import (  # noqa: E402
    TorchCommWinAccessType,
    TorchCommWindowAttr,
    Window,
    empty_shared,
)
from ._tensor import dtype_of  # noqa: E402
from ._info import nccl_version, build_info  # noqa: E402
from .memory import get_mem_allocator  # noqa: E402

__version__ = _C.__version__
__commit__ = _C.__commit__

__all__ = [
    "BatchSendRecv",
    "CclxError",
    "CclxInvalidArgument",
    "CclxTimeoutError",
    "CclxUnsupportedError",
    "CclxUsageError",
    "Comm",
    "CommOptions",
    "DataType",
    "RedOpType",
    "ReduceOp",
    "OpName",
    "P2POp",
    "P2POpType",
    "RemovableHandle",
    "Result",
    "Store",
    "TcpStore",
    "TorchCommWinAccessType",
    "TorchCommWindowAttr",
    "Window",
    "Work",
    "build_info",
    "dtype_of",
    "empty_shared",
    "get_mem_allocator",
    "nccl_version",
    "new_comm",
    "prefix_store",
]
