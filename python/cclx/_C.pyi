"""Low-level bindings of the cclx C++ API (use the cclx package instead)."""

from collections.abc import Mapping, Sequence
import enum
from typing import Annotated, Dict

from numpy.typing import NDArray

class CclxError(RuntimeError):
    """Base of every cclx error; `code` is a Result value."""
    code: int

class CclxInvalidArgument(CclxError, ValueError): ...
class CclxTimeoutError(CclxError, TimeoutError): ...
class CclxUsageError(CclxError): ...
class CclxUnsupportedError(CclxError, NotImplementedError): ...


__version__: str

__commit__: str

has_cuda: bool = False

class Result(enum.IntEnum):
    """cclx result codes (CclxError.code)."""

    Success = 0

    InvalidArgument = 1

    InvalidUsage = 2

    Timeout = 3

    SystemError = 4

    CudaError = 5

    NcclError = 6

    RemoteError = 7

    InternalError = 8

    Aborted = 9

    InProgress = 10

    Unsupported = 11

class DataType(enum.IntEnum):
    """Element types understood by cclx."""

    f32 = 0

    f64 = 1

    f16 = 2

    bf16 = 3

    i8 = 4

    u8 = 5

    i32 = 6

    i64 = 7

    u32 = 8

    u64 = 9

    fp8_e4m3 = 10

    fp8_e5m2 = 11

class RedOpType(enum.IntEnum):
    """Kind of a ReduceOp."""

    SUM = 0

    PRODUCT = 1

    MIN = 2

    MAX = 3

    AVG = 4

    BAND = 5

    BOR = 6

    BXOR = 7

    PREMUL_SUM = 8

def dtype_size(dtype: DataType) -> int:
    """Bytes per element of `dtype`."""

def dtype_name(dtype: DataType) -> str:
    """Short name of `dtype` ('f32', 'bf16', ...)."""

def dtype_from_name(name: str) -> DataType:
    """
    DataType for a short name; raises CclxInvalidArgument for an unknown one.
    """

def op_supported(op: RedOpType, dtype: DataType) -> bool:
    """True when the reduction `op` is defined for `dtype`."""

class ReduceOp:
    """
    A reduction operator: ReduceOp.SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR, or
    ReduceOp.PREMUL_SUM(factor) (every input multiplied by `factor` before the sum).
    """

    def __init__(self, type: RedOpType) -> None: ...

    @property
    def type(self) -> RedOpType:
        """The RedOpType."""

    @property
    def factor(self) -> float:
        """PREMUL_SUM factor (1.0 for the other ops)."""

    @staticmethod
    def PREMUL_SUM(factor: float) -> ReduceOp:
        """SUM of inputs each multiplied by `factor` first."""

    def __eq__(self, arg: ReduceOp, /) -> bool: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

    SUM: ReduceOp = ...

    PRODUCT: ReduceOp = ...

    MIN: ReduceOp = ...

    MAX: ReduceOp = ...

    AVG: ReduceOp = ...

    BAND: ReduceOp = ...

    BOR: ReduceOp = ...

    BXOR: ReduceOp = ...

class Store:
    """Key-value store used for rendezvous (keys str, values bytes)."""

    def set(self, key: str, value: object) -> None:
        """Stores `value` (bytes or str) under `key`."""

    def get(self, key: str, timeout: float = 300.0) -> bytes:
        """
        Waits up to `timeout` seconds for `key`, then returns its value as bytes.
        """

    def add(self, key: str, delta: int) -> int:
        """Atomically adds `delta`; returns the new value."""

    def wait(self, keys: Sequence[str], timeout: float = 300.0) -> None:
        """
        Waits until every key exists (CclxTimeoutError lists the missing ones).
        """

    def check(self, key: str) -> bool:
        """True when `key` exists."""

    def erase(self, key: str) -> None:
        """Removes `key`."""

