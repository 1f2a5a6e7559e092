"""Environment, device resolution and rendezvous stores for new_comm()."""
from __future__ import annotations

import datetime
import os
import secrets
import socket
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _C

DEFAULT_TIMEOUT_S = 600.0
_seq: Dict[str, int] = {}
_env_stores: Dict[Tuple[Any, ...], Any] = {}
_torch_stores: List[Any] = []


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
    """(rank, size) of this process by cclx's one rule (cclx::launchEnv): TORCHCOMM_RANK with
    TORCHCOMM_SIZE, else torchrun's RANK with WORLD_SIZE, else (0, 1); half a pair (or one half of
    each) raises CclxInvalidArgument."""
    rank, size, _, _, _ = _C._launch_env()
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


def settings(timeout: float) -> Tuple[str, float, str]:
    """(job id, the comm's timeout in seconds for `timeout` (0: the default; CCLX_TIMEOUT_MS,
    CCLX_TIMEOUT, TORCHCOMM_TIMEOUT_SECONDS applied), error of a malformed setting or ''), read
    by the C++ core even when a setting is malformed, so that this rank can still reach the store
    and report it."""
    return _C._rendezvous_config(timeout)


def _has(fstore: Any, key: str) -> bool:
    if isinstance(fstore, _C.Store):
        return fstore.check(key)
    return fstore.check([key])  # torch.distributed.Store


def _master() -> Tuple[str, int]:
    """MASTER_ADDR and MASTER_PORT (default 127.0.0.1:29500), read as the C++ core reads them."""
    _, _, addr, port, _ = _C._launch_env()
    return addr, port


def _under_torchrun() -> bool:
    """Launched by torchrun: MASTER_PORT belongs to torch's store (its agent's, or the one the
    first rank-0 TCPStore of the program serves), so cclx must not listen there."""
    return bool(_C._launch_env()[4])


def _foreign_get(fstore: Any, key: str, timeout: float, what: str) -> str:
    """fstore.get(key), waiting at most `timeout` s for rank 0 to publish it; logs a WARN line
    every 10 s. Raises CclxTimeoutError naming rank 0."""
    start = time.monotonic()
    next_report = start + 10.0
    while hasattr(fstore, "check"):
        try:
            if _has(fstore, key):
                break
        except Exception as e:  # noqa: BLE001 - the torch store's own errors
            raise _C.CclxError(f"{what}: the store failed: {e}") from None
        now = time.monotonic()
        if now - start >= timeout:
            raise _C.CclxTimeoutError(f"{what}: rank 0 did not publish the address of its cclx "
                                      f"store within {timeout:g} s")
        if now >= next_report:
            _C._log_warn(f"{what}: waiting for rank 0, {now - start:.0f} s of {timeout:.0f} s")
            next_report += 10.0
        time.sleep(0.01)
    value = fstore.get(key)
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def via_foreign(fstore: Any, rank: int, key: str, timeout: float, what: str) -> Any:
    """Rank 0 serves a cclx TcpStore on a free port and publishes its address through `fstore`
    (any object with set(key, value) / get(key), e.g. a torch.distributed.Store) under `key`;
    the others connect to it. The store's token is CCLX_STORE_TOKEN when set (never published:
    every rank must have it); otherwise rank 0 draws a random one and publishes it with the
    address, so that the cclx store admits exactly those who can read `fstore`."""
    job, timeout, _ = settings(timeout)
    configured = _C._store_token()
    if rank == 0:
        host = _master()[0]
        token = configured or secrets.token_hex(32)
        store = _C.TcpStore(host, 0, True, job, timeout, token)
        fstore.set(key, f"{host}:{store.port}" + ("" if configured else f" {token}"))
        return store
    addr, _, published = _foreign_get(fstore, key, timeout, what).partition(" ")
    host, _, port = addr.rpartition(":")
    return _C.TcpStore(host, int(port), False, job, timeout, configured or published)


