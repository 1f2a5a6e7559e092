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
t0=$(date +%s)
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
t1=$(date +%s)
cmake --build "$BUILD_DIR" -j"$(nproc)"
t2=$(date +%s)
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
t3=$(date +%s)
echo "test.sh: configure $((t1 - t0)) s, build $((t2 - t1)) s, ctest $((t3 - t2)) s"
