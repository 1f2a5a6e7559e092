#!/usr/bin/env bash
# FP8 tuning sweep on >= 2 GPUs (cclx installed): the four FP8 collectives for every pair of
# CCLX_FP8_PRODUCER_WARPS (WARPS) and CCLX_FP8_TILES_PER_CTA (TILES), plus one run with the
# defaults against NCCL. Tables go to $OUT/fp8_tune.txt; every run checks its results.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LOG=$OUT/fp8_tune.txt
WARPS=${WARPS:-"4 8 12"}
TILES=${TILES:-"2 4 8"}
COLLS=${COLLS:-all_reduce,all_gather,reduce_scatter,all_to_all}
read -r -a SIZES <<<"${SIZES:--b 16M -e 256M -f 4}"
rc=0
run() {  # run TAG ARGS...
  local tag=$1; shift
  echo "## $tag" >>"$LOG"
  timeout 240 $PY -m cclx.perf -C "$COLLS" "${SIZES[@]}" --low-precision -G 2 -n 20 "$@" >>"$LOG" 2>&1 \
    || { echo "## $tag FAILED rc=$?" >>"$LOG"; rc=1; }
}
run "defaults vs nccl" --json "$OUT/fp8_tune_default.json"
for w in $WARPS; do
  for t in $TILES; do
    CCLX_FP8_PRODUCER_WARPS=$w CCLX_FP8_TILES_PER_CTA=$t run "warps=$w tiles=$t" --no-nccl
  done
done
grep -E "^##|summary" "$LOG"
exit $rc
