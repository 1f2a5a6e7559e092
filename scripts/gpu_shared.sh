#!/usr/bin/env bash
# Several ranks per GPU: runs the GPU test binaries that take their world size from
# CCLX_TEST_RANKS (rank r on GPU r % count) at each world size, and writes $OUT/gpu_shared.json
# with pass counts per binary and world size.
#   scripts/gpu_shared.sh BUILD_DIR [WORLD_SIZES]      (default "2 3 4 5 8")
# BINS (default below) lists the binaries; "name:3,5" runs one at its own world sizes.
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
BUILD=${1:?usage: scripts/gpu_shared.sh BUILD_DIR [WORLD_SIZES]}
SIZES=${2:-2 3 4 5 8}
BINS=${BINS:-test_gpu_shared test_gpu_failure:3,5 test_gpu_faults:2,3,5 test_gpu_shared_colls test_gpu_shared_grouped test_gpu_shared_p2p test_gpu_rmsnorm test_gpu_a2av_device}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
export CCLX_ABORT_ON_ERROR=${CCLX_ABORT_ON_ERROR:-0}  # the suites check errors (tests of the default set it)
rc=0
for entry in $BINS; do
  name=${entry%%:*}
  sizes=$SIZES
  [ "$entry" != "$name" ] && sizes=$(echo "${entry#*:}" | tr ',' ' ')
  bin="$BUILD/tests/$name"
  if [ ! -x "$bin" ]; then echo "gpu_shared: $bin not built"; rc=1; continue; fi
  for n in $sizes; do
    s=$(date +%s)
    CCLX_TEST_RANKS=$n "$bin" --gtest_output="json:$OUT/${name}_$n.json" >"$OUT/${name}_$n.log" 2>&1
    r=$?
    [ $r -ne 0 ] && rc=1
    echo "gpu_shared: $name $n ranks rc=$r $(( $(date +%s) - s ))s $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/${name}_$n.log" | tr '\n' ' ')"
  done
done
OUT="$OUT" SIZES="$SIZES" BINS="$BINS" python3 - <<'PY'
import json, os, subprocess
out = os.environ["OUT"]
gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                      capture_output=True, text=True).stdout.split("\n")
rec = {"commit": os.environ.get("CCLX_GIT_COMMIT") or subprocess.run(
           ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip(),
       "gpus": [g for g in gpus if g], "binaries": {}}
for entry in os.environ["BINS"].split():
    name, _, own = entry.partition(":")
    sizes = own.split(",") if own else os.environ["SIZES"].split()
    per = rec["binaries"].setdefault(name, {})
    for n in sizes:
        try:
            d = json.load(open(os.path.join(out, f"{name}_{n}.json")))
        except Exception as e:
            per[n] = {"error": str(e)}
            continue
        cases = [t for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
        per[n] = {
            "tests": len(cases),
            "passed": sum(1 for t in cases if not t.get("failures") and t.get("result") == "COMPLETED"),
            "failed": [t["name"] for t in cases if t.get("failures")],
            "seconds": {t["name"]: float(str(t.get("time", "0s")).rstrip("s")) for t in cases}}
json.dump(rec, open(os.path.join(out, "gpu_shared.json"), "w"), indent=1)
print("gpu_shared:", {b: {n: (v.get("passed"), v.get("tests")) for n, v in per.items()}
                      for b, per in rec["binaries"].items()})
PY
exit $rc
