#!/usr/bin/env bash
# The test suites under sanitizers (CPU build, g++ and its sanitizer runtimes):
#   asan: AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover, leak checking on)
#         over every C++ test (ctest, build-asan) and the Python tests (pytest tests/python, the
#         extension loaded with libasan preloaded; leak checking off there, see below).
#   tsan: ThreadSanitizer (build-tsan) over the threaded parts: the store server and client, the
#         watchdog and failure paths, the host transports, the drop-in's shared mode (its CPU
#         twins) and the windows.
# Any report ends the process with an error, so the test fails and this script exits non-zero.
#   SANITIZE_STAGES="tsan" bash scripts/sanitize.sh     # one stage only (default: asan tsan)
#   SANITIZE_PYTEST_ARGS="-k window" ...                 # narrows the Python tests
#   SANITIZE_PYTEST_TOOLS=1 ...                          # the benchmark tools' tests too (below)
# Suppressions (tests/sanitizers/*.supp) cover third-party code only. Sanitized code runs several
# times slower: CCLX_TEST_TIME_SCALE (read by the test harnesses) stretches their deadlines.
# Docs: docs/SANITIZERS.md. The GPU suites under compute-sanitizer: scripts/gpu_sanitize.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES="${SANITIZE_STAGES:-asan tsan}"
CXX_SAN="${CXX_SAN:-g++}"
# The interpreter of the Python stage: SANITIZE_PYTHON, else the project's virtual environment
# (scripts/test.sh made it; it has nanobind and the test packages), else python3.
PYTHON="${SANITIZE_PYTHON:-${CCLX_VENV:-.venv}/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
JOBS="${SANITIZE_JOBS:-$(nproc)}"
[ "$JOBS" -gt 2 ] || JOBS=2
export CCLX_TEST_TIME_SCALE="${CCLX_TEST_TIME_SCALE:-4}"
SUPP="$PWD/tests/sanitizers"
t_start=$(date +%s)
timing=()

log() { echo "sanitize.sh: $*"; }

