#!/usr/bin/env bash
# The main job: builds cclx with its Python package in ./build and runs cclx-perf. With no
# arguments that is an allreduce sweep from 1 KiB to 256 MiB on every local GPU, NCCL measured
# beside it, or on 4 CPU processes over host shared memory where there is no GPU. Extra
# arguments go to cclx-perf (nccl-tests' flags: -b -e -f -n -w -c -d -o -G -z, --json, --plot).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_env.sh
missing=()
for pkg in nanobind numpy; do
  "$PYTHON" -c "import $pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "run.sh: cclx-perf needs the Python packages ${missing[*]}, which $PYTHON cannot import;" \
       "install them with: $PYTHON -m pip install ${missing[*]}" >&2
  echo "run.sh: nothing was built" >&2
  exit 1
fi
echo "run.sh: building cclx and its Python extension in $BUILD_DIR (CUDA: $CCLX_ENABLE_CUDA)" >&2
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
cmake --build "$BUILD_DIR" -j"$(nproc)" --target _C
CCLX_EXT_DIR="$PWD/$BUILD_DIR/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$PYTHON" -m cclx.perf "$@"
