#!/usr/bin/env bash
# Configures and builds cclx with CUDA into build-gpu-dev and runs the GPU GoogleTests.
# Usage: scripts/gpu_cpp.sh [extra ctest args]. Run on a machine with >= 2 GPUs.
set -u -o pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
BUILD=build-gpu-dev
JOBS=$(nproc 2>/dev/null || echo 8)
ARCH=${CCLX_CUDA_ARCH:-90}
log=$(mktemp)
start=$(date +%s)
if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCCLX_ENABLE_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCLX_BUILD_TESTS=ON >"$log" 2>&1; then
  tail -40 "$log"; echo "gpu_cpp: CONFIGURE FAILED"; exit 1
fi
if ! cmake --build "$BUILD" -j"$JOBS" >>"$log" 2>&1; then
  grep -E "error|FAILED" "$log" | head -40; echo "gpu_cpp: BUILD FAILED"; exit 1
fi
nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
(cd "$BUILD" && ctest -R gpu --output-on-failure --timeout 600 "$@") | tee -a "$log"
rc=${PIPESTATUS[0]}
summary=$(grep -E "tests passed|tests failed" "$log" | tail -1)
echo "gpu_cpp: rc=$rc, ${summary:-no tests ran}, $(( $(date +%s) - start ))s (log $log)"
exit "$rc"
