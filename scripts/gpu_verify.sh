#!/usr/bin/env bash
# Every GPU test in one command, built on any machine with the CUDA toolkit and run on one GPU
# without a compiler:
#   scripts/gpu_verify.sh build   configure build-dev (Ninja, sm_90, ccache when installed) and build
#                                 what the run needs: libcclx, the Python extension, the NCCL
#                                 drop-in and every tests/cpp/gpu binary; then `pack`
#   scripts/gpu_verify.sh pack    copy those files, stripped, into build-dev/carry (the build
#                                 tree's layout, the RPATHs relative: $ORIGIN) with BUILD_INFO.json,
#                                 and print its size (the one folder to carry to the GPU machine)
#   scripts/gpu_verify.sh run [ARGS]  scripts/gpu_verify.py over build-dev/carry (or build-dev):
#                                 every GPU GoogleTest binary and GPU pytest module, the multi-rank
#                                 ones at 3, 8, 2 and 4 ranks sharing GPU 0, several steps at once
#                                 within a budget; writes $OUT/gpu_verify.json (every case and
#                                 world size: passed / failed / skipped with the reason / errored,
#                                 seconds per step, commit, device, wall time) and
#                                 $OUT/gpu_verify_logs.tar.gz; ends with
#                                 "gpu_verify: N passed, N failed, N skipped", non-zero on any
#                                 failure. Without a GPU it says so and exits 0.
#   scripts/gpu_verify.sh list    the plan: steps, world sizes, timeouts, estimated seconds
# Settings (run): OUT (bench/results), VERIFY_SIZES ("3 8 2 4"), VERIFY_JOBS (4 steps at once),
# VERIFY_GPU_PROCS (16 rank processes at once), VERIFY_BUDGET (500 s; steps still running are
# stopped, those not started are reported, their cases errored), CCLX_TEST_TIME_SCALE (0.4:
# tests/cpp/helpers/scale.h), VERIFY_WINDOW_ROUNDS (1000 at 2 ranks, 2/5 of it above),
# VERIFY_MATCH (a regex on step ids, e.g. 'cpp/.*@3'), VERIFY_GPU (0). Build: EXT_PYTHON (the
# Python the extension is built for: the GPU machine's, 3.12; default python3.12 when found),
# NANOBIND_DIR (nanobind's CMake folder when EXT_PYTHON has no nanobind),
# CUDA_ARCH (90), BUILD_DIR (build-dev), TARGETS (what to build, default everything above).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
STAGE=${1:-run}
[ $# -gt 0 ] && shift
BUILD=${BUILD_DIR:-build-dev}
CARRY="$BUILD/carry"
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
say() { echo "gpu_verify: $*"; }

ext_python() {  # the interpreter whose ABI the extension is built for
  if [ -n "${EXT_PYTHON:-}" ]; then echo "$EXT_PYTHON"; return; fi
  for c in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 python3; do
    if "$c" -c 'import sys' >/dev/null 2>&1; then command -v "$c"; return; fi
  done
}

TC_SRC=${CCLX_TORCHCOMMS_SRC:-$PWD/.dev/torchcomms}  # torchcomms' device-API files (scripts/devapi.sh extract)
have_tc() { [ -f "$TC_SRC/comms/torchcomms/device/TorchCommDeviceWindow.hpp" ]; }

gpu_targets() {  # every GPU test binary: tests/cpp/gpu/**/test_gpu_*.cc (+ torchcomms' device kernels)
  find tests/cpp/gpu -name 'test_gpu_*.cc' -printf '%f\n' | sed 's/\.cc$//' | sort | tr '\n' ' '
  if have_tc; then echo test_gpu_devapi_torchcomms; fi
}

build() {
  local log="$BUILD/verify_build.log" py nb launch=() args src gt
  mkdir -p "$BUILD"
  py=$(ext_python)
  nb=${NANOBIND_DIR:-}  # nanobind's CMake files: any interpreter's copy serves
  for c in "$py" .venv/bin/python python3; do
    [ -n "$nb" ] || nb=$("$c" -m nanobind --cmake_dir 2>/dev/null)
  done
  [ -n "$nb" ] || { say "BUILD FAILED: nanobind not found (pip install nanobind; NANOBIND_DIR)"; return 1; }
  command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  args=()
  if command -v ninja >/dev/null; then args=(-G Ninja); fi
  args+=(-DCMAKE_BUILD_TYPE=Release -DCCLX_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}"
         -DCCLX_BUILD_TESTS=ON -DCCLX_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -Dnanobind_DIR="$nb"
         -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON "${launch[@]}")
  if have_tc; then args+=(-DCCLX_TORCHCOMMS_SRC="$TC_SRC"); fi
  say "configuring $BUILD (extension for $("$py" --version 2>&1), sm_${CUDA_ARCH:-90}); log $log"
  if ! cmake -S . -B "$BUILD" "${args[@]}" >"$log" 2>&1; then
    src=""  # GoogleTest from source where no package is installed
    for c in "${GTEST_SRC:-}" .dev/googletest /usr/src/googletest; do
      if [ -n "$c" ] && [ -f "$c/CMakeLists.txt" ]; then src=$c; break; fi
    done
    [ -n "$src" ] || { tail -20 "$log"; say "CONFIGURE FAILED (no GoogleTest: set GTEST_SRC)"; return 1; }
    gt="$PWD/$BUILD/_gtest"
    { cmake -S "$src" -B "$gt/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
        -DCMAKE_INSTALL_PREFIX="$gt/install" -DCMAKE_POSITION_INDEPENDENT_CODE=ON &&
      cmake --build "$gt/build" -j"$JOBS" && cmake --install "$gt/build"; } >>"$log" 2>&1 ||
      { tail -20 "$log"; say "GOOGLETEST BUILD FAILED"; return 1; }
    rm -f "$BUILD/CMakeCache.txt"
    cmake -S . -B "$BUILD" "${args[@]}" -DCMAKE_PREFIX_PATH="$gt/install" >>"$log" 2>&1 ||
      { tail -30 "$log"; say "CONFIGURE FAILED"; return 1; }
  fi
  local targets=${TARGETS:-cclx _C cclx_nccl $(gpu_targets)}
  say "building with $JOBS jobs: $targets"
  # shellcheck disable=SC2086  # the targets are words
  if ! cmake --build "$BUILD" -j"$JOBS" --target $targets >>"$log" 2>&1; then
    grep -E "error|FAILED" "$log" | head -40
    say "BUILD FAILED (log $log)"
    return 1
  fi
  say "built"
}

