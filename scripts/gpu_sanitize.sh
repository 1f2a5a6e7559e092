#!/usr/bin/env bash
# The GPU suites under compute-sanitizer: memcheck (with leak checking), racecheck, synccheck and
# initcheck over the binaries of the shared-GPU harness (tests/cpp/helpers/gpu_ranks.h: rank r on
# GPU r % count, so one GPU carries 2 and 3 ranks), each at each world size. Writes one log per
# run and $OUT/gpu_sanitize.json (per tool, binary and world size: exit code, gtest counts,
# sanitizer error count, seconds). Needs the build of scripts/gpu_one.sh build (build-dev).
#   scripts/gpu_sanitize.sh [BUILD_DIR] [WORLD_SIZES]      (defaults build-dev, "2 3")
#   TOOLS="memcheck racecheck"   tools to run (default all four)
#   BINS="test_gpu_shared"       binaries (default below); "name:2" runs one at its own sizes
#   GTEST_FILTER=...             narrows the cases (racecheck and initcheck are slow)
#   RUN_TIMEOUT=900              seconds per run (tool x binary x world size)
# The ranks are forked processes: --target-processes all follows them. Cases that fault on
# purpose are left out where a tool would count the injected fault as a report: test_gpu_faults
# runs under racecheck and synccheck only (its injected setup failures and killed peers leave
# memory that memcheck and initcheck would flag by design).
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-dev}
SIZES=${2:-2 3}
OUT=${OUT:-bench/results/gpu_sanitize}
TOOLS=${TOOLS:-memcheck racecheck synccheck initcheck}
BINS=${BINS:-test_gpu_shared test_gpu_failure:3 test_gpu_faults test_gpu_shared_colls test_gpu_shared_grouped test_gpu_shared_p2p test_gpu_rmsnorm test_gpu_window test_gpu_window_vmm}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export CCLX_ABORT_ON_ERROR=${CCLX_ABORT_ON_ERROR:-0}  # the suites check errors
export CCLX_TEST_TIME_SCALE=${CCLX_TEST_TIME_SCALE:-20}  # the tools slow kernels down a lot
export CCLX_TEST_WINDOW_ROUNDS=${CCLX_TEST_WINDOW_ROUNDS:-50}
[ -x "$CS" ] || { echo "gpu_sanitize: compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }
t0=$(date +%s)
rows="$OUT/rows.txt"
: >"$rows"
rc=0

tool_args() {
  case $1 in
    memcheck) echo "--tool memcheck --leak-check full" ;;
    racecheck) echo "--tool racecheck --racecheck-report all" ;;
    synccheck) echo "--tool synccheck" ;;
    initcheck) echo "--tool initcheck" ;;
  esac
}

for tool in $TOOLS; do
  for entry in $BINS; do
    name=${entry%%:*}
    sizes=$SIZES
    [ "$entry" != "$name" ] && sizes=$(echo "${entry#*:}" | tr ',' ' ')
    case "$tool:$name" in memcheck:test_gpu_faults | initcheck:test_gpu_faults) continue ;; esac
    for n in $sizes; do
      log="$OUT/${tool}_${name}_$n.log"
      s=$(date +%s)
      # shellcheck disable=SC2046
      CCLX_TEST_RANKS=$n timeout "$RUN_TIMEOUT" "$CS" $(tool_args "$tool") --target-processes all \
        --error-exitcode 99 "$BUILD/tests/$name" ${GTEST_FILTER:+--gtest_filter="$GTEST_FILTER"} \
        >"$log" 2>&1
      code=$?
      [ $code -eq 0 ] || rc=1
      errs=$(grep -cE "^========= (Invalid|Race|Barrier|Uninitialized|Leaked|Program hit|Error)" "$log")
      passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
      failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
      echo "$tool $name $n $code ${passed:-0} ${failed:-0} $errs $(($(date +%s) - s))" >>"$rows"
      echo "gpu_sanitize: $tool $name at $n ranks: rc=$code passed=${passed:-0}" \
           "failed=${failed:-0} sanitizer errors=$errs ($(($(date +%s) - s)) s)"
    done
  done
done

python3 - "$rows" "$OUT/gpu_sanitize.json" <<'PY'
import json, subprocess, sys
runs = []
for line in open(sys.argv[1]):
    tool, name, n, code, passed, failed, errs, secs = line.split()
    runs.append(dict(tool=tool, binary=name, ranks=int(n), rc=int(code), passed=int(passed),
                     failed=int(failed), sanitizer_errors=int(errs), seconds=int(secs)))
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()
except OSError:
    gpu = []
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump(dict(commit=commit, gpus=gpu, ok=all(r["rc"] == 0 for r in runs), runs=runs),
          open(sys.argv[2], "w"), indent=1)
PY
echo "gpu_sanitize: rc=$rc, $(wc -l <"$rows") runs, $(($(date +%s) - t0)) s; summary in $OUT/gpu_sanitize.json"
exit $rc
