#!/usr/bin/env bash
# GPU validation that one GPU can carry, in stages (each fits a 10-minute command); the whole of
# it at every world size in one command: scripts/gpu_verify.sh, whose build and runner the
# stages below use:
#   scripts/gpu_one.sh build    configure and build cclx with CUDA, the Python extension, the NCCL
#                               drop-in and the GPU tests into build-dev (scripts/gpu_verify.sh
#                               build: Ninja; GoogleTest from $GTEST_SRC, .dev/googletest or
#                               /usr/src/googletest when not installed)
#   scripts/gpu_one.sh cpp [N]  device codec checks (test_gpu_fp8) and the several-ranks-per-GPU
#                               suites (test_gpu_shared, test_gpu_failure, test_gpu_shared_colls)
#                               (SHARED_BINS; N = world sizes, default "2 3 4 5 8")
#   scripts/gpu_one.sh window [N]  one-sided windows with ranks sharing the GPU (test_gpu_window at
#                               N = world sizes, default "2 3 4 8": 10^4 back-to-back put/signal
#                               rounds eager and replayed from a CUDA graph at 2 ranks, 500
#                               above; gpu_window_<n>.json) and the torch window cases
#                               (tests/gpu/api/test_gpu_window.py); windows on cuMem memory
#                               (test_gpu_window_vmm at N) and communication memory
#                               (tests/gpu/api/test_gpu_memory.py)
#   scripts/gpu_one.sh dropin [N]  ranks sharing the GPU through the NCCL drop-in: point to point
#                               on the pipelined exchange (test_gpu_shared_p2p at N = world
#                               sizes, default "2 3 4 8"), then torch.distributed (backend
#                               "nccl") under cclx-nccl run at 2, 3, 4 and 8 ranks, a killed rank
#                               and examples/tp_mlp.py (tests/gpu/dropin/test_gpu_dropin_shared.py);
#                               the torchrun logs under $OUT/pytest_dropin_tmp
#   scripts/gpu_one.sh py       pytest tests/gpu (what one GPU runs: drop-in under torch, TP bench,
#                               cclx-perf baselines, the fused allreduce + RMSNorm custom ops at 1,
#                               2 and 3 ranks) and the TP benchmark smoke run
#                               (bench/tp_smoke.sh)
#   scripts/gpu_one.sh suites [N]  the GPU suites on the shared per-rank harness
#                               (tests/cpp/helpers/gpu_ranks.h) at one world size N (default 3):
#                               test_gpu_shared, _failure, _faults, _shared_colls, _shared_grouped,
#                               _rmsnorm, _a2av_device, the window suites (500 back-to-back
#                               rounds) and the GPU pytest cases of cclx-perf, communication
#                               memory, windows and device_alltoallv_single;
#                               about 6 minutes
#   scripts/gpu_one.sh baselines  the cclx-perf baselines at world size 1: nccl, nccl-sym (NCCL
#                               symmetric windows: registration, graph capture) and torch-symm
#                               (symmetric memory one-shot / two-shot, multicast off), their
#                               GPU test and two sweeps (graph, eager) with JSON; skipped columns
#                               say why
# Results and logs go to ${OUT:-bench/results}; each stage prints one summary line.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
STAGE=${1:?usage: scripts/gpu_one.sh build|cpp|window|dropin|py|suites|baselines}
OUT=${OUT:-bench/results}
BUILD=build-dev
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export CCLX_ABORT_ON_ERROR=${CCLX_ABORT_ON_ERROR:-0}  # the suites check errors (tests of the default set it)
PY=${PYTHON:-python3}
t0=$(date +%s)
line() { echo "gpu_one $STAGE: $1, $(( $(date +%s) - t0 ))s"; }

# The runner of scripts/gpu_verify.sh over $BUILD's binaries: one step per binary and world
# size, the record $OUT/gpu_one_<stage>.json, the closing line "gpu_one_<stage>: N passed, ...".
verify() {
  "$PY" scripts/gpu_verify.py --tag "gpu_one_$STAGE" --build "$BUILD" --only cpp --out "$OUT" \
    --jobs 1 --budget 100000 --time-scale "${CCLX_TEST_TIME_SCALE:-1}" "$@"
}

case "$STAGE" in
build)
  EXT_PYTHON=${EXT_PYTHON:-$(command -v "$PY")} BUILD_DIR=$BUILD bash scripts/gpu_verify.sh build ||
    { line "BUILD FAILED"; exit 1; }
  line "built"
  ;;
cpp)
  sizes=${2:-2 3 4 5 8}
  verify --match '^cpp/test_gpu_fp8$'
  crc=$?
  # The binaries whose ranks share a GPU (CCLX_TEST_RANKS, rank r on GPU r % count), each at the
  # world sizes of SHARED_BINS ("name:3,5": its own sizes), one after another.
  bins=${SHARED_BINS:-test_gpu_shared test_gpu_failure:3,5 test_gpu_faults:2,3,5 test_gpu_shared_colls test_gpu_shared_grouped test_gpu_shared_p2p test_gpu_rmsnorm test_gpu_a2av_device}
  match="" all=""
  for entry in $bins; do
    name=${entry%%:*}
    s=$sizes
    [ "$entry" != "$name" ] && s=$(echo "${entry#*:}" | tr ',' ' ')
    all="$all $s"
    match="$match${match:+|}^cpp/$name@($(echo "$s" | tr ' ' '|'))\$"
  done
  all=$(echo "$all" | tr ' ' '\n' | sort -nu | tr '\n' ' ')
  verify --sizes "$all" --match "$match" --gpu all --window-rounds 10000,500
  src=$?
  line "codec rc=$crc shared rc=$src"
  [ $crc -eq 0 ] && [ $src -eq 0 ]
  ;;
