#!/usr/bin/env bash
# The device-window GPU tests, built here and run on a GPU machine:
#   test_gpu_devapi_torchcomms   torchcomms' own device-API test kernels (DeviceApiTestKernels.cu,
#                                compiled unmodified) on cclx's backend; each case eager, then
#                                replayed from a CUDA graph
#   test_gpu_device_window       cclx's kernels on device windows (eager and CUDA-graph replays,
#                                the timeout path)
#   test_gpu_window              the one-sided windows' suite (the put kernel's copy moved)
#
#   scripts/devapi.sh build <torchcomms git repository or source tree> [git ref, default HEAD]
#     Extracts the few torchcomms files the first test compiles into .dev/torchcomms (ignored;
#     nothing of torchcomms enters the tree), builds the three in $BUILD (build-devapi) for
#     $CCLX_CUDA_ARCH (90-real: sm_90 code only, the smallest library) with $JOBS (2) jobs, and
#     packs them with libcclx.so.0 into .dev/devapi (ignored: the folder to carry; the binaries'
#     run path is $ORIGIN/..), printing its size.
#   scripts/devapi.sh run [folder, default .dev/devapi] [rank counts, default 2 3 4 8]
#     On the GPU machine, from the repository root: each binary at each rank count
#     (CCLX_TEST_RANKS: rank r on GPU r % count, so ranks share the GPUs there are). env:
#     NUM_ITERATIONS (torchcomms' kernels, 20), CCLX_TEST_DEVWIN_ROUNDS (50),
#     CCLX_TEST_WINDOW_ROUNDS (2000 here), DEVAPI_TESTS (which binaries), DEVAPI_TIMEOUT (s per
#     binary, 900). Logs: $OUT (else /tmp), devapi.<ranks>.log; a summary line per binary on
#     stdout. Exit status: non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
shift || true

build() {
  src=${1:?usage: scripts/devapi.sh build <torchcomms repo or source tree> [git ref]}
  ref=${2:-HEAD}
  BUILD=${BUILD:-build-devapi}
  ARCH=${CCLX_CUDA_ARCH:-90-real}
  JOBS=${JOBS:-2}
  dest=.dev/torchcomms
  files=(
    comms/torchcomms/RegisteredBuffer.hpp
    comms/torchcomms/device/TorchCommDeviceWindow.hpp
    comms/torchcomms/device/DeviceBackendTraits.hpp
    comms/torchcomms/tests/integration/cpp/DeviceApiTestKernels.cu
    comms/torchcomms/tests/integration/cpp/DeviceApiTestKernels.cuh
    comms/torchcomms/tests/integration/cpp/StressTestKernelUtils.cuh
  )

  rm -rf "$dest"
  mkdir -p "$dest"
  if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    commit=$(git -C "$src" rev-parse "$ref^{commit}")
    for f in "${files[@]}"; do
      mkdir -p "$dest/$(dirname "$f")"
      git -C "$src" show "$commit:$f" >"$dest/$f"
    done
    echo "devapi build: torchcomms files of $commit extracted into $dest"
  else
    for f in "${files[@]}"; do
      mkdir -p "$dest/$(dirname "$f")"
      cp "$src/$f" "$dest/$f"
    done
    echo "devapi build: torchcomms files copied from $src into $dest"
  fi

  launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  # $ORIGIN run paths: the binaries find libcclx.so wherever the build folder is carried.
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCCLX_ENABLE_CUDA=ON -DCCLX_BUILD_TESTS=ON \
    -DCCLX_BUILD_PYTHON=OFF -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
    -DCCLX_TORCHCOMMS_SRC="$PWD/$dest" "${launcher[@]}"
  nice -n 10 cmake --build "$BUILD" -j"$JOBS" --target test_gpu_devapi_torchcomms \
    test_gpu_device_window test_gpu_window

  # One folder to carry: libcclx.so.0 and the test binaries below it (their run path is
  # $ORIGIN/..), stripped.
  pack=.dev/devapi
  rm -rf "$pack"
  mkdir -p "$pack/tests"
  cp -L "$BUILD/libcclx.so.0" "$pack/libcclx.so.0"
  for t in test_gpu_devapi_torchcomms test_gpu_device_window test_gpu_window; do
    cp "$BUILD/tests/$t" "$pack/tests/$t"
  done
  strip --strip-unneeded "$pack/libcclx.so.0" "$pack"/tests/* 2>/dev/null || true
  echo "devapi build: carry $pack ($(du -sm "$pack" | cut -f1) MiB):"
  (cd "$pack" && find . -type f -printf '  %p %s\n' | awk '{printf "  %-40s %6.1f MiB\n", $1, $2 / 1048576}')
  echo "devapi build: on the GPU machine: scripts/devapi.sh run $pack [rank counts, default 2 3 4 8]"
}

run() {
  set +e
  dir=${1:-.dev/devapi}
  shift || true
  ranks=${*:-2 3 4 8}
  tests=${DEVAPI_TESTS:-test_gpu_device_window test_gpu_devapi_torchcomms test_gpu_window}
  export CCLX_ABORT_ON_ERROR=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
  export CCLX_TEST_WINDOW_ROUNDS=${CCLX_TEST_WINDOW_ROUNDS:-2000}
  out=${OUT:-/tmp}
  nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  rc=0
  for n in $ranks; do
    for t in $tests; do
      log="$out/devapi.$n.log"
      part=$(mktemp)
      start=$(date +%s)
      CCLX_TEST_RANKS=$n timeout "${DEVAPI_TIMEOUT:-900}" "$dir/tests/$t" >"$part" 2>&1
      r=$?
      { echo "===== $t, $n ranks, rc=$r"; cat "$part"; } >>"$log"
      [ $r -eq 0 ] || rc=1
      summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?" "$part" | tr '\n' ' ')
      echo "$t ranks=$n rc=$r $(( $(date +%s) - start ))s: ${summary:-no summary (see $log)}"
      grep -E "^\[devapi\]|^\[devwin\]|^\[window rounds\]|^\[  FAILED  \] [A-Za-z]" "$part" \
        | sed 's/^/  /'
      rm -f "$part"
    done
  done
  return $rc
}

case "$cmd" in
  build) build "$@" ;;
  run) run "$@" ;;
  *) sed -n 2,24p "$0"; exit 2 ;;
esac