class TcpStore(Store):
    """
    TCP store. The server (is_server=True) listens on host:port (port 0 picks a free one,
    see .port); clients connect with retries until `timeout` seconds. All members present
    the same `job_id` and prove they hold the same `token` (None: CCLX_STORE_TOKEN, '' =
    none); a server refuses any other client. Without a token only loopback addresses
    are served (docs/design/rendezvous.md, 'Store authentication').
    """

    def __init__(self, host: str, port: int, is_server: bool, job_id: str = 'cclx', timeout: float = 300.0, token: str | None = None) -> None: ...

    @property
    def port(self) -> int:
        """The port the server listens on."""

def prefix_store(store: Store, prefix: str) -> Store:
    """A view of `store` that prefixes every key with `prefix`."""

class Work:
    """Handle on a collective in flight."""

    def is_completed(self) -> bool:
        """Non-blocking poll; raises if the operation failed or timed out."""

    def wait(self, stream: int = 0) -> None:
        """CUDA: makes `stream` wait for the operation. CPU: blocks."""

    def wait_blocking(self, timeout: float = 0.0) -> None:
        """
        Blocks until completion; CclxTimeoutError after `timeout` s (0 = comm timeout).
        """

class Comm:
    """A cclx communicator (low level; see cclx.new_comm)."""

    @staticmethod
    def create(device_type: int, device_index: int, name: str, backend: str, timeout: float, hints: Mapping[str, str], store: Store, rank: int, size: int) -> Comm:
        """
        Collective over all ranks: rendezvous through `store` (timeout in seconds).
        """

    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def local_size(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def device_type(self) -> int: ...

    @property
    def device_index(self) -> int: ...

    @property
    def timeout(self) -> float: ...

    @property
    def hints(self) -> dict[str, str]: ...

    def all_reduce(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)] | None, dtype: int, op: ReduceOp, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def reduce(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)] | None, dtype: int, op: ReduceOp, root: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def broadcast(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)] | None, dtype: int, root: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def all_gather(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def all_gather_list(self, send: Annotated[NDArray, dict(writable=False)], recvs: Sequence[Annotated[NDArray, dict(writable=False)]], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def reduce_scatter(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)], dtype: int, op: ReduceOp, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def reduce_scatter_list(self, sends: Sequence[Annotated[NDArray, dict(writable=False)]], recv: Annotated[NDArray, dict(writable=False)], dtype: int, op: ReduceOp, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def reduce_scatter_quantized(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)], dtype: int, op: ReduceOp, seed: Annotated[NDArray, dict(writable=False)], seed_dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def all_to_all(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def all_to_all_v(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)], send_counts: Sequence[int], recv_counts: Sequence[int], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """Counts in elements."""

    def all_to_all_v_device(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)], send_split_sizes: Annotated[NDArray, dict(writable=False)], recv_split_sizes: Annotated[NDArray, dict(writable=False)], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Split sizes: int64 arrays of size() row counts (dim 0) where the data is; the buffers' dim 0 is their capacity in rows.
        """

    def send(self, buf: Annotated[NDArray, dict(writable=False)], dtype: int, peer: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def recv(self, buf: Annotated[NDArray, dict(writable=False)], dtype: int, peer: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def barrier(self, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def send_recv(self, ops: Sequence[tuple[bool, Annotated[NDArray, dict(writable=False)], int, int]], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """ops: (is_send, array, peer, dtype code or -1)."""

    def scatter(self, recv: Annotated[NDArray, dict(writable=False)], sends: Sequence[Annotated[NDArray, dict(writable=False)]], dtype: int, root: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def gather(self, send: Annotated[NDArray, dict(writable=False)], recvs: Sequence[Annotated[NDArray, dict(writable=False)]], dtype: int, root: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def gather_single(self, send: Annotated[NDArray, dict(writable=False)], recv: Annotated[NDArray, dict(writable=False)] | None, dtype: int, root: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def all_gather_v(self, send: Annotated[NDArray, dict(writable=False)], recvs: Sequence[Annotated[NDArray, dict(writable=False)]], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def all_to_all_list(self, recvs: Sequence[Annotated[NDArray, dict(writable=False)]], sends: Sequence[Annotated[NDArray, dict(writable=False)]], dtype: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def reduce_scatter_v(self, sends: Sequence[Annotated[NDArray, dict(writable=False)]], recv: Annotated[NDArray, dict(writable=False)], dtype: int, op: ReduceOp, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def set_timeout(self, timeout: float) -> None:
        """The comm's default timeout (seconds) for later calls."""

    def set_hints(self, hints: Mapping[str, str]) -> None:
        """Replaces the comm's hints (checked first: a bad key or value changes nothing)."""

    def update_hints(self, hints: Mapping[str, str]) -> None:
        """Sets the given hints, keeps the others (checked as set_hints)."""

    def is_aborted(self) -> bool:
        """True once abort() was called."""

    def backend_version(self) -> str:
        """'cclx <version>' (plus ' NCCL <version>' for CUDA comms)."""

    def comm_dump(self) -> Dict[str, str]:
        """This comm's state for hang debugging (Comm::dump)."""

    def split(self, ranks: Sequence[int], name: str) -> Comm:
        """
        Collective: ranks listed get a new Comm (renumbered in list order), others None.
        """

    def finalize(self) -> None:
        """Orderly shutdown after outstanding work completes."""

    def abort(self) -> None:
        """Abandons outstanding work; later calls raise."""

    def async_error(self) -> Result:
        """First asynchronous error (a cclxResult_t)."""

    def check_buffer(self, array: Annotated[NDArray, dict(writable=False)], dtype: int, what: str) -> int:
        """
        Checks a buffer as a call of this communicator would (element type, contiguity, device) and returns its element count; raises CclxInvalidArgument naming `what`.
        """

    def register_memory(self, array: Annotated[NDArray, dict(writable=False)], dtype: int) -> int:
        """
        Local: registers the buffer's memory for zero-copy use (torchcomms' tensor_register); returns its address.
        """

    def deregister_memory(self, array: Annotated[NDArray, dict(writable=False)], dtype: int) -> int:
        """Releases a register_memory of the same buffer; returns its address."""

    @property
    def registered_count(self) -> int:
        """Buffers registered with register_memory now."""

    def select_all_reduce_algo(self, count: int, dtype: int, op: ReduceOp, hints: Mapping[str, str]) -> str:
        """Name of the algorithm an all_reduce with these arguments would use."""

    def all_reduce_rmsnorm(self, x: Annotated[NDArray, dict(writable=False)], residual: Annotated[NDArray, dict(writable=False)], residual_out: Annotated[NDArray, dict(writable=False)], weight: Annotated[NDArray, dict(writable=False)], out: Annotated[NDArray, dict(writable=False)] | None, fp8_out: Annotated[NDArray, dict(writable=False)] | None, scales: Annotated[NDArray, dict(writable=False)] | None, static_scale: Annotated[NDArray, dict(writable=False)] | None, dtype: int, hidden: int, eps: float, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work:
        """
        Fused allreduce + residual add + RMSNorm (+ FP8). Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.
        """

    def select_all_reduce_rmsnorm_algo(self, tokens: int, hidden: int, dtype: int, out: bool, fp8: bool, static_scale: bool, hints: Mapping[str, str]) -> str:
        """What all_reduce_rmsnorm would run for these arguments."""

    def new_window(self) -> Window:
        """Collective: a new one-sided window with nothing registered."""

class WinAccess(enum.Enum):
    UNIFIED = 0
    SEPARATE = 1

class Window:
    """A one-sided window (low level; see cclx.Comm.new_window)."""

    def register(self, tensor: Annotated[NDArray, dict(writable=False)], dtype: int) -> None:
        """Collective: registers the tensor's memory."""

    def deregister(self) -> None:
        """Collective: every rank done, then the peers' memory is unmapped."""

    def put(self, tensor: Annotated[NDArray, dict(writable=False)], dtype: int, dst: int, offset: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work: ...

    def signal(self, dst: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work: ...

    def wait_signal(self, src: int, async_op: bool, stream: int, hints: Mapping[str, str], timeout: float) -> Work: ...

    def remote_ptr(self, rank: int) -> int:
        """Address of rank's window in this process (raises when not direct)."""

    def access(self, peer: int) -> WinAccess: ...

    def device_window(self, signal_count: int, counter_count: int, barrier_count: int) -> int:
        """Collective on the first call: the address of the window's device handle."""

    def device_window_info(self) -> dict:
        """The device handle as the host built it (a dict of its fields)."""

    @property
    def registered(self) -> bool: ...

    @property
    def count(self) -> int: ...

    @property
    def dtype(self) -> DataType: ...

    @property
    def transport(self) -> str: ...

class MoeBuffer:
    """The expert-parallel buffer (low level; see cclx.moe.Buffer)."""

    @staticmethod
    def route(comm: Comm, max_tokens_per_rank: int, hidden: int, num_experts: int, top_k: int,
              dtype: int, fp8: bool) -> tuple[str, str]: ...
    @staticmethod
    def create(comm: Comm, max_tokens_per_rank: int, hidden: int, num_experts: int, top_k: int,
               dtype: int, fp8: bool) -> MoeBuffer: ...
    def dispatch(self, x: int, ids: int, ids64: bool, w: int, tokens: int, stream: int,
                 timeout: float) -> None: ...
    def dispatch_cached(self, x: int, stream: int, timeout: float) -> None: ...
    def combine(self, expert_out: int, rows: int, out: int, stream: int,
                timeout: float) -> None: ...
    def destroy(self) -> None: ...
    def memory(self, torch: bool, device_index: int) -> object: ...
    @property
    def bytes(self) -> int: ...
    @property
    def blocks(self) -> int: ...
    @property
    def last_tokens(self) -> int: ...
    @property
    def route_name(self) -> str: ...
    @property
    def offsets(self) -> Dict[str, int]: ...

def alloc_shared(nbytes: int) -> NDArray:
    """A uint8 numpy array of `nbytes` in a new shared-memory file (zeroed), freed with it."""

def nccl_version() -> tuple[int, int, int] | None:
    """(major, minor, patch) of the NCCL library cclx loads (loading it if needed), or None."""

def library_path() -> str:
    """File libcclx was loaded from (holds cclxTorchAlloc / cclxTorchFree)."""

def nccl_path() -> str:
    """File the NCCL library was loaded from ('' if none)."""

def _rendezvous_config() -> tuple[str, int, str]:
    """(job id, CCLX_TIMEOUT_MS or -1, the error of a malformed setting or '')."""

def _launch_env() -> tuple[int, int, str, int, bool]:
    """
    (rank, size, MASTER_ADDR, MASTER_PORT, under torchrun) by the one rule of cclx::launchEnv
    (include/cclx/cclx.hpp); a malformed or half-set environment raises CclxInvalidArgument.
    """

def _store_token() -> str:
    """CCLX_STORE_TOKEN ('' when unset), read even when another setting is malformed."""

def _create_comm(device_type: int, device_index: int, name: str, backend: str, timeout: float, hints: Mapping[str, str], store: Store, rank: int, size: int) -> Comm:
    """
    Collective: a comm whose keys live in `store` itself (already this comm's namespace). A
    failure is posted there for the other ranks.
    """

def _post_failure(store: Store, rank: int, size: int, code: int, message: str, timeout: float) -> None:
    """Tells the other ranks of the comm whose namespace is `store` that this rank failed."""

def _log_warn(msg: str) -> None:
    """Writes a WARN line through cclx's logger (CCLX_DEBUG, CCLX_DEBUG_FILE)."""
