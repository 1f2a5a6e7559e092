#!/usr/bin/env bash
# GPU validation on a machine with >= 2 GPUs (python with torch preinstalled, no internet):
#   1. pip install the cclx package (CUDA build) from this tree
#   2. C++ GPU tests (scripts/gpu_verify.sh build and run, one rank per GPU), built at the same time
#   3. pytest tests/gpu (2 processes: collectives vs torch.distributed, CUDA graphs, async,
#      DDA algorithms, FP8 hint, example, perf smoke test)
#   4. torchrun --nproc-per-node 2 examples/hello_torch.py
#   5. the default cclx-perf run (allreduce 1K..256M bf16, cclx vs NCCL) with --json/--plot
# Results go to ${OUT:-bench/results}; prints one summary line and writes gpu_suite.json.
set -u -o pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
export CCLX_ABORT_ON_ERROR=${CCLX_ABORT_ON_ERROR:-0}  # the suites check errors (tests of the default set it)
unset CCLX_EXT_DIR
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 8)
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
t0=$(date +%s)
now() { date +%s; }

# 1 + 2: package build in the background while the C++ GPU tests build and run.
s=$(now)
( $PY -m pip install --no-build-isolation --no-deps -v . >"$OUT/pip_install.log" 2>&1
  echo $? >"$OUT/.pip_rc" ) &
pip_pid=$!
cpp_rc=0
cs=$(now)
# The C++ GPU tests: built by scripts/gpu_verify.sh, run one rank per GPU (rank r on GPU r % count).
{ bash scripts/gpu_verify.sh build && OUT="$OUT" VERIFY_GPU=all bash scripts/gpu_verify.sh run --only cpp; } \
  >"$OUT/gpu_cpp.log" 2>&1
cpp_rc=$?
cpp_line=$(grep -E "^gpu_verify: [0-9]+ passed|FAILED" "$OUT/gpu_cpp.log" | tail -1)
cpp_line=${cpp_line:-"gpu_verify: no summary (see $OUT/gpu_cpp.log)"}
cpp_s=$(( $(now) - cs ))
wait "$pip_pid"
pip_rc=$(cat "$OUT/.pip_rc" 2>/dev/null || echo 1)
pip_s=$(( $(now) - s ))
if [ "$pip_rc" != 0 ]; then
  grep -E "error|Error" "$OUT/pip_install.log" | head -30
fi

# 3: pytest on the installed package.
s=$(now)
$PY -m pytest -q -rs tests/gpu --junitxml="$OUT/pytest_gpu.xml" >"$OUT/pytest_gpu.log" 2>&1
py_rc=$?
py_s=$(( $(now) - s ))
tail -25 "$OUT/pytest_gpu.log"

# 4: the example under torchrun.
s=$(now)
$PY -m torch.distributed.run --nproc-per-node 2 examples/hello_torch.py >"$OUT/hello_torch.log" 2>&1
ex_rc=$?
ex_s=$(( $(now) - s ))
cat "$OUT/hello_torch.log" | grep -E "rank|Error" | head -10

# 5: default perf run.
s=$(now)
$PY -m cclx.perf --json "$OUT/perf_allreduce.json" --plot "$OUT/perf_allreduce.png" \
  2>&1 | tee "$OUT/perf_allreduce.txt"
perf_rc=${PIPESTATUS[0]}
perf_s=$(( $(now) - s ))
total_s=$(( $(now) - t0 ))

OUT="$OUT" PIP_RC=$pip_rc PIP_S=$pip_s CPP_RC=$cpp_rc CPP_S=$cpp_s CPP_LINE="$cpp_line" \
PY_RC=$py_rc PY_S=$py_s EX_RC=$ex_rc EX_S=$ex_s PERF_RC=$perf_rc PERF_S=$perf_s \
TOTAL_S=$total_s $PY - <<'PYEOF'
import json, os, subprocess, xml.etree.ElementTree as ET

E = os.environ
out = E["OUT"]
def sh(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return ""
counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
try:
    root = ET.parse(os.path.join(out, "pytest_gpu.xml")).getroot()
    for s in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        t, f, e, sk = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        counts["failed"] += f; counts["errors"] += e; counts["skipped"] += sk
        counts["passed"] += t - f - e - sk
except Exception as ex:
    counts["errors"] += 1
perf = {}
try:
    perf = json.load(open(os.path.join(out, "perf_allreduce.json")))["summary"]
except Exception:
    pass
gpus = [l for l in sh("nvidia-smi", "--query-gpu=name", "--format=csv,noheader").splitlines() if l]
rc = {k: int(E[k]) for k in ("PIP_RC", "CPP_RC", "PY_RC", "EX_RC", "PERF_RC")}
ok = all(v == 0 for v in rc.values()) and counts["failed"] == 0 and counts["errors"] == 0
summary = {
    "commit": sh("git", "rev-parse", "--short=12", "HEAD"),
    "dirty": bool(sh("git", "status", "--porcelain")),
    "device": f"{gpus[0]} x{len(gpus)}" if gpus else "unknown",
    "pytest_gpu": counts, "gpu_cpp": E["CPP_LINE"], "exit_codes": rc,
    "seconds": {"pip_install": int(E["PIP_S"]), "gpu_cpp": int(E["CPP_S"]),
                "pytest_gpu": int(E["PY_S"]), "hello_torch": int(E["EX_S"]),
                "perf": int(E["PERF_S"]), "total": int(E["TOTAL_S"])},
    "perf_allreduce": perf, "passed": ok,
}
json.dump(summary, open(os.path.join(out, "gpu_suite.json"), "w"), indent=1)
sp = perf.get("speedup_geomean")
print(f"gpu_suite: {'PASS' if ok else 'FAIL'} | pytest {counts['passed']} passed "
      f"{counts['failed']} failed {counts['errors']} errors {counts['skipped']} skipped | "
      f"{E['CPP_LINE']} | hello_torch rc={rc['EX_RC']} | perf rc={rc['PERF_RC']} wrong="
      f"{perf.get('wrong', '?')} speedup(nccl/cclx) geomean={sp if sp is None else round(sp, 3)}"
      f" | pip {E['PIP_S']}s cpp {E['CPP_S']}s pytest {E['PY_S']}s perf {E['PERF_S']}s "
      f"total {E['TOTAL_S']}s | {summary['device']} {summary['commit']}")
raise SystemExit(0 if ok else 1)
PYEOF