def _via_foreign(fstore: Any, rank: int, prefix: str, timeout: float) -> Any:
    return via_foreign(fstore, rank, prefix + "tcpstore_addr", timeout,
                       "rendezvous through the given store")


def _torchrun_store(rank: int, size: int, timeout: float) -> Any:
    """Under torchrun: a cclx store whose address travels through torch's TCPStore on
    MASTER_ADDR:MASTER_PORT (torch is imported here if the program has not done it). That is
    the agent's store; where the agent serves none (TORCHELASTIC_USE_AGENT_STORE=False), rank 0
    serves it as torch.distributed would, multi-tenant, so that a later init_process_group
    shares it."""
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise _C.CclxUnsupportedError(
            "running under torchrun, whose store holds MASTER_PORT, needs torch.distributed "
            f"to reach it ({e})") from None
    addr, port = _master()
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    try:
        fs = dist.TCPStore(addr, port, None if agent else size,
                           is_master=rank == 0 and not agent,
                           timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False,
                           multi_tenant=True)
        _torch_stores.append(fs)  # rank 0's may be the server: it lives as long as the process
    except Exception as e:  # noqa: BLE001 - torch's own connection errors
        raise _C.CclxTimeoutError(f"could not connect to torchrun's store at {addr}:{port} "
                                  f"within {timeout:g} s: {e}") from None
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return via_foreign(fs, rank, f"cclx/{run}/{attempt}/store_addr", timeout,
                       f"rendezvous through torchrun's store at {addr}:{port}")


def default_store(rank: int, size: int, prefix: str, timeout: float) -> Any:
    """The store for a new_comm() without one, whatever launched the ranks:

    * torch.distributed initialized: rank 0 serves a cclx store on a free port and publishes
      its address through torch's default store;
    * under torchrun (its agent's store holds MASTER_PORT): the same through that store;
    * a single rank: its own store on a free local port, whatever MASTER_PORT says;
    * otherwise rank 0 serves the cclx store on MASTER_ADDR:MASTER_PORT (default
      127.0.0.1:29500).

    Every rank presents the job id (CCLX_JOB_ID, else TORCHELASTIC_RUN_ID, else 'cclx') and
    proves it holds the store's token (CCLX_STORE_TOKEN; through a foreign store, one rank 0
    publishes there when it is unset); without a token only loopback addresses are served. The
    timeout (CCLX_TIMEOUT_MS overrides it) bounds connecting. Stores are shared by the comms of
    the process."""
    job, timeout, _ = settings(timeout)
    torch = sys.modules.get("torch")
    if size > 1 and torch is not None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return _via_foreign(dist.distributed_c10d._get_default_store(), rank, prefix,
                                timeout)
    if size > 1 and _under_torchrun():
        key: Tuple[Any, ...] = ("torchrun", *_master(), rank)
        if key not in _env_stores:
            _env_stores[key] = _torchrun_store(rank, size, timeout)
        return _env_stores[key]
    if size == 1:
        # Nothing to meet: a private store on a free port (MASTER_PORT may be torchrun's).
        return _C.TcpStore("127.0.0.1", 0, True, job, timeout, "")
    addr, port = _master()
    key = (addr, port, rank)
    store = _env_stores.get(key)
    if store is None:
        store = _C.TcpStore(addr, port, rank == 0, job, timeout, _C._store_token())
        _env_stores[key] = store
    return store


def post_failure(store: Any, rank: int, size: int, error: BaseException, timeout: float) -> None:
    """Tells the other ranks of the comm whose namespace is `store` that this rank failed (they
    fail at once with the message instead of waiting for it until their timeout)."""
    if isinstance(error, _C.CclxError):
        code, text = int(getattr(error, "code", _C.Result.InternalError)), str(error)
    else:
        code, text = int(_C.Result.InternalError), f"{type(error).__name__}: {error}"
    try:
        _C._post_failure(store, rank, size, code, text, timeout)
    except Exception:  # noqa: BLE001 - the original error is the one to raise
        pass


def hostname() -> str:
    return socket.gethostname()
