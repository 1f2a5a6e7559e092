"""Makes "cclx" a torch.distributed backend name, so that with torchcomms under c10d
(dist.config.use_torchcomms = True, or TORCH_DISTRIBUTED_USE_TORCHCOMMS=1)
dist.init_process_group("cclx") creates torchcomms.new_comm("cclx", device) per device and wraps
it in torchcomms' _BackendWrapper.

torch calls register() at its own import (entry point group "torch.backends", pyproject.toml).
This package imports nothing of cclx or torchcomms there, and registering never raises: a
broken cclx cannot break `import torch`.
"""
import os

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


def _create(store, rank, size, timeout):
    raise RuntimeError(
        "torch.distributed backend 'cclx' runs through torchcomms: set "
        "torch.distributed.config.use_torchcomms = True (or TORCH_DISTRIBUTED_USE_TORCHCOMMS=1) "
        "before init_process_group, or create the communicator with "
        "torchcomms.new_comm('cclx', device)")


def register() -> None:
    """Registers the backend name (once; does nothing where torch.distributed is missing)."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or NAME in dist.Backend.backend_list:
            return
        dist.Backend.register_backend(NAME, _create, devices=_devices())
    except Exception:  # noqa: BLE001 - never break torch's import
        return
