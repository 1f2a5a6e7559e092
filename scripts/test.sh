#!/usr/bin/env bash
# Builds cclx in ./build (with the Python extension when nanobind is importable) and runs every
# test with ctest. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build}"
PYTHON="${PYTHON:-python3}"
# CUDA parts are built when a GPU is visible (they cannot run without one, and compiling the
# kernels dominates the build on small CI machines). CCLX_ENABLE_CUDA=ON|OFF|AUTO overrides.
if [ -z "${CCLX_ENABLE_CUDA:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    CCLX_ENABLE_CUDA=AUTO
  else
    CCLX_ENABLE_CUDA=OFF
  fi
fi
cmake_args=(-DCCLX_BUILD_TESTS=ON -DCCLX_ENABLE_CUDA="$CCLX_ENABLE_CUDA")
if "$PYTHON" -c "import nanobind" >/dev/null 2>&1; then
  py="$(command -v "$PYTHON")"
  cmake_args+=(-DCCLX_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -DPython3_EXECUTABLE="$py"
               -Dnanobind_DIR="$("$PYTHON" -m nanobind --cmake_dir)")
else
  echo "test.sh: nanobind is not importable; building without the Python extension" >&2
fi

cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
cmake --build "$BUILD_DIR" -j"$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
