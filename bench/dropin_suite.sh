#!/usr/bin/env bash
# The cclx NCCL drop-in on the GPUs of one host (>= 2 for the intercepted paths):
#   1. bench/dropin_torch.py under `cclx-nccl run torchrun` with blocking comms (device_id),
#      nonblocking comms (TORCH_NCCL_USE_COMM_NONBLOCKING=1) and lazy comm creation;
#   2. cclx-perf --api nccl (NCCL's C API: the drop-in against the real NCCL), eager and graphs;
#   3. faults at two ranks (tests/gpu/dropin/test_gpu_dropin_faults.py: a setup failure injected on one
#      rank, settings that differ, ncclCommAbort with a dead peer, graph capture on forked
#      streams, destroy after async calls); needs >= 2 GPUs (NCCL refuses two ranks on one).
# Every run's log and JSON go to $OUT (default bench/results/dropin-<date>), and
# $OUT/summary.json gives each run's exit status and the checks that failed.
#   bash bench/dropin_suite.sh            # NP=<GPU count> by default
#   NP=2 OUT=/tmp/dropin bash bench/dropin_suite.sh
# Uses the installed cclx, else the build tree in $BUILD_DIR (default build).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
OUT=${OUT:-bench/results/dropin-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if ! "$PY" -c "import cclx" >/dev/null 2>&1; then
  ext="$PWD/${BUILD_DIR:-build}/python/cclx"
  if [ ! -d "$ext" ]; then
    echo "dropin_suite.sh: cclx is not importable and $ext does not exist" >&2
    exit 1
  fi
  export CCLX_EXT_DIR="$ext" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
fi
NP=${NP:-$(nvidia-smi -L 2>/dev/null | wc -l)}
if [ "${NP:-0}" -lt 1 ]; then
  echo "dropin_suite.sh: no GPU" >&2
  exit 1
fi
lib=$("$PY" -m cclx.dropin --path) || exit 1
echo "drop-in: $lib, $NP GPU(s), results in $OUT" >&2
: >"$OUT/rc.txt"

free_port() {
  "$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}

run() {  # run NAME TIMEOUT CMD...: log in $OUT/NAME.log, exit status in rc.txt
  local name=$1 limit=$2
  shift 2
  echo "== $name" >&2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name $rc" >>"$OUT/rc.txt"
  [ "$rc" -eq 0 ] || echo "dropin_suite.sh: $name FAILED (rc $rc), see $OUT/$name.log" >&2
  grep -E "PASSED|FAILED|summary" "$OUT/$name.log" | tail -3 >&2 || true
}

torch_run() {  # torch_run NAME [dropin_torch.py flags]
  local name=$1
  shift
  run "$name" 1800 env CCLX_DEBUG=INFO CCLX_DEBUG_FILE="$OUT/cclx_$name.%h.%p.log" \
    "$PY" -m cclx.dropin run -- "$PY" -m torch.distributed.run --nproc-per-node "$NP" \
    --master-port "$(free_port)" bench/dropin_torch.py --json "$OUT/$name.json" "$@"
}

torch_run torch_blocking
torch_run torch_nonblocking --nonblocking --skip-timing
torch_run torch_lazy --no-device-id --skip-timing
run perf_api_eager 900 "$PY" -m cclx.perf --api nccl -N "$NP" -C all -b 1K -e 256M -f 4 \
  --json "$OUT/perf_api_eager.json"
run perf_api_graph 900 "$PY" -m cclx.perf --api nccl -N "$NP" -b 1K -e 256M -f 2 -G 10 -n 100 \
  --json "$OUT/perf_api_graph.json"
if [ "$NP" -ge 2 ]; then
  run faults 900 "$PY" -m pytest -q -rs tests/gpu/dropin/test_gpu_dropin_faults.py \
    --junitxml="$OUT/faults.xml"
else
  echo "dropin_suite.sh: faults skipped (needs 2 GPUs; NCCL refuses two ranks on one GPU)" >&2
fi

"$PY" - "$OUT" <<'EOF'
import json, os, sys

out = sys.argv[1]
runs = {}
for line in open(os.path.join(out, "rc.txt")):
    name, rc = line.split()
    r = {"rc": int(rc)}
    path = os.path.join(out, name + ".json")
    if os.path.exists(path):
        d = json.load(open(path))
        if d.get("tool") == "dropin_torch":
            r["failed_checks"] = [k for k, ok in d["summary"].items() if not ok]
            r["evidence"] = {k: v for k, v in d.get("evidence", {}).items() if k != "log_lines"}
            for mode, rows in d.get("timings", {}).items():
                r[f"{mode}_speedup"] = {x["bytes"]: round(x["speedup"], 3) for x in rows
                                        if x.get("speedup")}
        else:
            r["summary"] = d.get("summary")
    runs[name] = r
doc = {"runs": runs, "passed": all(r["rc"] == 0 for r in runs.values())}
json.dump(doc, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps({k: (v["rc"], v.get("failed_checks")) for k, v in runs.items()}))
print("dropin_suite:", "PASSED" if doc["passed"] else "FAILED", os.path.join(out, "summary.json"))
sys.exit(0 if doc["passed"] else 1)
EOF
