#!/usr/bin/env bash
# torchcomms' own Python integration suite (comms/torchcomms/tests/integration/py) against cclx on
# one GPU in one command, prepared on a machine without a GPU (bench/torchcomms_suite.py per file
# and per test, bench/tc_suite/table.py for the table):
#   scripts/torchcomms_gpu.sh build  configure build-tc (Ninja, Release, sm_90, tests off, the
#                                    Python extension for TC_PYTHON, torch and torchcomms from
#                                    TC_PYTHON's site-packages, ccache when installed) and build
#                                    cclx_torchcomms (libcclx_torchcomms.so) and cclx_torchcomms_py
#                                    (cclx._cclx_torchcomms); then `pack`
#   scripts/torchcomms_gpu.sh pack   copy into build-dev/carry/torchcomms (beside what
#                                    scripts/gpu_verify.sh pack left there: libcclx.so.0 and
#                                    cclx._C for Python 3.12): wheels/ (the torchcomms wheel with
#                                    CUDA, packaging, and the test-only pydot, expecttest and
#                                    parameterized, which the GPU image lacks, and pydot's
#                                    pyparsing, in case), cclx/ (the two
#                                    libraries above, stripped), tc_tests.tar.gz (from TC_SRC:
#                                    tests/integration/{py,helpers}, tests/helpers, NCCLX's
#                                    tests/integration/py, conftest.py, pyproject.toml and the
#                                    packages' __init__.py) and TC_INFO.json; checks that every
#                                    libcclx symbol libcclx_torchcomms.so takes is in the carried
#                                    libcclx.so.0 and that the cclx headers it was compiled with
#                                    are those of the carried build's commit; prints the size of
#                                    build-dev/carry (fails above CARRY_MAX_MIB). Run it again
#                                    after each scripts/gpu_verify.sh pack (that one empties carry).
#   scripts/torchcomms_gpu.sh run    on the GPU machine, from the repository root, build-dev/carry
#                                    carried: installs the carried wheels into PYTHON (torchcomms
#                                    always, --force-reinstall; the others only where the module
#                                    is missing; pip --no-deps --no-build-isolation --no-index),
#                                    unpacks the tests into a work folder, sets cclx up from
#                                    python/ with the carried extension (CCLX_EXT_DIR: a folder of
#                                    links to _C, libcclx_torchcomms.so, _cclx_torchcomms and
#                                    libcclx.so.0; PYTHONPATH and LD_LIBRARY_PATH as
#                                    scripts/gpu_verify.py's base_env, but without the carried
#                                    libcudart.so.13 on the path; a distribution that declares cclx's entry point in
#                                    torchcomms.backends and torch.backends (pyproject.toml's
#                                    two), as tests/python/harness.py's
#                                    torchcomms_entry_point), checks that each route loads, then
#                                    runs bench/torchcomms_suite.py for each of TC_RUNS, one after
#                                    the other, every rank on GPU TC_GPU. Without a GPU it says
#                                    SKIPPED and exits 0.
# Runs (TC_RUNS, words ROUTE@RANKS): nccl@1 (torchcomms' own nccl backend: the reference),
#   python@N and cxx@N (--backend cclx --let-through ncclx, CCLX_TORCHCOMMS_ROUTE=python or cxx;
#   cxx also sets TORCHCOMMS_BACKEND_LIB_PATH_CCLX); default "nccl@1 python@2 cxx@2 python@3 cxx@3".
# Settings (run): OUT (default .dev/torchcomms_gpu), PYTHON (python3), TC_BUDGET (540 s in all,
#   counted from the start of `run`, install included: each run gets what is left divided by the
#   runs left, and bench/torchcomms_suite.py --budget starts no file after its share and stops
#   those still running; files not started are listed), TC_FILE_TIMEOUT (120 s a file), TC_JOBS
#   (4 files at once), TC_FILES (comma list of file names; default every file), TC_SHARD (I/N:
#   the I-th of N interleaved parts of the files, for a table in N sittings: give each its own
#   OUT, then bench/tc_suite/table.py --across-ranks over every OUT's tc-*.json), TC_NCCLX_TESTS (1:
#   each cclx run also runs NCCLX's own tests/integration/py, as a second run of the suite),
#   TC_GPU (0: CUDA_VISIBLE_DEVICES), TC_DEVICE (cuda; cpu: a dry run on a machine without a
#   GPU: no GPU check, TEST_DEVICE=cpu, gloo instead of nccl), TC_INSTALL (1; 0 skips pip),
#   TC_WORK (the work folder; default a new one under /tmp). NCCL_NVLS_ENABLE=0,
#   TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are always set; OMP_NUM_THREADS
#   is 1 unless set.
# Settings (build, pack): TC_PYTHON (/work/tcbuild/venv312/bin/python: Python 3.12 with torch
#   2.11.0+cu130 and the torchcomms wheel installed), TC_SRC (/work/tcbuild/src: the torchcomms
#   source tree of that wheel), NANOBIND_DIR, CUDA_ARCH (90), JOBS (2; the build runs under nice
#   -n 19), TC_BUILD (build-tc), TC_WHEELS (.dev/wheels: torchcomms-*.whl, packaging-*.whl and
#   testdeps/*.whl), TC_COMMIT (torchcomms' commit, recorded; default from
#   /work/tcbuild/wheel_info.txt), CARRY_MAX_MIB (62).
# Outputs (run), under OUT: tc-<run>.json per run (and tc-<run>-ncclx.json), tc_table.md (every
#   run, per file and per test against nccl@1: bench/tc_suite/table.py --across-ranks),
#   tc_runs.txt (per run: seconds, budget, the suite's last line), tc_logs.tar.gz (every file's
#   output). Last line: "torchcomms_gpu: N runs in S s: files P passed, F not passing, S not started".
#   Exit status 0 when every run ran (the suite's failures are results, not errors), 2 when the
#   setup failed.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
STAGE=${1:-run}
[ $# -gt 0 ] && shift
CARRY=${CARRY:-build-dev/carry}
TCC="$CARRY/torchcomms"
BUILD=${TC_BUILD:-build-tc}
TC_PYTHON=${TC_PYTHON:-/work/tcbuild/venv312/bin/python}
TC_SRC=${TC_SRC:-/work/tcbuild/src}
WHEELS=${TC_WHEELS:-.dev/wheels}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Several files' ranks at once share the cores: one torch CPU thread each unless told otherwise.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
say() { echo "torchcomms_gpu: $*"; }
mib() { du -sb "$1" | awk '{printf "%.1f MiB", $1 / 1048576}'; }

build() {
  local log="$BUILD/tc_build.log" nb launch=()
  mkdir -p "$BUILD"
  [ -f "$TC_SRC/comms/torchcomms/TorchCommBackend.hpp" ] || { say "no torchcomms source tree at $TC_SRC (TC_SRC)"; return 1; }
  "$TC_PYTHON" -c 'import torch, torchcomms' 2>/dev/null ||
    { say "$TC_PYTHON cannot import torch and torchcomms (TC_PYTHON; pip install --no-deps $WHEELS/torchcomms-*.whl)"; return 1; }
  nb=${NANOBIND_DIR:-}
  for c in "$TC_PYTHON" .venv/bin/python python3; do
    [ -n "$nb" ] || nb=$("$c" -m nanobind --cmake_dir 2>/dev/null)
  done
  [ -n "$nb" ] || { say "BUILD FAILED: nanobind not found (NANOBIND_DIR)"; return 1; }
  command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  say "configuring $BUILD (torch and torchcomms of $TC_PYTHON, headers of $TC_SRC); log $log"
  # Python3_EXECUTABLE too: cmake/torchcomms.cmake asks it first for torch's and torchcomms' paths
  nice -n 19 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCCLX_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DCCLX_BUILD_TESTS=OFF -DCCLX_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$TC_PYTHON" -DPython3_EXECUTABLE="$TC_PYTHON" -Dnanobind_DIR="$nb" \
    -DCCLX_TORCHCOMMS_SRC="$TC_SRC" -DCCLX_BUILD_TORCHCOMMS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
    "${launch[@]}" >"$log" 2>&1 || { tail -20 "$log"; say "CONFIGURE FAILED"; return 1; }
  say "building cclx_torchcomms cclx_torchcomms_py with ${JOBS:-2} jobs"
  nice -n 19 cmake --build "$BUILD" -j"${JOBS:-2}" --target cclx_torchcomms cclx_torchcomms_py >>"$log" 2>&1 ||
    { grep -E "error|FAILED" "$log" | head -40; say "BUILD FAILED (log $log)"; return 1; }
  say "built"
}

pack() {
  local f lib ext carried_commit deps changed tc_commit total max
  lib="$BUILD/python/cclx/libcclx_torchcomms.so"
  ext=$(ls "$BUILD"/python/cclx/_cclx_torchcomms*.so 2>/dev/null | head -1)
  [ -f "$lib" ] && [ -n "$ext" ] || { say "no $lib or _cclx_torchcomms*.so (scripts/torchcomms_gpu.sh build)"; return 1; }
  [ -f "$CARRY/libcclx.so.0" ] && ls "$CARRY"/python/cclx/_C*.so >/dev/null 2>&1 ||
    { say "no $CARRY/libcclx.so.0 or cclx._C (scripts/gpu_verify.sh build or pack first)"; return 1; }
  ls "$WHEELS"/torchcomms-*.whl >/dev/null 2>&1 || { say "no torchcomms wheel in $WHEELS (scripts/torchcomms_wheel.sh)"; return 1; }
  [ -d "$TC_SRC/comms/torchcomms/tests/integration/py" ] || { say "no tests in $TC_SRC (TC_SRC)"; return 1; }
  # The library links against the carried libcclx.so.0 on the GPU machine, not build-tc's.
  f=$(comm -12 <(nm -D --undefined-only "$lib" | awk '{print $2}' | sort -u) \
               <(nm -D --defined-only "$BUILD"/libcclx.so.0 | awk '{print $3}' | sort -u) |
      comm -23 - <(nm -D --defined-only "$CARRY/libcclx.so.0" | awk '{print $3}' | sort -u))
  [ -z "$f" ] || { say "PACK FAILED: the carried libcclx.so.0 lacks what libcclx_torchcomms.so takes from libcclx:"; echo "$f" | head; return 1; }
  carried_commit=$(sed -n 's/.*"commit": "\([0-9a-f]*\)".*/\1/p' "$CARRY/BUILD_INFO.json" 2>/dev/null)
  deps=$(for o in $(ninja -C "$BUILD" -t targets all 2>/dev/null |
                    grep -o 'CMakeFiles/cclx_torchcomms[a-z_]*\.dir/[^:]*\.o'); do
           ninja -C "$BUILD" -t deps "$o"; done 2>/dev/null |
         sed -n -E -e "s#^ *$PWD/((src|include)/.*)#\1#p" -e 's#^ *\.\./((src|include)/.*)#\1#p' |
         sort -u)  # build-tc's objects name them ../src/...
  changed=""
  if [ -n "$carried_commit" ] && [ -n "$deps" ]; then
    # shellcheck disable=SC2086  # file names
    changed=$(git diff --name-only "$carried_commit" -- $deps 2>/dev/null | tr '\n' ' ')
  fi
  say "libcclx_torchcomms.so: $(echo "$deps" | grep -c .) cclx sources and headers, compared with the carried build's commit"
  [ -z "$changed" ] || say "WARNING: these sources of libcclx_torchcomms.so differ from the carried build's commit $carried_commit: $changed"
  rm -rf "$TCC"
  mkdir -p "$TCC/wheels" "$TCC/cclx"
  cp "$WHEELS"/torchcomms-*.whl "$WHEELS"/packaging-*.whl "$TCC/wheels/"
  cp "$WHEELS"/testdeps/*.whl "$TCC/wheels/" 2>/dev/null ||
    say "WARNING: no $WHEELS/testdeps/*.whl (pydot, pyparsing, expecttest, parameterized): the GPU image lacks the others"
  cp "$lib" "$ext" "$TCC/cclx/"
  strip --strip-unneeded "$TCC"/cclx/*.so
  ( cd "$TC_SRC" && t=comms/torchcomms &&
    paths=(conftest.py pyproject.toml version.txt "$t/__init__.py" "$t/tests/__init__.py"
           "$t/tests/helpers" "$t/tests/integration/__init__.py" "$t/tests/integration/helpers"
           "$t/tests/integration/py") &&
    { [ ! -d "$t/ncclx/tests/integration/py" ] || paths+=("$t/ncclx/tests/integration/py"); } &&
    tar czf - --exclude=__pycache__ "${paths[@]}" ) >"$TCC/tc_tests.tar.gz" ||
    { say "PACK FAILED: tests tarball"; return 1; }
  tc_commit=${TC_COMMIT:-$(sed -n 's/^torchcomms: \([0-9a-f]*\).*/\1/p' /work/tcbuild/wheel_info.txt 2>/dev/null)}
  cat >"$TCC/TC_INFO.json" <<EOF
{"commit": "$(git rev-parse HEAD 2>/dev/null)", "dirty_sources": "$changed", "carried_libcclx_commit": "$carried_commit",
 "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "torchcomms": "$("$TC_PYTHON" -c 'import importlib.metadata as m; print(m.version("torchcomms"))' 2>/dev/null)",
 "torchcomms_commit": "$tc_commit", "torch": "$("$TC_PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)",
 "libcclx_symbols_checked": $(nm -D --undefined-only "$lib" | wc -l), "wheels": "$(cd "$TCC/wheels" && ls | tr '\n' ' ')"}
EOF
  total=$(du -sb "$CARRY" | awk '{print $1}')
  max=$(( ${CARRY_MAX_MIB:-62} * 1048576 ))
  say "packed the wheels, libcclx_torchcomms.so, cclx._cclx_torchcomms and the tests into $TCC: $(mib "$TCC");" \
      "$CARRY in all: $(mib "$CARRY") (limit ${CARRY_MAX_MIB:-62} MiB)"
  [ "$total" -le "$max" ] || { say "PACK FAILED: $CARRY is over ${CARRY_MAX_MIB:-62} MiB"; return 1; }
}

