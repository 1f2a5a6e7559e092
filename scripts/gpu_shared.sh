#!/usr/bin/env bash
# Several ranks per GPU: runs the GPU test binary test_gpu_shared (DDA flat / Lamport / tree and
# the FP8 collectives against the host twin, back-to-back calls, graph replay, a missing rank, a
# killed rank, the clear NCCL error) at each world size on the GPUs present (rank r on GPU
# r % count), and writes $OUT/gpu_shared.json with pass counts per world size.
#   scripts/gpu_shared.sh BUILD_DIR [WORLD_SIZES]      (default "2 3 4 5 8")
set -u -o pipefail
BUILD=${1:?usage: scripts/gpu_shared.sh BUILD_DIR [WORLD_SIZES]}
SIZES=${2:-2 3 4 5 8}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
BIN="$BUILD/tests/test_gpu_shared"
[ -x "$BIN" ] || { echo "gpu_shared: $BIN not built"; exit 1; }
export NCCL_NVLS_ENABLE=0
export CCLX_ABORT_ON_ERROR=${CCLX_ABORT_ON_ERROR:-0}  # the suites check errors (tests of the default set it)
rc=0
for n in $SIZES; do
  s=$(date +%s)
  CCLX_TEST_RANKS=$n "$BIN" --gtest_output="json:$OUT/gpu_shared_$n.json" >"$OUT/gpu_shared_$n.log" 2>&1
  r=$?
  [ $r -ne 0 ] && rc=1
  echo "gpu_shared: $n ranks rc=$r $(( $(date +%s) - s ))s $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gpu_shared_$n.log" | tr '\n' ' ')"
done
OUT="$OUT" SIZES="$SIZES" python3 - <<'PY'
import json, os, subprocess
out, sizes = os.environ["OUT"], os.environ["SIZES"].split()
gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout.split("\n")
rec = {"commit": os.environ.get("CCLX_GIT_COMMIT") or subprocess.run(
           ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip(),
       "gpus": [g for g in gpus if g], "world_sizes": {}}
for n in sizes:
    try:
        d = json.load(open(os.path.join(out, f"gpu_shared_{n}.json")))
    except Exception as e:
        rec["world_sizes"][n] = {"error": str(e)}
        continue
    cases = [t for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
    rec["world_sizes"][n] = {
        "tests": len(cases),
        "passed": sum(1 for t in cases if not t.get("failures") and t.get("result") == "COMPLETED"),
        "failed": [t["name"] for t in cases if t.get("failures")],
        "seconds": {t["name"]: float(str(t.get("time", "0s")).rstrip("s")) for t in cases}}
json.dump(rec, open(os.path.join(out, "gpu_shared.json"), "w"), indent=1)
print("gpu_shared:", {n: (v.get("passed"), v.get("tests")) for n, v in rec["world_sizes"].items()})
PY
exit $rc
