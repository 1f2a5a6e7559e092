#!/usr/bin/env bash
# Every GPU test binary (tests/cpp/gpu) under compute-sanitizer: memcheck (--leak-check full),
# racecheck, synccheck and initcheck, the binaries whose ranks share a GPU at 2 ranks (rank r on
# GPU r % count). The steps run through scripts/gpu_verify.py (the same runner, summarizer and
# record as scripts/gpu_verify.sh): $OUT/gpu_sanitize.json holds every case per tool (passed /
# failed / skipped / errored, seconds), each step's sanitizer report count (a step with reports
# fails), the filters and exclusions below; the logs are in $OUT/gpu_sanitize_logs.tar.gz. The
# closing line is "gpu_sanitize: N passed, N failed, N skipped"; non-zero on any failure or
# report. Without a GPU it says so and exits 0. Needs the build of scripts/gpu_verify.sh build
# (build-dev/carry, or build-dev).
#   scripts/gpu_sanitize.sh [BUILD_DIR] [WORLD_SIZES]     (defaults build-dev/carry, "2")
#   SANITIZE_MODE=quick (default)  fits one 10-minute call: per binary the cases that check
#       results against the host twin (filters below, one or two cases where a binary has no
#       such case); test_gpu_failure, whose every case waits out a timeout that the tools
#       stretch, runs in the full mode only; CCLX_TEST_TIME_SCALE=10 (guards only: these cases
#       wait out no timeout), 50 window rounds, 6 steps at once, a 500 s budget (what is not
#       done by then is reported as errored)
#   SANITIZE_MODE=full   every case but the exclusions below, CCLX_TEST_TIME_SCALE=4 (the
#       timeouts the failure cases wait out grow with it), no budget: about an hour
#   TOOLS="memcheck racecheck"   the tools (default all four)
#   VERIFY_MATCH='test_gpu_shared@'  a regex on step ids; GTEST_FILTER=... replaces the filters
#   RUN_TIMEOUT=900   seconds per step (tool x binary x world size)
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${1:-build-dev/carry}
[ -d "$BUILD/tests" ] || BUILD=build-dev
SIZES=${2:-2}
MODE=${SANITIZE_MODE:-quick}
TOOLS=${TOOLS:-memcheck racecheck synccheck initcheck}
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
if ! command -v nvidia-smi >/dev/null 2>&1 || [ -z "$(nvidia-smi -L 2>/dev/null)" ]; then
  echo "gpu_sanitize: SKIPPED: no NVIDIA GPU here (nvidia-smi lists none); nothing was run"
  exit 0