route_env() {  # the variables that pick cclx's torchcomms route (no spaces in them)
  echo "CCLX_TORCHCOMMS_ROUTE=$1"
  [ "$1" = cxx ] && echo "TORCHCOMMS_BACKEND_LIB_PATH_CCLX=$WORK/ext/libcclx_torchcomms.so"
}

# One run of the suite: suite NAME ROUTE RANKS TESTS_DIR BUDGET
suite() {
  local name=$1 route=$2 ranks=$3 tdir=$4 budget=$5 backend args=() t0 last
  args=(--tc-src "$WORK/tc" --ranks "$ranks" --device "$DEVICE" --jobs "${TC_JOBS:-4}"
        --timeout "${TC_FILE_TIMEOUT:-120}" --budget "$budget" --machine "$MACHINE"
        --commit "$TC_COMMIT_RUN" --tests-dir "$tdir" --logs "$WORK/logs/$name"
        --out "$OUT/tc-$name.json")
  [ -n "${TC_FILES:-}" ] && args+=(--files "$TC_FILES")
  [ -n "${TC_SHARD:-}" ] && args+=(--shard "$TC_SHARD")
  t0=$(date +%s)
  if [ "$route" = nccl ]; then
    backend=nccl; [ "$DEVICE" = cpu ] && backend=gloo
    env "${BASE_ENV[@]}" "$PYTHON" bench/torchcomms_suite.py --backend "$backend" "${args[@]}" \
      >"$WORK/logs/$name.out" 2>&1
  else
    # shellcheck disable=SC2046  # route_env's words
    env "${BASE_ENV[@]}" "${CCLX_ENV[@]}" $(route_env "$route") "$PYTHON" bench/torchcomms_suite.py \
      --backend cclx --let-through ncclx --tag "route $route" "${args[@]}" >"$WORK/logs/$name.out" 2>&1
  fi
  last=$(tail -1 "$WORK/logs/$name.out")
  echo "$name: $(( $(date +%s) - t0 )) s of $budget s: $last" | tee -a "$OUT/tc_runs.txt"
}

