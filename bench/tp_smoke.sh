#!/usr/bin/env bash
# cclx-bench tp at TP=1 on one GPU: the llama3-8b and llama3-70b shapes with 2 layers, every
# mode (decode at batch 1/8/32/64 and context 1024/4096 under CUDA graphs and eager; prefill of
# 1024/4096/8192 tokens), NCCL, cclx, cclx-fp8 and nccl-sym (and the drop-in when preloaded). Writes
# <preset>.json, <preset>.png and <preset>.txt (table and progress) into OUT_DIR.
#   bash bench/tp_smoke.sh OUT_DIR [extra cclx-bench tp flags]
# Uses the installed cclx, else the build tree in $BUILD_DIR (default build).
set -euo pipefail
out="${1:?usage: bench/tp_smoke.sh OUT_DIR [cclx-bench tp flags]}"
shift
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if ! "$PY" -c "import cclx" >/dev/null 2>&1; then
  ext="$PWD/${BUILD_DIR:-build}/python/cclx"
  if [ ! -d "$ext" ]; then
    echo "tp_smoke.sh: cclx is not importable and $ext does not exist" >&2
    exit 1
  fi
  export CCLX_EXT_DIR="$ext" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
fi
rc=0
for preset in llama3-8b llama3-70b; do
  port=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0))
print(s.getsockname()[1])")
  echo "== $preset" >&2
  timeout 600 "$PY" -m torch.distributed.run --nproc-per-node 1 --master-port "$port" \
    -m cclx.bench tp --preset "$preset" --layers 2 --json "$out/$preset.json" \
    --plot "$out/$preset.png" "$@" >"$out/$preset.txt" 2>&1 || {
    echo "tp_smoke.sh: $preset FAILED (rc $?), see $out/$preset.txt" >&2
    rc=1
  }
  grep -E "^# cclx-bench tp|summary" "$out/$preset.txt" >&2 || true
done
exit $rc
