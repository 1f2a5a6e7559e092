"""Environment, device resolution and rendezvous stores for new_comm()."""
from __future__ import annotations

import datetime
import os
import socket
import sys
from typing import Any, Dict, Optional, Tuple

from . import _C

DEFAULT_TIMEOUT_S = 600.0
_seq: Dict[str, int] = {}
_env_stores: Dict[Tuple[str, int, int], Any] = {}


def bad(text: str) -> _C.CclxInvalidArgument:
    return _C.CclxInvalidArgument(text)


def env_int(*names: str) -> Optional[int]:
    for n in names:
        v = os.environ.get(n)
        if v is not None and v != "":
            try:
                return int(v)
            except ValueError:
                raise bad(f"environment variable {n}={v!r} is not an integer") from None
    return None


def rank_size() -> Tuple[int, int]:
    """(rank, size) from TORCHCOMM_RANK/SIZE, else torchrun's RANK/WORLD_SIZE, else (0, 1)."""
    rank = env_int("TORCHCOMM_RANK", "RANK")
    size = env_int("TORCHCOMM_SIZE", "WORLD_SIZE")
    if rank is None and size is None:
        return 0, 1
    if rank is None or size is None:
        raise bad("set both a rank (TORCHCOMM_RANK or RANK) and a size (TORCHCOMM_SIZE or "
                  "WORLD_SIZE)")
    if size < 1 or not 0 <= rank < size:
        raise bad(f"invalid rank {rank} for world size {size}")
    return rank, size


def op_timeout_seconds(timeout: Any) -> float:
    """A per-call timeout: None or 0 -> 0.0 (the comm's, as torchcomms); else timeout_seconds."""
    if timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
                           and timeout == 0):
        return 0.0
    if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() == 0:
        return 0.0
    return timeout_seconds(timeout)


def timeout_seconds(timeout: Any) -> float:
    """None -> the default (CCLX_TIMEOUT_MS, CCLX_TIMEOUT, TORCHCOMM_TIMEOUT_SECONDS, else 600 s);
    timedelta or a number of seconds -> float seconds."""
    if timeout is None:
        return float(_C.default_timeout())
    if isinstance(timeout, datetime.timedelta):
        t = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        t = float(timeout)
    else:
        raise bad(f"timeout must be a datetime.timedelta or seconds, got {type(timeout).__name__}")
    if not t > 0:
        raise bad("timeout must be positive")
    return t


def hints_dict(hints: Optional[Dict[str, Any]]) -> Dict[str, str]:
    if not hints:
        return {}
    if not isinstance(hints, dict):
        raise bad(f"hints must be a dict of str -> str, got {type(hints).__name__}")
    return {str(k): str(v) for k, v in hints.items()}


def parse_device(device: Any) -> Tuple[int, Optional[int]]:
    """(0, None) for cpu, (1, index or None) for cuda; accepts torch.device or a string."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(device, torch.device):
        kind, index = device.type, device.index
    elif isinstance(device, str):
        kind, _, idx = device.partition(":")
        index = None
        if idx:
            if not idx.isdigit():
                raise bad(f"invalid device string {device!r}")
            index = int(idx)
    else:
        raise bad(f"device must be a torch.device or a string like 'cpu', 'cuda', 'cuda:1'; "
                  f"got {device!r}")
    if kind == "cpu":
        if index not in (None, 0):
            raise bad(f"invalid device {device!r}")
        return 0, None
    if kind == "cuda":
        return 1, index
    raise bad(f"unsupported device type {kind!r} (cclx supports 'cpu' and 'cuda')")


def resolve_cuda_index(index: Optional[int], rank: int) -> int:
    """Device index for a CUDA comm: the given one, else LOCAL_RANK (or rank) modulo the device
    count. With torch loaded the device also becomes torch's current device."""
    torch = sys.modules.get("torch")
    count = None
    if torch is not None:
        count = torch.cuda.device_count()
        if count == 0:
            raise _C.CclxUnsupportedError("no CUDA device is visible to torch")
    if index is None:
        local = env_int("LOCAL_RANK")
        local = rank if local is None else local
        index = local % count if count else -1
    elif count is not None and not 0 <= index < count:
        raise bad(f"cuda:{index} does not exist ({count} devices visible)")
    if torch is not None and index >= 0:
        torch.cuda.set_device(index)
    return index


def set_nccl_pip_dir() -> None:
    """Points CCLX_NCCL_PIP_DIR at the nvidia-nccl pip package's lib directory when torch is
    loaded and such a package exists, so cclx loads the NCCL torch uses."""
    if "torch" not in sys.modules or os.environ.get("CCLX_NCCL_PIP_DIR"):
        return
    try:
        import nvidia.nccl as nn  # type: ignore[import-not-found]
    except ImportError:
        return
    for base in list(getattr(nn, "__path__", [])):
        lib = os.path.join(base, "lib")
        if os.path.isdir(lib) and any(f.startswith("libnccl.so") for f in os.listdir(lib)):
            os.environ["CCLX_NCCL_PIP_DIR"] = lib
            return


def next_prefix(name: str) -> str:
    """Key namespace for the next comm called `name` in this process (same order on all ranks)."""
    n = _seq.get(name, 0)
    _seq[name] = n + 1
    return f"cclx/{name}/{n}/"


def _master() -> Tuple[Optional[str], Optional[int]]:
    return os.environ.get("MASTER_ADDR") or None, env_int("MASTER_PORT")


def _via_foreign(fstore: Any, rank: int, prefix: str, timeout: float) -> Any:
    """Rank 0 serves a cclx TcpStore on a free port and publishes its address through
    `fstore` (any object with set(key, value) / get(key), e.g. a torch.distributed.Store)."""
    key = prefix + "tcpstore_addr"
    job = "cclx-" + prefix
    if rank == 0:
        host = _master()[0] or "127.0.0.1"
        store = _C.TcpStore(host, 0, True, job, timeout)
        fstore.set(key, f"{host}:{store.port}")
        return store
    addr = fstore.get(key)
    addr = addr.decode() if isinstance(addr, (bytes, bytearray)) else str(addr)
    host, _, port = addr.rpartition(":")
    return _C.TcpStore(host, int(port), False, job, timeout)


def default_store(rank: int, size: int, prefix: str, timeout: float) -> Any:
    """The store for a new_comm() without one. Under torchrun (whose agent already serves
    MASTER_PORT) or with torch.distributed initialized, torch's store only carries the address
    of a cclx TcpStore; otherwise rank 0 serves a cclx TcpStore on MASTER_ADDR:MASTER_PORT."""
    torch = sys.modules.get("torch")
    addr, port = _master()
    if torch is not None and size > 1:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return _via_foreign(dist.distributed_c10d._get_default_store(), rank, prefix, timeout)
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true" and addr and port:
            fs = dist.TCPStore(addr, port, is_master=False,
                               timeout=datetime.timedelta(seconds=timeout))
            return _via_foreign(fs, rank, prefix, timeout)
    if size == 1 and (addr is None or port is None):
        return _C.TcpStore("127.0.0.1", 0, True, "cclx-local", timeout)
    if addr is None or port is None:
        raise bad("set MASTER_ADDR and MASTER_PORT (or pass store=) to create a communicator "
                  f"of {size} ranks")
    key = (addr, port, rank)
    store = _env_stores.get(key)
    if store is None:
        job = os.environ.get("TORCHELASTIC_RUN_ID") or f"cclx-{port}"
        store = _C.TcpStore(addr, port, rank == 0, job, timeout)
        _env_stores[key] = store
    return store


def hostname() -> str:
    return socket.gethostname()
