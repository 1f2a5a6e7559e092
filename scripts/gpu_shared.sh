#!/usr/bin/env bash
# Several ranks per GPU: the GPU test binaries that take their world size from CCLX_TEST_RANKS
# (rank r on GPU r % count) at each world size, one after another, through the runner of
# scripts/gpu_verify.sh (scripts/gpu_verify.py: a timeout per step, the cases of a crashed or
# stopped binary counted as errored); writes $OUT/gpu_shared.json (every case per binary and
# world size) and ends with "gpu_shared: N passed, N failed, N skipped".
#   scripts/gpu_shared.sh BUILD_DIR [WORLD_SIZES]      (default "2 3 4 5 8")
# BINS (default below) lists the binaries; "name:3,5" runs one at its own world sizes.
# CCLX_TEST_TIME_SCALE (default 1 here: the timeouts a person running a binary gets;
# tests/cpp/helpers/scale.h) and VERIFY_JOBS (default 1: one binary at a time) are passed on.
#   test_gpu_shared   DDA flat / Lamport / tree and the FP8 collectives against the host twin,
#                     back-to-back calls, graph replay, a missing rank, a killed rank, NCCL errors
#   test_gpu_failure  the failure model: late and dead ranks, replays after a timeout, the
#                     watchdog ending the process (docs/design/failure.md)
#   test_gpu_faults   setup and teardown under failure: a setup failure injected at every stage,
#                     settings that differ, capture on forked streams, abort with a dead peer,
#                     finalize without a peer (docs/design/failure.md "Setup, teardown and abort")
#   test_gpu_shared_colls  the DDA all-gather, reduce-scatter, all-to-all and all-to-all-v
#                     kernels against the host twin, staging on first use, graph replay, missing
#                     and late ranks, all-to-all-v counts that disagree
#   test_gpu_shared_grouped  broadcast, reduce, reduce-scatter-v and the collectives lowered
#                     onto grouped messages (scatter, gather, all-gather-v, all-to-all lists) on
#                     the pipelined exchange against the host twin, back to back, graph replay,
#                     a late rank (every output exact or NaN, an error on every rank)
#   test_gpu_shared_p2p  point to point without NCCL: batches of sends and receives and single
#                     send / recv on the pipelined exchange against the host twin, subsets of the
#                     ranks, interleaved with collectives, graph replay, lengths that disagree, a
#                     killed peer
#   test_gpu_rmsnorm  the fused allreduce + residual add + RMSNorm (+ FP8): one-shot, two-shot
#                     and the unfused sequence against the host twin, back to back, graph
#                     replay, a missing rank
#   test_gpu_a2av_device  all_to_all_v_device (split sizes read by the kernel) against the host
#                     twin, back to back with all-to-all-v, graph replay with split sizes changed
#                     between replays, split sizes that disagree, exceed the buffers or are negative
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${1:?usage: scripts/gpu_shared.sh BUILD_DIR [WORLD_SIZES]}
SIZES=${2:-2 3 4 5 8}
BINS=${BINS:-test_gpu_shared test_gpu_failure:3,5 test_gpu_faults:2,3,5 test_gpu_shared_colls test_gpu_shared_grouped test_gpu_shared_p2p test_gpu_rmsnorm test_gpu_a2av_device}
# The runner's steps are cpp/<binary>@<ranks>: one alternative per binary and its sizes.
match="" all=""
for entry in $BINS; do
  name=${entry%%:*}
  sizes=$SIZES
  [ "$entry" != "$name" ] && sizes=$(echo "${entry#*:}" | tr ',' ' ')
  all="$all $sizes"
  match="$match${match:+|}^cpp/$name@($(echo "$sizes" | tr ' ' '|'))\$"
done
all=$(echo "$all" | tr ' ' '\n' | sort -nu | tr '\n' ' ')
python3 scripts/gpu_verify.py --tag gpu_shared --build "$BUILD" --only cpp --sizes "$all" \
  --match "$match" --jobs "${VERIFY_JOBS:-1}" --budget "${VERIFY_BUDGET:-100000}" --gpu all \
  --time-scale "${CCLX_TEST_TIME_SCALE:-1}" --window-rounds "${VERIFY_WINDOW_ROUNDS:-10000,500}" \
  --out "${OUT:-bench/results}"
