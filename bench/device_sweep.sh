#!/usr/bin/env bash
# Everything a host with 2, 4 or 8 GPUs measures, in stages (each fits a 10-minute command;
# `all` runs every stage but build in turn):
#   bash bench/device_sweep.sh build     scripts/gpu_one.sh build (CUDA build in build-dev)
#   bash bench/device_sweep.sh perf      allreduce 1K..256M on all GPUs, CUDA graphs and eager,
#                                        against every baseline (nccl, nccl-sym, torch-symm);
#                                        the DDA algorithms forced (flat, lamport, tree)
#   bash bench/device_sweep.sh fp8       the FP8 allreduce (auto, one-shot, two-shot forced) and
#                                        all-gather / reduce-scatter / all-to-all (FP8 and not)
#                                        against every baseline that has them
#   bash bench/device_sweep.sh xchg      the DDA all-gather / reduce-scatter / all-to-all /
#                                        all-to-all-v (auto, LL and pipelined forced) against
#                                        NCCL (the retuning of their selection table)
#   bash bench/device_sweep.sh fused     the fused allreduce + residual add + RMSNorm against NCCL
#                                        allreduce + torch add + RMSNorm (tokens 1..8192, hidden
#                                        4096 and 8192, graphs), one-shot and two-shot forced
#   bash bench/device_sweep.sh put       one-sided window put + signal + wait_signal around the
#                                        ring by size: copy engine, SM stores, auto (sets
#                                        CCLX_WIN_PUT_CE_MIN_BYTES)
#   bash bench/device_sweep.sh dropin    bench/dropin_suite.sh (torch.distributed under the
#                                        drop-in, the NCCL API against the real NCCL)
#   bash bench/device_sweep.sh tp        cclx-bench tp at TP = GPU count, both presets, every
#                                        communicator (the drop-in included: under cclx-nccl run),
#                                        and llama3-8b with sequence parallelism (--parallel sp)
#   bash bench/device_sweep.sh shared    several ranks per GPU for correctness: 2 and 4 processes
#                                        per GPU, at most 8 ranks (scripts/gpu_shared.sh)
#   bash bench/device_sweep.sh all
# Every run checks its results (a wrong element fails it). Results go to $OUT (default
# bench/results/<date>-<device kind>): one JSON per run, the tables in <stage>.txt, and
# summary.json (commit, device kind, GPUs, each run's exit status and summary), updated by every
# stage. NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
# Uses the installed cclx, else the build tree in $BUILD_DIR (default build-dev).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
STAGE=${1:-all}
PY=${PYTHON:-python3}
BUILD=${BUILD_DIR:-build-dev}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NP=${NP:-$(nvidia-smi -L 2>/dev/null | wc -l)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
suffix=$([ "${NP:-0}" -gt 1 ] && echo "-x$NP")
KIND=${DEVICE_KIND:-$(echo "${gpu:-unknown}" | tr 'A-Z ' 'a-z-')$suffix}
COMMIT=${CCLX_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
OUT=${OUT:-bench/results/$(date +%Y-%m-%d)-$KIND}
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
t0=$(date +%s)
say() { echo "device_sweep $STAGE: $*, $(( $(date +%s) - t0 ))s" >&2; }

if [ "$STAGE" = build ]; then
  OUT="$OUT" bash scripts/gpu_one.sh build
  exit $?
fi
if [ "${NP:-0}" -lt 1 ]; then
  echo "device_sweep.sh: no GPU" >&2
  exit 1
fi
if [ -d "$BUILD/python/cclx" ]; then  # the build tree this checkout built
  export CCLX_EXT_DIR="$PWD/$BUILD/python/cclx" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
elif ! "$PY" -c "import cclx" >/dev/null 2>&1; then
  echo "device_sweep.sh: cclx is not importable and $BUILD/python/cclx does not exist" \
       "(run: bash bench/device_sweep.sh build)" >&2
  exit 1
fi
echo "device_sweep: $KIND ($NP x ${gpu:-?}), commit $COMMIT, results in $OUT" >&2
: >>"$OUT/rc.txt"

free_port() {
  "$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
}

record() {  # record NAME RC [SECONDS]: one line in rc.txt (the last one of a name wins)
  echo "$1 $2 ${3:-}" >>"$OUT/rc.txt"
  [ "$2" -eq 0 ] || say "$1 FAILED (rc $2)"
}

perf() {  # perf NAME LIMIT ARGS...: one cclx-perf run on all GPUs, JSON as $OUT/NAME.json
  local name=$1 limit=$2 s
  shift 2
  echo "## $name: cclx-perf $*" >>"$OUT/$STAGE.txt"
  s=$(date +%s)
  timeout "$limit" "$PY" -m cclx.perf -N "$NP" "$@" --json "$OUT/$name.json" \
    >>"$OUT/$STAGE.txt" 2>&1
  local rc=$?
  record "$name" $rc $(( $(date +%s) - s ))
  grep -E "summary" "$OUT/$STAGE.txt" | tail -1 >&2
}

stage_perf() {
  perf default_run 300  # the defaults (allreduce 1K..256M, eager, every baseline): wall time
  perf allreduce_graph 300 -b 1K -e 256M -f 2 -G 10 -n 100 --baseline all \
    --plot "$OUT/allreduce_graph.png"
  perf allreduce_eager 300 -b 1K -e 256M -f 2 -n 50 --baseline all \
    --plot "$OUT/allreduce_eager.png"
  perf allreduce_flat 120 -b 1K -e 4M -f 4 -G 10 -n 100 --algo flat --baseline all
  perf allreduce_lamport 120 -b 64K -e 16M -f 4 -G 10 -n 100 --algo lamport --baseline all
  perf allreduce_tree 120 -b 256K -e 64M -f 4 -G 10 -n 100 --algo tree --baseline all
}

stage_fp8() {
  perf fp8_allreduce 180 -b 1M -e 1G -f 4 --low-precision -G 2 -n 20 --baseline all
  perf fp8_oneshot 120 -b 1M -e 64M -f 2 --low-precision --fp8-algo oneshot -G 10 -n 50 \
    --baseline all
  perf fp8_twoshot 120 -b 1M -e 64M -f 2 --low-precision --fp8-algo twoshot -G 10 -n 50 \
    --baseline all
  perf fp8_colls 180 -C all_gather,reduce_scatter,all_to_all -b 16M -e 256M -f 4 \
    --low-precision -G 2 -n 20 --baseline all
  perf colls_graph 180 -C all_gather,reduce_scatter,all_to_all,broadcast,reduce -b 1K -e 256M \
    -f 4 -G 10 -n 50 --baseline all
}

stage_xchg() {
  local c="all_gather,reduce_scatter,all_to_all,all_to_all_v"
  perf xchg_auto 240 -C "$c" -b 1K -e 64M -f 4 -G 10 -n 50 --baseline nccl
  perf xchg_ll 150 -C all_gather,reduce_scatter,all_to_all -b 1K -e 4M -f 4 -G 10 -n 50 \
    --algo flat --baseline nccl
  perf xchg_pipelined 200 -C "$c" -b 16K -e 256M -f 4 -G 10 -n 50 --algo tree --baseline nccl
}

stage_fused() {
  perf fused_auto 300 -C allreduce_rmsnorm -G 10 -n 50 --baseline nccl
  perf fused_oneshot 200 -C allreduce_rmsnorm --tokens 1:512 -G 10 -n 50 --fused-algo oneshot \
    --baseline nccl
  perf fused_twoshot 200 -C allreduce_rmsnorm --tokens 64:8192 -G 10 -n 50 --fused-algo twoshot \
    --baseline nccl
}

stage_put() {
  local path
  for path in auto ce sm; do
    perf "put_$path" 150 -C put -b 1K -e 64M -f 4 -n 50 --put-path "$path"
  done
}

stage_dropin() {
  NP=$NP OUT="$OUT/dropin" BUILD_DIR="$BUILD" timeout 1500 bash bench/dropin_suite.sh \
    >"$OUT/dropin.txt" 2>&1
  local rc=$?
  record dropin_suite $rc
  tail -3 "$OUT/dropin.txt" >&2
}

stage_tp() {
  local preset rc
  for preset in llama3-8b llama3-70b; do
    timeout 900 "$PY" -m cclx.dropin run -- "$PY" -m torch.distributed.run \
      --nproc-per-node "$NP" --master-port "$(free_port)" -m cclx.bench tp --preset "$preset" \
      --json "$OUT/tp_$preset.json" --plot "$OUT/tp_$preset.png" >"$OUT/tp_$preset.txt" 2>&1
    rc=$?
    record "tp_$preset" $rc
    grep -E "^# cclx-bench tp|summary" "$OUT/tp_$preset.txt" >&2
  done
  timeout 600 "$PY" -m cclx.dropin run -- "$PY" -m torch.distributed.run \
    --nproc-per-node "$NP" --master-port "$(free_port)" -m cclx.bench tp --preset llama3-8b \
    --parallel sp --json "$OUT/tp_sp_llama3-8b.json" >"$OUT/tp_sp_llama3-8b.txt" 2>&1
  rc=$?
  record "tp_sp_llama3-8b" $rc
  grep -E "^# cclx-bench tp|summary" "$OUT/tp_sp_llama3-8b.txt" >&2
}

stage_shared() {
  local sizes="" k n
  for k in 2 4; do
    n=$(( k * NP ))
    [ "$n" -le 8 ] && sizes="$sizes $n"
  done
  if [ -z "$sizes" ]; then
    say "shared: $NP GPUs, no oversubscribed world size <= 8 to run"
    return
  fi
  OUT="$OUT/shared" bash scripts/gpu_shared.sh "$BUILD" "$sizes" >"$OUT/shared.txt" 2>&1
  local rc=$?
  record gpu_shared $rc
  tail -3 "$OUT/shared.txt" >&2
}

summary() {
  OUT="$OUT" KIND="$KIND" COMMIT="$COMMIT" NP="$NP" GPU="$gpu" "$PY" - <<'EOF'
import json, os

out = os.environ["OUT"]
rc = {}
for line in open(os.path.join(out, "rc.txt")):
    if line.strip():
        name, code, *secs = line.split()
        rc[name] = (int(code), int(secs[0]) if secs else None)
runs = {}
for name, (code, secs) in rc.items():
    r = {"rc": code}
    if secs is not None:
        r["seconds"] = secs
    for path in (os.path.join(out, name + ".json"), os.path.join(out, name, "summary.json"),
                 os.path.join(out, "dropin", "summary.json") if name == "dropin_suite" else "",
                 os.path.join(out, "shared", "gpu_shared.json") if name == "gpu_shared" else ""):
        if path and os.path.exists(path):
            d = json.load(open(path))
            r["json"] = os.path.relpath(path, out)
            s = d.get("summary", d.get("world_sizes", d.get("runs")))
            if isinstance(s, dict) and name.startswith(("allreduce", "fp8", "colls", "default",
                                                         "xchg", "fused", "put")):
                s = {k: s[k] for k in ("sizes", "wrong", "passed", "speedup_vs", "speedup_best")
                     if k in s}
            r["summary"] = s
            break
    runs[name] = r
doc = {"commit": os.environ["COMMIT"], "device_kind": os.environ["KIND"],
       "gpus": int(os.environ["NP"]), "gpu": os.environ["GPU"], "runs": runs,
       "passed": bool(runs) and all(r["rc"] == 0 for r in runs.values())}
json.dump(doc, open(os.path.join(out, "summary.json"), "w"), indent=1)
print("device_sweep:", "PASSED" if doc["passed"] else "FAILED",
      {k: v["rc"] for k, v in runs.items()}, os.path.join(out, "summary.json"))
EOF
}

case "$STAGE" in
perf | fp8 | xchg | fused | put | dropin | tp | shared) "stage_$STAGE" ;;
all) for s in perf fp8 xchg fused put dropin tp shared; do STAGE=$s; "stage_$s"; done ;;
summary) ;;
*) echo "usage: bench/device_sweep.sh build|perf|fp8|xchg|fused|put|dropin|tp|shared|all|summary" >&2
   exit 2 ;;
esac
summary
