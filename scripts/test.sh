#!/usr/bin/env bash
# Builds cclx in ./build (with the Python extension when nanobind is importable) and runs every
# test with ctest. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_env.sh
if [ "$have_python" != 1 ]; then
  echo "test.sh: $PYTHON cannot import nanobind: building without the Python extension, so the" \
       "Python tests do not run ($PYTHON -m pip install nanobind numpy pytest adds them)" >&2
fi
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
cmake --build "$BUILD_DIR" -j"$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
