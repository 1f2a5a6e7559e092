"""Build and runtime facts: cclx version/commit, NCCL version."""
from __future__ import annotations

import sys
from typing import Optional, Tuple

from . import _C


def nccl_version() -> Optional[Tuple[int, int, int]]:
    """Version of the NCCL cclx loads, as (major, minor, patch), or None when unknown.

    Uses the extension's report when it has one, else torch.cuda.nccl.version() when torch is
    imported (the same library when NCCL comes from the nvidia-nccl pip package)."""
    from ._rendezvous import set_nccl_pip_dir

    set_nccl_pip_dir()
    fn = getattr(_C, "nccl_version", None)
    if fn is not None:
        try:
            v = fn()
            if v:
                return tuple(int(x) for x in v)[:3]  # type: ignore[return-value]
        except Exception:  # noqa: BLE001 - optional information
            pass
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            v = torch.cuda.nccl.version()
            return (int(v[0]), int(v[1]), int(v[2]))
        except Exception:  # noqa: BLE001
            return None
    return None


def build_info() -> dict:
    """cclx version, git commit and whether the extension was built with CUDA."""
    return {"version": _C.__version__, "commit": _C.__commit__, "cuda": bool(_C.has_cuda)}
