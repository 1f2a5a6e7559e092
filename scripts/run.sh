#!/usr/bin/env bash
# The main job: sets up what is missing (scripts/setup_env.sh: system packages, .venv with
# pyproject.toml's "plot" extra, plus "torch" where a GPU is visible), builds cclx with its Python
# package in ./build and runs cclx-perf. With no arguments that is an allreduce sweep from 1 KiB
# to 256 MiB on every local GPU, NCCL measured beside it, or on 4 CPU processes over host shared
# memory where there is no GPU. Extra arguments go to cclx-perf (nccl-tests' flags: -b -e -f -n
# -w -c -d -o -G -z, --json, --plot). A second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_WHO=run.sh
SETUP_EXTRAS="plot"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  SETUP_EXTRAS="plot torch"  # cclx-perf drives GPUs through torch
fi
source scripts/setup_env.sh
echo "run.sh: building cclx and its Python extension in $BUILD_DIR (CUDA: $CCLX_ENABLE_CUDA)" >&2
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target _C
echo "run.sh: running $PYTHON -m cclx.perf $*" >&2
CCLX_EXT_DIR="$PWD/$BUILD_DIR/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$PYTHON" -m cclx.perf "$@"