window)
  sizes=${2:-2 3 4 8}
  verify --match '^cpp/test_gpu_window(_vmm)?@' --sizes "$sizes" --window-rounds 10000,500
  wrc=$?
  export CCLX_EXT_DIR="$PWD/$BUILD/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  $PY -m pytest -q -rs tests/gpu/api/test_gpu_window.py tests/gpu/api/test_gpu_memory.py --junitxml="$OUT/pytest_gpu_window.xml" \
    >"$OUT/pytest_gpu_window.log" 2>&1
  prc=$?
  tail -4 "$OUT/pytest_gpu_window.log"
  line "test_gpu_window rc=$wrc pytest rc=$prc"
  [ $wrc -eq 0 ] && [ $prc -eq 0 ]
  ;;
dropin)
  sizes=${2:-2 3 4 8}
  verify --match '^cpp/test_gpu_shared_p2p@' --sizes "$sizes"
  crc=$?
  export CCLX_EXT_DIR="$PWD/$BUILD/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  timeout 480 "$PY" -m pytest -q -rs -s tests/gpu/dropin/test_gpu_dropin_shared.py \
    --basetemp="$OUT/pytest_dropin_tmp" --junitxml="$OUT/pytest_dropin_shared.xml" \
    >"$OUT/pytest_dropin_shared.log" 2>&1
  prc=$?
  grep -E "ranks:|killed rank|passed|failed|error" "$OUT/pytest_dropin_shared.log" | tail -12
  line "p2p rc=$crc pytest rc=$prc"
  [ $crc -eq 0 ] && [ $prc -eq 0 ]
  ;;
py)
  export CCLX_EXT_DIR="$PWD/$BUILD/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  $PY -m pytest -q -rs tests/gpu --junitxml="$OUT/pytest_gpu.xml" >"$OUT/pytest_gpu.log" 2>&1
  prc=$?
  tail -15 "$OUT/pytest_gpu.log"
  brc=0
  if [ -f bench/tp_smoke.sh ]; then
    mkdir -p "$OUT/tp"
    timeout 300 bash bench/tp_smoke.sh "$OUT/tp" >"$OUT/tp_smoke.log" 2>&1
    brc=$?
    tail -12 "$OUT/tp_smoke.log"
  fi
  line "pytest rc=$prc tp_smoke rc=$brc"
  [ $prc -eq 0 ] && [ $brc -eq 0 ]
  ;;
suites)
  n=${2:-3}
  verify --sizes "$n" --window-rounds 500,500 \
    --match '^cpp/test_gpu_(shared|failure|faults|shared_colls|shared_grouped|rmsnorm|a2av_device|window|window_vmm)@'
  src=$?
  wrc=$src
  export CCLX_EXT_DIR="$PWD/$BUILD/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  $PY -m pytest -q -rs tests/gpu/perf/test_gpu_perf_fused.py tests/gpu/api/test_gpu_memory.py tests/gpu/api/test_gpu_window.py \
    tests/gpu/collectives/test_gpu_a2av_device.py \
    --junitxml="$OUT/pytest_suites.xml" >"$OUT/pytest_suites.log" 2>&1
  prc=$?
  tail -4 "$OUT/pytest_suites.log"
  line "shared rc=$src windows rc=$wrc pytest rc=$prc"
  [ $src -eq 0 ] && [ $wrc -eq 0 ] && [ $prc -eq 0 ]
  ;;
baselines)
  export CCLX_EXT_DIR="$PWD/$BUILD/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  $PY -m pytest -q -rs tests/gpu/perf/test_gpu_perf_baselines.py \
    --junitxml="$OUT/pytest_baselines.xml" >"$OUT/pytest_baselines.log" 2>&1
  prc=$?
  tail -6 "$OUT/pytest_baselines.log"
  src=0
  for mode in graph eager; do
    flags=(-n 20)
    [ $mode = graph ] && flags=(-G 10 -n 50)
    timeout 240 "$PY" -m cclx.perf -N 1 --baseline all -b 1K -e 256M -f 4 "${flags[@]}" \
      --json "$OUT/perf_baselines_ws1_$mode.json" >"$OUT/perf_baselines_ws1_$mode.txt" 2>&1 ||
      src=1
    grep -E "^# baseline|summary" "$OUT/perf_baselines_ws1_$mode.txt"
  done
  line "pytest rc=$prc sweeps rc=$src"
  [ $prc -eq 0 ] && [ $src -eq 0 ]
  ;;
*)
  echo "unknown stage $STAGE"
  exit 2
  ;;
esac
