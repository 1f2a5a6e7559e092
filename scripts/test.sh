#!/usr/bin/env bash
# Builds cclx in ./build (with the Python extension when nanobind is importable) and runs every
# test with ctest. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_env.sh
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
cmake --build "$BUILD_DIR" -j"$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
