#!/usr/bin/env bash
# Configures and builds cclx with CUDA into build-gpu-dev and runs the GPU GoogleTests
# (ctest -R gpu). Usage: scripts/gpu_cpp.sh [extra ctest args]. Needs >= 2 GPUs for most tests.
# GoogleTest: the installed package if CMake finds it; otherwise built from source found at
# $GTEST_SRC, .dev/googletest or /usr/src/googletest.
set -u -o pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
export CCLX_ABORT_ON_ERROR=${CCLX_ABORT_ON_ERROR:-0}  # the suites check errors (tests of the default set it)
BUILD=build-gpu-dev
JOBS=$(nproc 2>/dev/null || echo 8)
ARCH=${CCLX_CUDA_ARCH:-90}
log=$(mktemp)
start=$(date +%s)
finish() { echo "gpu_cpp: $1, $(( $(date +%s) - start ))s (log $log)"; exit "$2"; }

configure() {
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCCLX_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCCLX_BUILD_TESTS=ON "$@" >>"$log" 2>&1
}
if ! configure; then
  if grep -q "GTest" "$log"; then
    src=""
    for c in "${GTEST_SRC:-}" .dev/googletest /usr/src/googletest; do
      if [ -n "$c" ] && [ -f "$c/CMakeLists.txt" ]; then src=$c; break; fi
    done
    [ -n "$src" ] || { tail -20 "$log"; finish "CONFIGURE FAILED (GoogleTest not installed; set GTEST_SRC)" 1; }
    echo "building GoogleTest from $src" | tee -a "$log"
    gt="$PWD/$BUILD/_gtest"
    if ! { cmake -S "$src" -B "$gt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
             -DCMAKE_INSTALL_PREFIX="$gt/install" -DBUILD_GMOCK=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
           && cmake --build "$gt/build" -j"$JOBS" && cmake --install "$gt/build"; } >>"$log" 2>&1; then
      tail -20 "$log"; finish "GOOGLETEST BUILD FAILED" 1
    fi
    rm -f "$BUILD/CMakeCache.txt"
    configure -DCMAKE_PREFIX_PATH="$gt/install" || { tail -40 "$log"; finish "CONFIGURE FAILED" 1; }
  else
    tail -40 "$log"; finish "CONFIGURE FAILED" 1
  fi
fi
if ! cmake --build "$BUILD" -j"$JOBS" >>"$log" 2>&1; then
  grep -E "error|FAILED" "$log" | head -40; finish "BUILD FAILED" 1
fi
nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
(cd "$BUILD" && ctest -R gpu --output-on-failure --timeout 600 "$@") 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
summary=$(grep -E "tests passed|tests failed" "$log" | tail -1)
finish "rc=$rc, ${summary:-no tests ran}" "$rc"
