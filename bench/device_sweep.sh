#!/usr/bin/env bash
# Measurement sweep on a machine with >= 2 GPUs (cclx installed): allreduce latency in CUDA-graph
# replay (auto, and flat/lamport/tree forced), the FP8 collectives (allreduce also one-shot and
# two-shot forced). Tables go to $OUT/sweep.txt, JSON
# beside it. Every run checks its results; a wrong element makes the sweep fail.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
rc=0
perf() {  # perf NAME ARGS...: one run, table appended to sweep.txt
  local name=$1; shift
  echo "## $name: $*" >>"$OUT/sweep.txt"
  timeout 300 $PY -m cclx.perf "$@" >>"$OUT/sweep.txt" 2>&1 || { echo "## $name FAILED rc=$?" >>"$OUT/sweep.txt"; rc=1; }
}
perf graph_auto -b 1K -e 64M -f 4 -G 20 -n 200 --json "$OUT/graph_auto.json"
perf graph_flat -b 64K -e 4M -f 4 -G 20 -n 200 --algo flat --no-nccl
perf graph_lamport -b 64K -e 16M -f 4 -G 20 -n 200 --algo lamport --json "$OUT/graph_lamport.json"
perf graph_tree -b 256K -e 64M -f 4 -G 20 -n 200 --algo tree --no-nccl
perf fp8_allreduce -b 16M -e 1G -f 4 --low-precision -G 2 -n 20 --json "$OUT/fp8_allreduce.json"
perf fp8_oneshot -b 1M -e 64M -f 2 --low-precision --fp8-algo oneshot -G 20 -n 50 \
  --json "$OUT/fp8_oneshot.json"
perf fp8_twoshot -b 1M -e 64M -f 2 --low-precision --fp8-algo twoshot -G 20 -n 50 --no-nccl \
  --json "$OUT/fp8_twoshot.json"
perf fp8_24_48_oneshot -b 24M -e 48M -f 2 --low-precision --fp8-algo oneshot -G 20 -n 50 --no-nccl
perf fp8_24_48_twoshot -b 24M -e 48M -f 2 --low-precision --fp8-algo twoshot -G 20 -n 50 --no-nccl
perf fp8_colls -C all_gather,reduce_scatter,all_to_all -b 16M -e 256M -f 4 --low-precision -G 2 -n 20 \
  --json "$OUT/fp8_colls.json"
grep -E "^##|summary" "$OUT/sweep.txt"
exit $rc
