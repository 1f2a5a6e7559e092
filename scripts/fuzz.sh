#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) in ./build-fuzz with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, and runs each for FUZZ_SECONDS (default 60) from its seed corpus
# (tests/fuzz/corpus/<name>). Exits non-zero when a harness finds a crash, a sanitizer report, a
# hang or runs out of memory; the input that did it is kept in FUZZ_WORK (printed).
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh           # longer local runs
#   FUZZ_TARGETS="fuzz_store fuzz_capi" bash ...    # some harnesses only
#   FUZZ_PARALLEL=2                                 # harnesses run at once (default: cores, <= 4)
# A crash reproduces with: build-fuzz/tests/fuzz/<name> <crash file>.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
FUZZ_TARGETS="${FUZZ_TARGETS:-fuzz_store fuzz_settings fuzz_capi fuzz_dropin}"
BUILD_DIR="${FUZZ_BUILD_DIR:-build-fuzz}"
FUZZ_WORK="${FUZZ_WORK:-$(mktemp -d /tmp/cclx-fuzz.XXXXXX)}"
cores="$(nproc)"
FUZZ_PARALLEL="${FUZZ_PARALLEL:-$((cores < 4 ? cores : 4))}"
CXX_FUZZ="${CXX_FUZZ:-clang++}"

t0=$(date +%s)
args=(-DCMAKE_CXX_COMPILER="$CXX_FUZZ" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCCLX_BUILD_FUZZ=ON
      -DCCLX_BUILD_TESTS=OFF -DCCLX_BUILD_PYTHON=OFF -DCCLX_ENABLE_CUDA=OFF -DCCLX_ENABLE_HIP=OFF)
if command -v ccache >/dev/null 2>&1; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$BUILD_DIR" "${args[@]}" >/dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j"$cores" --target $FUZZ_TARGETS
t1=$(date +%s)

# Sanitizer reports end the process (the harnesses' objects are built with
# -fno-sanitize-recover); libFuzzer then writes the input and exits non-zero.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
run_one() {
  local name=$1 work="$FUZZ_WORK/$1"
  mkdir -p "$work/corpus"
  # The first corpus directory receives what the run finds; the seeds stay as they are.
  "$BUILD_DIR/tests/fuzz/$name" -max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=4096 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" \
    "tests/fuzz/corpus/$name" >"$work/log" 2>&1
}

pids=() names=()
fail=0
wait_one() {
  local pid=${pids[0]} name=${names[0]}
  pids=("${pids[@]:1}") names=("${names[@]:1}")
  if wait "$pid"; then
    local runs rate
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$FUZZ_WORK/$name/log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$FUZZ_WORK/$name/log")
    echo "fuzz.sh: $name: ok, ${runs:-?} executions in ${FUZZ_SECONDS} s (${rate:-?}/s)"
  else
    fail=1
    echo "fuzz.sh: $name FAILED; log and input in $FUZZ_WORK/$name:" >&2
    grep -E "ERROR|SUMMARY|runtime error|fuzz_[a-z]+:|Test unit written|deadly signal|timeout" \
      "$FUZZ_WORK/$name/log" | head -20 >&2 || tail -40 "$FUZZ_WORK/$name/log" >&2
  fi
}
for name in $FUZZ_TARGETS; do
  run_one "$name" &
  pids+=($!) names+=("$name")
  if [ "${#pids[@]}" -ge "$FUZZ_PARALLEL" ]; then wait_one; fi
done
while [ "${#pids[@]}" -gt 0 ]; do wait_one; done
t2=$(date +%s)
echo "fuzz.sh: build $((t1 - t0)) s, fuzzing $((t2 - t1)) s; work in $FUZZ_WORK"
exit "$fail"