fi
[ -x "$CS" ] || { echo "gpu_sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }

# Excluded from memcheck and initcheck: the cases that kill a rank or inject a fault, because the
# tool counts the fault itself. A killed rank (SIGKILL, or the watchdog's SIGABRT) is a process
# that "did not terminate successfully" for the tool, and it and the aborted comms of its peers
# never free their device memory, which --leak-check full reports; an injected setup failure (or
# settings that fail creation) leaves a rank's published buffer allocated on purpose
# (docs/design/failure.md: never freed under a peer). racecheck and synccheck run them (full mode).
FAULTS='"GpuShared.KilledRankIsNamedAndSurvivorsGoOn", "GpuRmsNorm.KilledRankIsNamed",
  "GpuSharedP2P.MismatchAndKilledPeerAreNamed", "GpuFailure.DeadRankGivesExactOrNaN",
  "GpuFailure.WatchdogAbortsTheProcess", "GpuFaults.AbortWithDeadPeerReturnsAtOnce",
  "GpuFaults.FinalizeWithoutPeerReturnsWithinTheBound", "GpuFaults.SetupFailureAt*",
  "GpuFaults.DifferentStagingBytesFailCreationOnEveryRank"'
# The quick mode's cases: results against the host twin (*Equal*) where a binary has them.
QUICK='"*": "*Equal*",
  "test_gpu_faults": "GpuFaults.CaptureOnForkedStreamsIsOrdered:GpuFaults.FinalizeWaitsForTheCommsOwnWork",
  "test_gpu_window": "GpuWindow.Ring:GpuWindow.ManyPutsThenOneSignalAcrossStreams:GpuWindow.BackToBackRounds",
  "test_gpu_window_vmm": "*", "test_gpu_dtype_guard": "*", "test_gpu_stream_temp": "*",
  "test_gpu_grow_faults": "GpuGrowFaults.AllReduceOneRank:GpuGrowFaults.AllGatherAllRanks",
  "test_gpu_dda": "GpuDda.SelectionFollowsSettings:GpuDda.LamportAllOnesInputs",
  "test_gpu_dda_stress": "GpuDdaStress.PeerBarrier", "test_gpu_grouped": "GpuGrouped.SendRecvAnyOrder",
  "test_gpu_nccl": "GpuNccl.RejectsHostAndForeignPointers:GpuNcclLib.*",
  "test_gpu_device_window": "*", "test_gpu_devapi_torchcomms": "*",
  "test_gpu_failure": null'
WHY='"test_gpu_failure": "every case waits out a timeout on purpose: SANITIZE_MODE=full"'

if [ "$MODE" = full ]; then
  filters='"*": "*"'; scale=4; args=(--budget 1000000 --jobs 4 --gpu-procs 8)
  [ -n "${RUN_TIMEOUT:-}" ] || RUN_TIMEOUT=1800
else
  filters=$QUICK; scale=10; args=(--budget "${VERIFY_BUDGET:-500}" --jobs 6 --gpu-procs 12)
  # torchcomms' device-API stress kernels: 2 iterations, one graph replay per case and messages
  # up to 64 KiB (with 2 iterations, one thread putting 16 MiB still ran out the step's time
  # under memcheck and initcheck; the verify run and full mode keep every size)
  export NUM_ITERATIONS=${NUM_ITERATIONS:-2} CCLX_TEST_DEVAPI_REPLAYS=${CCLX_TEST_DEVAPI_REPLAYS:-1}
  export CCLX_TEST_DEVAPI_MAX_BYTES=${CCLX_TEST_DEVAPI_MAX_BYTES:-65536}
  [ -n "${RUN_TIMEOUT:-}" ] || RUN_TIMEOUT=300
fi
[ -n "${GTEST_FILTER:-}" ] && filters="\"*\": \"$GTEST_FILTER\""
tools=""
for t in $TOOLS; do
  case $t in
    memcheck) a="--tool memcheck --leak-check full" ;;
    racecheck) a="--tool racecheck --racecheck-report all" ;;
    synccheck) a="--tool synccheck" ;;
    # initcheck cannot see a peer process's writes: cclx marks every peer mapping initialized
    # through NVTX's memory API (gpu/window/vmm.h), which the tool reads with --nvtx yes.
    initcheck) a="--tool initcheck"
               "$CS" --help 2>&1 | grep -q -- '--nvtx' && a="$a --nvtx yes" ;;
    *) echo "gpu_sanitize: unknown tool $t"; exit 2 ;;
  esac
  tools="$tools${tools:+, }\"$t\": \"$a\""
done
spec="{\"mode\": \"$MODE\", \"tools\": {$tools}, \"filters\": {$filters}, \"why_not_run\": {$WHY},
  \"exclude\": {\"memcheck\": [$FAULTS], \"initcheck\": [$FAULTS]}, \"scale\": $scale}"
echo "gpu_sanitize: $MODE mode, tools: $TOOLS; world sizes $SIZES; build $BUILD"
python3 scripts/gpu_verify.py --tag gpu_sanitize --build "$BUILD" --only cpp --sizes "$SIZES" \
  --sanitize "$spec" --compute-sanitizer "$CS" --step-timeout "$RUN_TIMEOUT" \
  --window-rounds 50,50 --out "${OUT:-bench/results}" "${args[@]}"
