"""cclx-nccl: run a program on the cclx NCCL drop-in (a libnccl.so.2 that runs cclx's allreduce
and FP8 collectives inside the NCCL API and forwards every other call to the real NCCL).

    cclx-nccl --path                      # where the drop-in library is
    cclx-nccl run -- torchrun --nproc-per-node 8 train.py
    cclx-nccl run python -m vllm.entrypoints.openai.api_server ...
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import List, Optional

_LIB = "libnccl.so.2"

_EPILOG = """\
How it works: `run` starts CMD with LD_PRELOAD pointing at the drop-in, so that programs that link
NCCL (torch.distributed's ProcessGroupNCCL, JAX, Megatron, ...) call it instead of the real
library, and with VLLM_NCCL_SO_PATH and SGLANG_NCCL_SO_PATH set to it, because vLLM and SGLang
open NCCL by path with ctypes (they ignore LD_PRELOAD). The drop-in loads the real NCCL itself:
CCLX_NCCL_PATH if set, else the nvidia-nccl pip package of this interpreter (passed on as
CCLX_NCCL_PIP_DIR), else a libnccl.so already loaded, else the system's.

Why not LD_LIBRARY_PATH: pip torch's libtorch_cuda.so finds libnccl.so.2 through a DT_RPATH that
points into the nvidia-nccl wheel, and DT_RPATH is searched before LD_LIBRARY_PATH, so a library
earlier on LD_LIBRARY_PATH is never used. LD_PRELOAD is loaded before torch's dependencies are
looked up, and a preloaded library whose SONAME is libnccl.so.2 satisfies torch's dependency.

Settings (environment): CCLX_NCCL_INTERCEPT=0 forwards every call; CCLX_NCCL_FORWARD=allreduce,
allgather,reducescatter,alltoall forwards the named collectives; CCLX_LOW_PRECISION_ENABLE=1 turns
on the FP8 collectives for large messages; CCLX_DEBUG=INFO logs which NCCL was loaded and which
comms run cclx's algorithms. docs/DROPIN.md lists the rest.
"""


def library_path() -> str:
    """The drop-in library: CCLX_DROPIN_LIB, the installed package's cclx/lib/, or a build tree's
    nccl_dropin/ (next to the extension that CCLX_EXT_DIR names). Raises FileNotFoundError."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    if os.environ.get("CCLX_DROPIN_LIB"):
        candidates.append(os.environ["CCLX_DROPIN_LIB"])
    candidates.append(os.path.join(here, "lib", _LIB))
    ext = os.environ.get("CCLX_EXT_DIR")
    if ext:  # build tree: <build>/python/cclx holds _C, <build>/nccl_dropin the drop-in
        candidates.append(os.path.join(os.path.abspath(ext), "..", "..", "nccl_dropin", _LIB))
    for c in candidates:
        if os.path.isfile(c):
            return os.path.realpath(c)
    raise FileNotFoundError(
        "the cclx NCCL drop-in was not found (looked at: " + ", ".join(candidates) + "); it is "
        "built only where the CUDA toolkit is (CCLX_ENABLE_CUDA)")


def pip_nccl_dir() -> Optional[str]:
    """lib/ of the nvidia-nccl pip package of this interpreter, if installed."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        lib = os.path.join(loc, "lib")
        if os.path.isfile(os.path.join(lib, _LIB)):
            return lib
    return None


def run_env(lib: str, base: Optional[dict] = None) -> dict:
    """The environment `run` gives its command."""
    env = dict(os.environ if base is None else base)
    pre = env.get("LD_PRELOAD", "")
    parts = [p for p in pre.replace(" ", ":").split(":") if p and os.path.realpath(p) != lib]
    env["LD_PRELOAD"] = ":".join([lib] + parts)
    env["VLLM_NCCL_SO_PATH"] = lib
    env["SGLANG_NCCL_SO_PATH"] = lib
    pip = pip_nccl_dir()
    if pip and not env.get("CCLX_NCCL_PIP_DIR"):
        env["CCLX_NCCL_PIP_DIR"] = pip
    return env


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(
        prog="cclx-nccl", description="Run programs that call NCCL on the cclx drop-in.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", action="store_true", help="print the drop-in library's path")
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="run CMD on the drop-in (cclx-nccl run [--] CMD ...)",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    args = p.parse_args(argv)
    try:
        lib = library_path()
    except FileNotFoundError as e:
        print(f"cclx-nccl: {e}", file=sys.stderr)
        return 1
    if args.path:
        print(lib)
        return 0
    if args.cmd != "run":
        p.print_help()
        return 2
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        print("cclx-nccl run: no command given", file=sys.stderr)
        return 2
    env = run_env(lib)
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        print(f"cclx-nccl run: cannot run {cmd[0]}: {e}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