run() {
  local t_start deadline runs n left r route ranks budget suffix tc_dir torch_lib f
  t_start=$(date +%s)
  DEVICE=${TC_DEVICE:-cuda}
  if [ "$DEVICE" != cpu ] && { ! command -v nvidia-smi >/dev/null 2>&1 || [ -z "$(nvidia-smi -L 2>/dev/null)" ]; }; then
    say "SKIPPED: no NVIDIA GPU here (nvidia-smi lists none); nothing was run (TC_DEVICE=cpu: a dry run on CPU)"
    return 0
  fi
  PYTHON=${PYTHON:-python3}
  OUT=${OUT:-.dev/torchcomms_gpu}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  for f in "$TCC/TC_INFO.json" "$TCC/tc_tests.tar.gz" "$TCC/cclx/libcclx_torchcomms.so" "$CARRY/libcclx.so.0"; do
    [ -e "$f" ] || { say "no $f: carry $CARRY after scripts/torchcomms_gpu.sh pack"; return 2; }
  done
  suffix=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  [ -f "$CARRY/python/cclx/_C$suffix" ] && ls "$TCC"/cclx/_cclx_torchcomms"$suffix" >/dev/null 2>&1 ||
    { say "the carried extensions are not for $PYTHON (_C$suffix): $(cd "$CARRY/python/cclx" && ls)"; return 2; }
  if [ "${TC_INSTALL:-1}" = 1 ]; then
    "$PYTHON" -m pip install -q --no-deps --no-build-isolation --no-index --force-reinstall \
      "$TCC"/wheels/torchcomms-*.whl || { say "pip install of the torchcomms wheel failed"; return 2; }
    for f in "$TCC"/wheels/*.whl; do
      case "$(basename "$f")" in torchcomms-*) continue ;; esac
      m=$(basename "$f" | cut -d- -f1)
      "$PYTHON" -c "import $m" 2>/dev/null && continue
      "$PYTHON" -m pip install -q --no-deps --no-build-isolation --no-index "$f" ||
        say "WARNING: pip install $f failed"
    done
  fi
  # one interpreter start (torch's import takes seconds): torchcomms' folder, torch's lib/, versions
  f=$("$PYTHON" -c 'import os, pytest, torch, torchcomms
print(os.path.dirname(torchcomms.__file__)); print(os.path.join(os.path.dirname(torch.__file__), "lib"))
print("torch", torch.__version__, "torchcomms", torchcomms.__file__)' 2>&1) ||
    { echo "$f" | tail -3; say "$PYTHON cannot import pytest, torch and torchcomms"; return 2; }
  tc_dir=$(echo "$f" | tail -3 | sed -n 1p); torch_lib=$(echo "$f" | tail -3 | sed -n 2p)

  WORK=${TC_WORK:-$(mktemp -d /tmp/torchcomms_gpu.XXXXXX)}
  mkdir -p "$WORK/tc" "$WORK/ext" "$WORK/logs" "$WORK/entry/cclx_tc_entry-0.0.dist-info"
  tar xzf "$TCC/tc_tests.tar.gz" -C "$WORK/tc" || { say "cannot unpack $TCC/tc_tests.tar.gz"; return 2; }
  # CCLX_EXT_DIR: cclx._C, and beside it (cclx.torchcomms_backend looks there) the C++ route;
  # libcclx.so.0 too, so that LD_LIBRARY_PATH needs no $CARRY (its libcudart.so.13, for the test
  # binaries, would come before torch's own)
  ln -sf "$PWD/$CARRY"/python/cclx/_C*.so "$PWD/$TCC"/cclx/*.so "$PWD/$CARRY/libcclx.so.0" "$WORK/ext/"
  printf 'Metadata-Version: 2.1\nName: cclx-tc-entry\nVersion: 0.0\n' >"$WORK/entry/cclx_tc_entry-0.0.dist-info/METADATA"
  # both of pyproject.toml's entry points: torchcomms' backend, and torch.distributed's name
  # "cclx" (dist.init_process_group("cclx") under use_torchcomms: the C10d* tests)
  printf '[torchcomms.backends]\ncclx = cclx.torchcomms_backend\n\n[torch.backends]\ncclx = cclx_c10d:register\n' \
    >"$WORK/entry/cclx_tc_entry-0.0.dist-info/entry_points.txt"
  BASE_ENV=(PYTHONUNBUFFERED=1)
  [ "$DEVICE" = cpu ] || BASE_ENV+=(CUDA_VISIBLE_DEVICES="${TC_GPU:-0}")
  CCLX_ENV=(CCLX_EXT_DIR="$WORK/ext"
            PYTHONPATH="$PWD/python:$WORK/entry${PYTHONPATH:+:$PYTHONPATH}"
            LD_LIBRARY_PATH="$WORK/ext:$tc_dir:$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  TC_COMMIT_RUN=$(sed -n 's/.*"torchcomms_commit": "\([0-9a-f]*\)".*/\1/p' "$TCC/TC_INFO.json")
  if [ "$DEVICE" = cpu ]; then MACHINE="cpu dry run ($(nproc) cores)"
  else MACHINE="$(nvidia-smi --query-gpu=name --format=csv,noheader -i "${TC_GPU:-0}" 2>/dev/null | head -1) ($(nproc) cores)"; fi
  say "work folder $WORK; $MACHINE; $(echo "$f" | tail -1)"

  # Each route must load before its runs: the route taken, or what is wrong (its runs are then
  # left out).
  BAD_ROUTES=""
  for route in $(echo "${TC_RUNS:-python cxx}" | tr ' ' '\n' | sed 's/@.*//' | grep -v nccl | sort -u); do
    # shellcheck disable=SC2046  # route_env's words
    r=$(env "${BASE_ENV[@]}" "${CCLX_ENV[@]}" $(route_env $route) "$PYTHON" -c \
          'import cclx.torchcomms_backend as b; print(b.ROUTE, "ext:", b._ext() is not None)' 2>&1 | tail -1)
    say "route $route: $r"
    echo "route check $route: $r" >>"$OUT/tc_runs.txt"
    case "$r" in "$route ext:"*) ;; *) BAD_ROUTES="$BAD_ROUTES $route" ;; esac
  done

  runs=${TC_RUNS:-nccl@1 python@2 cxx@2 python@3 cxx@3}
  deadline=$(( t_start + ${TC_BUDGET:-540} ))
  n=$(echo "$runs" | wc -w)
  [ "${TC_NCCLX_TESTS:-0}" = 1 ] && [ -d "$WORK/tc/comms/torchcomms/ncclx/tests/integration/py" ] &&
    n=$(( n + $(echo "$runs" | tr ' ' '\n' | grep -vc '^nccl@') ))
  left=$n
  for r in $runs; do
    route=${r%@*}; ranks=${r#*@}
    case "$route" in nccl|python|cxx) ;; *) say "TC_RUNS: $r is not nccl@N, python@N or cxx@N"; return 2 ;; esac
    if [[ " $BAD_ROUTES " == *" $route "* ]]; then
      say "$r: left out (route $route does not load)"; echo "$route-$ranks: not run (route does not load)" >>"$OUT/tc_runs.txt"
      left=$((left - 1)); continue
    fi
    budget=$(( (deadline - $(date +%s)) / left ))
    [ "$budget" -ge 10 ] || { say "$route@$ranks: no time left (TC_BUDGET)"; echo "$route-$ranks: not run (budget)" >>"$OUT/tc_runs.txt"; left=$((left - 1)); continue; }
    suite "$route-$ranks" "$route" "$ranks" comms/torchcomms/tests/integration/py "$budget"
    left=$((left - 1))
    if [ "${TC_NCCLX_TESTS:-0}" = 1 ] && [ "$route" != nccl ] && [ -d "$WORK/tc/comms/torchcomms/ncclx/tests/integration/py" ]; then
      budget=$(( (deadline - $(date +%s)) / left ))
      [ "$budget" -ge 10 ] && suite "$route-$ranks-ncclx" "$route" "$ranks" comms/torchcomms/ncclx/tests/integration/py "$budget"
      left=$((left - 1))
    fi
  done
  ls "$OUT"/tc-*.json >/dev/null 2>&1 || { say "no run wrote results"; return 2; }
  "$PYTHON" bench/tc_suite/table.py --across-ranks "$OUT"/tc-*.json --out "$OUT/tc_table.md" ||
    say "WARNING: bench/tc_suite/table.py failed"
  tar czf "$OUT/tc_logs.tar.gz" -C "$WORK" logs
  "$PYTHON" - "$OUT" "$(( $(date +%s) - t_start ))" <<'EOF'
import glob, json, os, sys
files = ok = 0
for p in sorted(glob.glob(os.path.join(sys.argv[1], "tc-*.json"))):
    rows = json.load(open(p))
    files += len(rows)
    ok += sum(r["result"] == "pass" for r in rows)
text = open(os.path.join(sys.argv[1], "tc_runs.txt")).read()
started = sum(int(x.split(":")[1].split("(")[0]) for x in text.split("not started (budget)")[1:]) \
    if "not started (budget)" in text else 0
runs = len(glob.glob(os.path.join(sys.argv[1], "tc-*.json")))
print(f"torchcomms_gpu: {runs} runs in {sys.argv[2]} s: files {ok} passed, {files - ok} not passing, "
      f"{started} not started (budget); table {os.path.join(sys.argv[1], 'tc_table.md')}")
EOF
}

case "$STAGE" in
build) build && pack ;;
pack) pack ;;
run) run "$@" ;;
*) echo "usage: scripts/torchcomms_gpu.sh build|pack|run"; exit 2 ;;
esac
