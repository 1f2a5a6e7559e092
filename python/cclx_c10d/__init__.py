"""Makes "cclx" a torch.distributed backend name, so that with torchcomms under c10d
(dist.config.use_torchcomms = True, or TORCH_DISTRIBUTED_USE_TORCHCOMMS=1)
dist.init_process_group("cclx") creates torchcomms.new_comm("cclx", device) per device and wraps
it in torchcomms' _BackendWrapper.

torch calls register() at its own import (entry point group "torch.backends", pyproject.toml).
This package imports nothing of cclx or torchcomms there, and registering never raises: a
broken cclx cannot break `import torch`.
"""
import os
import sys

NAME = "cclx"


def _devices():
    # "cuda" only where a GPU may be visible, decided without initializing CUDA (on a machine
    # without GPUs a CUDA comm fails). torch creates one comm for a backend that names the same
    # backend for all its devices, on the first device listed, and routes every device's tensors
    # to it: "cuda" comes first, and cclx's CUDA comm takes CPU tensors too (through device
    # copies, src/torchcomms/staging.h).
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return ["cpu"]
    if any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0")):
        return ["cuda", "cpu"]
    return ["cpu"]


_SWITCH_ENV = "TORCH_DISTRIBUTED_USE_TORCHCOMMS"
_TRUE = ("1", "true", "yes", "on", "y", "t")


def _switch_on(config=None) -> bool:
    """Whether torchcomms' switch for c10d is on. Every torch release with the switch (2.11 through
    2.15) spells it `torch.distributed.config.use_torchcomms`, a config entry whose default is the
    environment's TORCH_DISTRIBUTED_USE_TORCHCOMMS; a torch without the config module (or the
    entry) leaves the environment variable."""
    if config is None:
        try:
            from torch.distributed import config
        except Exception:  # noqa: BLE001 - a torch without the switch
            config = None
    value = getattr(config, "use_torchcomms", None) if config is not None else None
    if value is not None:
        return bool(value)
    return os.environ.get(_SWITCH_ENV, "").strip().lower() in _TRUE


def _caller_locals() -> dict:
    """The locals of torch's process-group helper that is calling the creator: it names the device
    (`for device, backend_str in ...`) and the ProcessGroup (`pg`) in torch 2.11..2.15."""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            break
        if "device" in f.f_locals and "pg" in f.f_locals:
            return f.f_locals
        f = f.f_back
    return {}


_last = [None, None]  # (the ProcessGroup, its wrapper): one comm per group, on its first device


def _create(opts, backend_options=None):
    """torch's creator for "cclx" (extended API: opts has store, group_rank, group_size, timeout,
    group_id). torch itself routes "cclx" to torchcomms when its switch is on and it finds
    torchcomms usable for the name; where it does not (torch 2.14 on asks torchcomms whether it
    knows the name; any release turns the route off when torchcomms was imported before torch),
    this does what torch would: torchcomms.new_comm("cclx", device) wrapped in torchcomms'
    _BackendWrapper. With the switch off it raises, saying how to turn it on."""
    if not _switch_on():
        raise RuntimeError(
            "torch.distributed backend 'cclx' runs through torchcomms: set "
            "torch.distributed.config.use_torchcomms = True (or TORCH_DISTRIBUTED_USE_TORCHCOMMS=1) "
            "before init_process_group, or create the communicator with "
            "torchcomms.new_comm('cclx', device)")
    name = str(getattr(opts, "group_id", "") or "default_pg")
    where = _caller_locals()
    pg = where.get("pg")
    if pg is not None and _last[0] is pg:
        return _last[1]  # the group's next device: torch hands it the same comm
    import torch
    import torchcomms

    try:
        from torchcomms._comms import _BackendWrapper
    except ImportError:  # torchcomms releases that moved it
        from torchcomms._backend_wrapper import _BackendWrapper
    device = where.get("device")
    if device not in ("cpu", "cuda"):
        device = _devices()[0]
    saved = {k: os.environ.get(k) for k in ("TORCHCOMM_RANK", "TORCHCOMM_SIZE")}
    os.environ["TORCHCOMM_RANK"] = str(opts.group_rank)
    os.environ["TORCHCOMM_SIZE"] = str(opts.group_size)
    try:
        kw = {"timeout": opts.timeout} if getattr(opts, "timeout", None) is not None else {}
        comm = torchcomms.new_comm(NAME, torch.device(device), name=name, store=opts.store, **kw)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    wrapper = _BackendWrapper(comm)
    _last[:] = [pg, wrapper]
    try:  # torch finalizes the comms it lists at destroy_process_group
        from torch.distributed import distributed_c10d as c10d

        c10d._world.comms.append(comm)
    except Exception:  # noqa: BLE001 - older layouts: the module keeps it alive
        pass
    return wrapper


def register() -> None:
    """Registers the backend name (once; does nothing where torch.distributed is missing)."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or NAME in dist.Backend.backend_list:
            return
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=_devices())
    except Exception:  # noqa: BLE001 - never break torch's import
        return
