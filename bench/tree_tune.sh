#!/usr/bin/env bash
# DDA tree tuning sweep on >= 2 GPUs (cclx installed): bf16 allreduce in CUDA-graph replay with
# the tree forced, for every pair of CCLX_DDA_TREE_CHUNKS (CHUNKS) and
# CCLX_DDA_TREE_PRODUCER_WARPS (WARPS), plus one auto run against NCCL. Tables go to
# $OUT/tree_tune.txt; every run checks its results.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LOG=$OUT/tree_tune.txt
WARPS=${WARPS:-"12 14"}
CHUNKS=${CHUNKS:-"1 2 4"}
read -r -a SIZES <<<"${SIZES:--b 1M -e 64M -f 4}"
rc=0
run() {  # run TAG ARGS...
  local tag=$1; shift
  echo "## $tag" >>"$LOG"
  timeout 240 $PY -m cclx.perf "${SIZES[@]}" -G 20 -n 200 "$@" >>"$LOG" 2>&1 \
    || { echo "## $tag FAILED rc=$?" >>"$LOG"; rc=1; }
}
run "auto vs nccl" --json "$OUT/tree_tune_auto.json"
for w in $WARPS; do
  for c in $CHUNKS; do
    CCLX_DDA_TREE_PRODUCER_WARPS=$w CCLX_DDA_TREE_CHUNKS=$c run "tree warps=$w chunks=$c" --algo tree --no-nccl
  done
done
grep -E "^##|summary" "$LOG"
exit $rc