pack() {  # the files the run needs, stripped, in the build tree's layout
  local f n=0 py
  [ -f "$BUILD/CMakeCache.txt" ] || { say "no build in $BUILD (scripts/gpu_verify.sh build)"; return 1; }
  rm -rf "$CARRY"
  mkdir -p "$CARRY/tests" "$CARRY/python/cclx" "$CARRY/nccl_dropin"
  # libcclx under the name the binaries ask for (its SONAME), as a plain file: a carried link
  # travels only as a link
  f=$(find "$BUILD" -maxdepth 1 -name 'libcclx.so.*' ! -type l | head -1)
  [ -n "$f" ] || { say "no libcclx in $BUILD"; return 1; }
  cp "$f" "$CARRY/$(objdump -p "$f" | awk '/SONAME/ {print $2}')"
  cp "$BUILD"/python/cclx/_C*.so "$CARRY/python/cclx/" 2>/dev/null
  cp -L "$BUILD"/nccl_dropin/libnccl.so.2 "$CARRY/nccl_dropin/" 2>/dev/null
  for f in $(gpu_targets); do
    [ -x "$BUILD/tests/$f" ] && cp "$BUILD/tests/$f" "$CARRY/tests/" && n=$((n + 1))
  done
  # the CUDA runtime the test binaries link (the GPU machine's own is used where it is found first)
  f=$(ldd "$CARRY/tests/test_gpu_shared" 2>/dev/null | awk '/libcudart.so/ {print $3}')
  [ -n "$f" ] && [ -f "$f" ] && cp -L "$f" "$CARRY/"
  find "$CARRY" -type f \( -name '*.so*' -o -path '*/tests/*' \) -exec strip --strip-unneeded {} + 2>/dev/null
  py=$(grep -E '^Python_EXECUTABLE' "$BUILD/CMakeCache.txt" | cut -d= -f2)
  cat >"$CARRY/BUILD_INFO.json" <<EOF
{"commit": "$(git rev-parse HEAD 2>/dev/null)", "dirty": $( [ -n "$(git status --porcelain 2>/dev/null)" ] && echo true || echo false),
 "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "host": "$(hostname)",
 "extension_python": "$("$py" --version 2>&1)", "extension": "$(cd "$CARRY/python/cclx" && ls _C*.so 2>/dev/null)",
 "cuda_arch": "$(grep -E '^CMAKE_CUDA_ARCHITECTURES' "$BUILD/CMakeCache.txt" | cut -d= -f2)",
 "nvcc": "$(nvcc --version 2>/dev/null | tail -1)", "binaries": $n}
EOF
  say "packed $n test binaries, libcclx, the extension and the drop-in into $CARRY:" \
      "$(du -sb "$CARRY" | awk '{printf "%.1f MiB", $1 / 1048576}') (carry: $CARRY)"
}

run() {
  local dir="$CARRY" suffix
  if ! command -v nvidia-smi >/dev/null 2>&1 || [ -z "$(nvidia-smi -L 2>/dev/null)" ]; then
    say "SKIPPED: no NVIDIA GPU here (nvidia-smi lists none); nothing was run"
    return 0
  fi
  [ -d "$dir/tests" ] || dir="$BUILD"
  [ -d "$dir/tests" ] || { say "no build: run scripts/gpu_verify.sh build here, or carry $CARRY"; return 2; }
  suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
  if ! ls "$dir/python/cclx/_C$suffix" >/dev/null 2>&1; then
    say "WARNING: $dir/python/cclx holds $(cd "$dir/python/cclx" 2>/dev/null && ls _C*.so 2>/dev/null)," \
        "not _C$suffix for this python3: the pytest steps cannot import cclx (build with EXT_PYTHON)"
  fi
  python3 scripts/gpu_verify.py --build "$dir" "$@"
}

case "$STAGE" in
build) build && pack ;;
pack) pack ;;
run) run "$@" ;;
list) python3 scripts/gpu_verify.py --list --build "$CARRY" "$@" ;;
*) echo "usage: scripts/gpu_verify.sh build|pack|run|list [args of scripts/gpu_verify.py]"; exit 2 ;;
esac
