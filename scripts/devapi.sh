#!/usr/bin/env bash
# The device-window GPU tests:
#   test_gpu_devapi_torchcomms   torchcomms' own device-API test kernels (DeviceApiTestKernels.cu,
#                                compiled unmodified) on cclx's backend; each case eager, then
#                                replayed from a CUDA graph
#   test_gpu_device_window       cclx's kernels on device windows (eager and CUDA-graph replays,
#                                the timeout path)
#   test_gpu_window              the one-sided windows' suite
# They are steps of scripts/gpu_verify.sh like every GPU test; this script only fetches what the
# first needs and narrows the run to these three.
#
#   scripts/devapi.sh extract <torchcomms git repository or source tree> [git ref, default HEAD]
#     Copies the six torchcomms files the first test compiles into .dev/torchcomms (ignored;
#     nothing of torchcomms enters the tree). From then on `scripts/gpu_verify.sh build` configures
#     build-dev with CCLX_TORCHCOMMS_SRC=.dev/torchcomms and builds and packs the test beside the
#     others (without the files gpu_verify lists it as not built).
#   scripts/devapi.sh build <torchcomms tree> [ref]   extract, then scripts/gpu_verify.sh build
#   scripts/devapi.sh run [rank counts, default "2 3 4 8"]
#     On the GPU machine: scripts/gpu_verify.sh run with VERIFY_MATCH on the three binaries and
#     VERIFY_SIZES the rank counts (ranks sharing GPU 0); its record and logs as gpu_verify's
#     ($OUT/gpu_verify.json). env: NUM_ITERATIONS (torchcomms' kernels, 20),
#     CCLX_TEST_DEVWIN_ROUNDS (50), and gpu_verify's settings.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
shift || true

extract() {
  src=${1:?usage: scripts/devapi.sh extract <torchcomms repo or source tree> [git ref]}
  ref=${2:-HEAD}
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
    echo "devapi: torchcomms files of $commit extracted into $dest"
  else
    for f in "${files[@]}"; do
      mkdir -p "$dest/$(dirname "$f")"
      cp "$src/$f" "$dest/$f"
    done
    echo "devapi: torchcomms files copied from $src into $dest"
  fi
}

case "$cmd" in
  extract) extract "$@" ;;
  build) extract "$@" && exec bash scripts/gpu_verify.sh build ;;
  run)
    VERIFY_SIZES=${*:-2 3 4 8} VERIFY_MATCH=${VERIFY_MATCH:-'cpp/test_gpu_(devapi_torchcomms|device_window|window)@'} \
      exec bash scripts/gpu_verify.sh run ;;
  *) sed -n 2,24p "$0"; exit 2 ;;
esac
