#!/usr/bin/env bash
# The main job: builds cclx in ./build and runs the CPU allreduce example (4 processes, 1 MiB).
# Extra arguments go to the example (--nranks N --bytes B --iters I).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCCLX_BUILD_TESTS=ON
cmake --build "$BUILD_DIR" -j"$(nproc)" --target cclx_example_allreduce_cpu
"$BUILD_DIR/examples/cclx_example_allreduce_cpu" "$@"
