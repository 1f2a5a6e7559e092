#!/bin/bash
# torchcomms' integration suite on CPU, per test: the reference backend (gloo), cclx, and cclx
# with torchcomms' backend-name gates evaluated as for ncclx, at each world size, for each venv
# given (each with torch, torchcomms and cclx installed), then the markdown table.
#
#   bash bench/tc_suite/cpu.sh OUTDIR TORCHCOMMS_SRC VENV [VENV...]
#
# Environment: RANKS (default "2 4"), JOBS (files at once, default 2), RUNS (default
# "gloo cclx cclx:ncclx"; BACKEND:GATE adds --let-through GATE), TIMEOUT (s a file, default 300),
# MACHINE (recorded, default "cpu (N cores)"), FILES (comma list, default all), LOGS (a folder
# for each file's output).
# Writes OUTDIR/torch<V>-<run>-<ranks>.json, OUTDIR/times.txt (seconds a run) and OUTDIR/table.md.
set -euo pipefail
out=$1; tc=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
ranks=${RANKS:-2 4}
runs=${RUNS:-gloo cclx cclx:ncclx}
machine=${MACHINE:-cpu ($(nproc) cores)}
commit=$(git -C "$tc" rev-parse HEAD 2>/dev/null || echo "")
export TEST_FULL_SWEEP=${TEST_FULL_SWEEP:-0}
for venv in "$@"; do
  tv=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('torch').split('+')[0])")
  for n in $ranks; do
    for run in $runs; do
      backend=${run%%:*}; gate=""; [ "$run" != "$backend" ] && gate=${run#*:}
      name="torch$tv-$backend${gate:+-gates-$gate}-$n"
      t0=$(date +%s)
      "$venv/bin/python" "$here/../torchcomms_suite.py" --tc-src "$tc" --backend "$backend" \
        --ranks "$n" --device cpu --jobs "${JOBS:-2}" --timeout "${TIMEOUT:-300}" \
        --machine "$machine" --commit "$commit" ${gate:+--let-through "$gate"} \
        ${FILES:+--files "$FILES"} ${LOGS:+--logs "$LOGS"} --out "$out/$name.json" | tail -1
      echo "$name $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt"
    done
  done
done
python3 "$here/table.py" "$out"/torch*.json --out "$out/table.md"
echo "wrote $out/table.md"