# TSan's reports go to files in REPORTS as well as failing their process: a report in a rank
# whose failure a test expects (a killed peer, an aborting rank) still fails the run. (ASan and
# UBSan print on stderr: with g++'s runtimes, ASan's log_path silences UBSan's reports.)
REPORTS="${SANITIZE_REPORTS:-$(mktemp -d /tmp/cclx-sanitize.XXXXXX)}"
mkdir -p "$REPORTS"
check_reports() {  # check_reports <stage>
  local f n=0
  for f in "$REPORTS"/*; do
    [ -s "$f" ] || continue
    n=$((n + 1))
    echo "sanitize.sh: $1: report in $f:" >&2
    head -60 "$f" >&2
  done
  if [ $n -gt 0 ]; then
    log "$1: $n sanitizer report(s) (in $REPORTS)"
    exit 1
  fi
}

configure() {  # configure <dir> <sanitizers> [extra cmake args]
  local dir=$1 san=$2
  shift 2
  local args=(-DCMAKE_CXX_COMPILER="$CXX_SAN" -DCMAKE_BUILD_TYPE=Sanitize
              -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g" -DCCLX_SANITIZE="$san"
              -DCCLX_ENABLE_CUDA=OFF -DCCLX_ENABLE_HIP=OFF -DCCLX_BUILD_TESTS=ON "$@")
  if command -v ccache >/dev/null 2>&1; then args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  if command -v ninja >/dev/null 2>&1 && [ ! -e "$dir/CMakeCache.txt" ]; then args+=(-G Ninja); fi
  cmake -S . -B "$dir" "${args[@]}" >/dev/null
}

# The C++ test executables in tests/cpp/<folder>/test_*.cc for the given folders, less a pattern.
tests_in() {  # tests_in <exclude regex> <folder>...
  local ex=$1
  shift
  local f
  for d in "$@"; do
    for f in tests/cpp/"$d"/test_*.cc; do
      f=$(basename "$f" .cc)
      [[ "$f" =~ $ex ]] || echo "$f"
    done
  done
}

stage_asan() {
  local dir=build-asan t0 t1 t2 t3 crc=0 prc=0
  t0=$(date +%s)
  local py_args=()
  if "$PYTHON" -c "import nanobind" >/dev/null 2>&1; then
    local py  # the interpreter itself (not a wrapper script), which LD_PRELOAD then reaches
    py="$("$PYTHON" -c 'import sys; print(sys.executable)')"
    PYTHON=$py
    py_args=(-DCCLX_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -DPython3_EXECUTABLE="$py"
             -Dnanobind_DIR="$("$PYTHON" -m nanobind --cmake_dir)")
  else
    log "asan: $PYTHON cannot import nanobind: the Python tests do not run"
  fi
  configure "$dir" address,undefined "${py_args[@]}"
  # The GPU suites skip without a GPU (scripts/gpu_sanitize.sh runs them on one).
  local targets
  # every CPU test folder of tests/cpp (all but gpu/ and helpers/), so a new folder is included
  local folders
  folders=$(cd tests/cpp && for d in */; do
    d=${d%/}
    [ "$d" = gpu ] || [ "$d" = helpers ] || echo "$d"
  done)
  targets="$(tests_in '^test_gpu' $folders) cclx_settings_doc"  # the doc check (docs.settings)
  [ ${#py_args[@]} -eq 0 ] || targets+=" _C"
  log "asan: building $(echo "$targets" | wc -w) targets in $dir"
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$JOBS" --target $targets
  t1=$(date +%s)
  log "asan: C++ tests (ctest)"
  ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1" \
  LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    ctest --test-dir "$dir" --output-on-failure -j"$JOBS" -L cpp -E '^cpp\.test_gpu' || crc=$?
  t2=$(date +%s)
  [ "$crc" -eq 0 ] || { log "asan: ctest failed"; exit 1; }
  if [ ${#py_args[@]} -gt 0 ]; then
    log "asan: Python tests (pytest tests/python, libasan preloaded)"
    # libasan first (its interceptors must be in place before anything allocates), then
    # libstdc++: Python itself does not link it, and ASan resolves the real __cxa_throw when it
    # starts, so without it the first C++ exception thrown by the extension stops the process.
    local preload
    preload="$("$CXX_SAN" -print-file-name=libasan.so) $("$CXX_SAN" -print-file-name=libstdc++.so)"
    # detect_leaks=0: CPython keeps interned objects and module state alive until exit by design,
    # and LeakSanitizer would report those at every interpreter exit; leaks in the library are
    # checked by the C++ tests above. Stack-use-after-return stays off: CPython switches stacks
    # in its generators' frames, which that check misreads. --capture=sys: a report is written
    # to file descriptor 2 by the runtime, and stays visible when it ends the process.
    # The benchmark tools' tests (tests/python/perf/test_bench_*.py, test_perf_*.py) run the
    # library calls of the suites above again through the tools' command lines, over many runs
    # and sizes: about 6 minutes of the plain run's 11 on two cores, more under ASan.
    # SANITIZE_PYTEST_TOOLS=1 runs them here as well.
    local skip=()
    if [ "${SANITIZE_PYTEST_TOOLS:-0}" != 1 ]; then
      local f
      for f in tests/python/perf/test_bench_*.py tests/python/perf/test_perf_*.py; do
        skip+=(--ignore="$f")
      done
    fi
    # shellcheck disable=SC2086
    LD_PRELOAD="$preload" \
    ASAN_OPTIONS="detect_leaks=0:suppressions=$SUPP/asan.supp" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$SUPP/ubsan.supp" \
    CCLX_EXT_DIR="$PWD/$dir/python/cclx" PYTHONPATH="$PWD/python" PYTHONMALLOC=malloc \
    CCLX_ABORT_ON_ERROR=0 \
      "$PYTHON" -m pytest -q -rs --capture=sys -p no:cacheprovider tests/python "${skip[@]}" ${SANITIZE_PYTEST_ARGS:-} ||
      prc=$?
    [ "$prc" -eq 0 ] || { log "asan: pytest failed"; exit 1; }
  fi
  t3=$(date +%s)
  timing+=("asan build $((t1 - t0)) s, ctest $((t2 - t1)) s, pytest $((t3 - t2)) s")
}

stage_tsan() {
  local dir=build-tsan t0 t1 t2 crc=0
  t0=$(date +%s)
  configure "$dir" thread -DCCLX_BUILD_PYTHON=OFF
  # The threaded parts: store server/client threads, the watchdog (core: failure, timeout,
  # setup), the host transports' progress and proxy threads, the drop-in's shared mode, windows.
  local targets
  # The host transports start no threads of their own: what runs concurrently in a rank is the
  # watchdog's poll() against the caller's collectives, which these suites exercise; the
  # arithmetic suites (fp8, kernels, rmsnorm, allreduce variants) add nothing threaded.
  targets="$(tests_in '^$' store) test_failure test_timeout test_setup
    test_host_collectives test_host_sendrecv test_host_exchange test_window
    $(tests_in '^$' dropin)"
  targets=$(echo $targets)
  log "tsan: building $(echo "$targets" | wc -w) targets in $dir"
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$JOBS" --target $targets
  t1=$(date +%s)
  log "tsan: $targets"
  local regex
  regex="^cpp\\.($(echo "$targets" | tr ' ' '|'))\$"
  # Fork and threads: the multi-process harness (tests/cpp/helpers/mp.cc) forks every rank before
  # it starts the store server's thread, so no rank is forked from a process with threads (a
  # child would inherit locks held by threads it does not have, and TSan's record of them). TSan's
  # default die_after_fork=1 stays on: a test that forks with threads running and then starts
  # threads in the child fails here instead of hanging somewhere else.
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$SUPP/tsan.supp:log_path=$REPORTS/tsan" \
    ctest --test-dir "$dir" --output-on-failure -j"$JOBS" -R "$regex" || crc=$?
  t2=$(date +%s)
  check_reports "tsan ctest"
  [ "$crc" -eq 0 ] || { log "tsan: ctest failed"; exit 1; }
  timing+=("tsan build $((t1 - t0)) s, ctest $((t2 - t1)) s")
}

for s in $STAGES; do
  log "stage $s"
  "stage_$s"
done
summary=""
for t in "${timing[@]}"; do summary+="$t; "; done
log "done: ${summary}total $(($(date +%s) - t_start)) s"
