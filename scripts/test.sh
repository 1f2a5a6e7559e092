#!/usr/bin/env bash
# Sets up what is missing (scripts/setup_env.sh: system packages, .venv with every extra of
# pyproject.toml, so every test the machine can run runs; the GPU tests skip without a GPU),
# builds cclx in ./build and runs every test with ctest (the Python tests with the .venv
# interpreter). Arguments go to ctest. Exits non-zero on any failure.
#   CCLX_ENABLE_CUDA=OFF bash scripts/test.sh     # no CUDA kernels (the slow part of the build)
#   CCLX_EXTRAS="test plot" bash scripts/test.sh  # fewer extras: the tests needing others skip
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_WHO=test.sh
SETUP_EXTRAS="all"
t0=$(date +%s)
source scripts/setup_env.sh
if [ "$have_python" != 1 ]; then
  echo "test.sh: $PYTHON cannot import nanobind after the set-up; delete .venv and start again" >&2
  exit 1
fi
t1=$(date +%s)
echo "test.sh: configuring $BUILD_DIR (CUDA: $CCLX_ENABLE_CUDA, Python: $PYTHON)" >&2
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
t2=$(date +%s)
echo "test.sh: building everything in $BUILD_DIR with $(nproc) jobs" >&2
cmake --build "$BUILD_DIR" -j"$(nproc)"
t3=$(date +%s)
echo "test.sh: running ctest (the Python tests take minutes: pytest prints at the end)" >&2
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
t4=$(date +%s)
echo "test.sh: setup $((t1 - t0)) s, configure $((t2 - t1)) s, build $((t3 - t2)) s," \
     "ctest $((t4 - t3)) s"
