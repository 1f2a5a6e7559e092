#!/usr/bin/env bash
# The wheels NVIDIA's NCCL EP (PyPI nccl-extensions, module `nccl.ep`) needs on the GPU machine for
# cclx-bench moe's nccl-ep row (python/cclx/bench/moe_ncclep.py), beside what its Python 3.12 venv
# with torch 2.11.0+cu130 already has (numpy, packaging, and nvidia-nccl-cu13 2.28.9: too old).
#
#   bench/ncclep/wheels.sh [DEST]                   here: download into DEST (default
#                                                     .dev/wheels/ncclep, ignored through /.dev/)
#   bench/ncclep/wheels.sh install [SRC] [SITE]     there: join, check and install what SRC
#                                                     holds (default .dev/wheels/ncclep) into SITE
#                                                     (default /tmp/ncclep_site); writes SITE/env.sh
#
# The set (pinned: these versions were checked together; each wheel's METADATA Requires-Dist is
# checked against the others after the download, for Python 3.12 on Linux x86_64, extras cu13):
#   nccl-extensions 0.1.0  nccl.ep: Cython bindings, libnccl_ep.so 0.2.0 (lib/cu12 and lib/cu13,
#                          picked by cuda.bindings' major), its headers and JIT sources. Needs
#                          nccl4py, numpy, packaging, cuda-core~=1.0, cuda-pathfinder>=1.5.4,<2;
#                          [cu13]: nvidia-nccl-cu13==2.30.7, nccl4py[cu13]
#   nccl4py 0.6.0          nccl.core (Communicator, UniqueId); bindings generated from NCCL 2.32.3
#                          headers, loading functions one by one (2.30 lacks only ones not used
#                          here). Needs numpy, packaging, cuda-core~=1.0, cuda-pathfinder>=1.5.4,<2;
#                          [cu13]: nvidia-nccl-cu13, cuda-bindings~=13.0, nvidia-cutlass-dsl~=4.6
#                          (only for nccl.core.device.cute, which NCCL EP does not import: left out)
#   cuda-core 1.2.2        needs cuda-pathfinder>=1.4.2, numpy; imports cuda.bindings 12 or 13
#   cuda-bindings 13.5.0   needs cuda-pathfinder>=1.4.2 (the image has some cuda-bindings; this
#                          one is brought so that the set is the one checked)
#   cuda-pathfinder 1.9.1  (Python >= 3.11)
#   nvidia-nccl-cu13 2.30.7  libnccl.so.2 (+cuda13.3) and its headers, nccl_device/ included
#
# Why NCCL 2.30, and how it must be loaded. libnccl_ep.so has DT_NEEDED libnccl.so.2 (no RPATH)
# and needs ncclCommQueryProperties, ncclGetPeerDevicePointer and ncclWinGetUserPtr, which 2.28.9
# does not export (nm -D); the bindings dlopen it RTLD_NOW, so next to a 2.28 it fails to load
# ("undefined symbol: ncclCommQueryProperties"). It also refuses a communicator without the device
# API, and its JIT compiles device code against $NCCL_HOME/include (nccl_device/), so headers and
# library must be one version. torch's libtorch_cuda.so loads libnccl.so.2 at `import torch`
# through its DT_RPATH (site-packages/nvidia/nccl/lib, 2.28.9); afterwards every load of that
# SONAME gets the loaded copy (libnccl_ep's DT_NEEDED, and nccl4py's cuda.pathfinder, which first
# looks for an already loaded libnccl.so.2). So neither PYTHONPATH nor LD_LIBRARY_PATH (DT_RPATH
# wins over it) can bring 2.30 in: LD_PRELOAD of the 2.30 libnccl.so.2 does, and then torch, cclx
# and NCCL EP all use that one library (NCCL keeps its ABI backward compatible; torch.distributed's
# baseline then runs on 2.30 too). Install with `pip install --no-deps --target SITE`, never into
# the venv: that would replace torch's nvidia-nccl-cu13 and cuda-bindings. SITE first on PYTHONPATH
# makes its cuda.* and nvidia.nccl portions win (all are namespace packages, no __init__.py).
#
# JIT: NCCL EP compiles its kernels at run time with nvcc (not NVRTC: no nvrtc package needed),
# found through NCCL_EP_JIT_NVCC, NVCC, CUDA_HOME or CUDA_PATH, for -arch=sm_<device>, with headers
# from NCCL_EP_HOME (nccl.ep sets it to its package folder), NCCL_HOME (nccl.ep defaults it to the
# first nvidia.nccl on sys.path; moe_ncclep sets it from the loaded libnccl.so.2 when unset) and
# NCCL_EP_JIT_CUDA_INCLUDE_DIR (a build-time default otherwise); cubins are cached under
# NCCL_EP_JIT_CACHE_DIR. The GPU image's nvcc is CUDA 13.0; the libraries are built with 13.3
# (minor-version compatible with driver 580).
#
# Size: about 246 MiB in all, 206 MiB of it NCCL (its device code is compressed already: xz and
# zstd gain nothing). DEST holds base/ (the five small wheels, about 39 MiB, and SHA256SUMS of all
# six whole wheels) and nccl-1/ .. nccl-N/ (the NCCL wheel split into PART_MIB pieces, default 52),
# so that a machine without a package index can receive them piece by piece. There, with every
# folder copied under one directory SRC:
#   bash bench/ncclep/wheels.sh install SRC /tmp/ncclep_site && . /tmp/ncclep_site/env.sh
#   && python3 -m cclx.bench moe --impl buffer-bf16,nccl-ep ...
# env.sh exports PYTHONPATH=SITE:..., LD_PRELOAD=SITE/nvidia/nccl/lib/libnccl.so.2,
# NCCL_HOME=SITE/nvidia/nccl, CCLX_NCCL_PIP_DIR=SITE/nvidia/nccl/lib (cclx's own NCCL loads, the
# same file), CUDA_HOME (from nvcc on PATH when unset) and NCCL_EP_JIT_CACHE_DIR=/tmp/ncclep_jit.
#
# env: PY (python with pip, default python3), PART_MIB (52), NCCL_EXT_VERSION (0.1.0),
#      NCCL4PY_VERSION (0.6.0), CUDA_CORE_VERSION (1.2.2), CUDA_BINDINGS_VERSION (13.5.0),
#      CUDA_PATHFINDER_VERSION (1.9.1), NCCL_VERSION (2.30.7)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-python3}
say() { echo "ncclep wheels: $*"; }
die() { echo "ncclep wheels: $*" >&2; exit 1; }

install() {
  local src=${1:-.dev/wheels/ncclep} site=${2:-/tmp/ncclep_site} tmp
  [[ -f "$src/base/SHA256SUMS" ]] || die "$src has no base/SHA256SUMS"
  tmp=$(mktemp -d)
  cp "$src"/base/*.whl "$tmp/"
  local first name
  first=$(ls "$src"/nccl-*/*.part-* 2>/dev/null | head -1) || true
  [[ -n "$first" ]] || die "no NCCL wheel parts in $src/nccl-*/"
  name=$(basename "${first%.part-*}")
  # the parts in name order (part-aa, part-ab, ...), wherever their folders put them
  ls "$src"/nccl-*/"$name".part-* | awk -F/ '{print $NF "\t" $0}' | sort | cut -f2 \
    | xargs cat >"$tmp/$name"
  local sums
  sums=$(realpath "$src/base/SHA256SUMS")
  (cd "$tmp" && sha256sum -c --quiet "$sums") || die "checksums do not match (a part missing?)"
  "$PY" -m pip install -q --no-deps --no-index --no-compile --no-cache-dir --upgrade \
    --target "$site" "$tmp"/*.whl
  rm -rf "$tmp"
  local nvcc home=${CUDA_HOME:-}
  if [[ -z "$home" ]] && nvcc=$(command -v nvcc); then home=$(dirname "$(dirname "$(realpath "$nvcc")")"); fi
  cat >"$site/env.sh" <<EOF
# written by cclx bench/ncclep/wheels.sh install: NCCL EP beside torch (see the script's header)
export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}
export LD_PRELOAD=$site/nvidia/nccl/lib/libnccl.so.2\${LD_PRELOAD:+:\$LD_PRELOAD}
export NCCL_HOME=$site/nvidia/nccl
export CCLX_NCCL_PIP_DIR=$site/nvidia/nccl/lib
export CUDA_HOME=\${CUDA_HOME:-$home}
export NCCL_EP_JIT_CACHE_DIR=\${NCCL_EP_JIT_CACHE_DIR:-/tmp/ncclep_jit}
EOF
  say "installed into $site; env: $site/env.sh"
  (. "$site/env.sh" && "$PY" - <<'PY') || die "the smoke check failed"
import torch, nccl.core as nc, nccl.ep as ep
print("ncclep wheels: torch", torch.__version__, "NCCL", torch.cuda.nccl.version(),
      "| nccl4py", nc.get_version().libnccl, "| libnccl_ep", ep.get_lib_version(),
      "at", ep.get_lib_path())
PY
}

if [[ "${1:-}" == install ]]; then
  shift
  install "$@"
  exit 0
fi

DEST=${1:-.dev/wheels/ncclep}
PART_MIB=${PART_MIB:-52}
SPECS=("nccl-extensions==${NCCL_EXT_VERSION:-0.1.0}" "nccl4py==${NCCL4PY_VERSION:-0.6.0}"
       "cuda-core==${CUDA_CORE_VERSION:-1.2.2}" "cuda-bindings==${CUDA_BINDINGS_VERSION:-13.5.0}"
       "cuda-pathfinder==${CUDA_PATHFINDER_VERSION:-1.9.1}")
NCCL_SPEC="nvidia-nccl-cu13==${NCCL_VERSION:-2.30.7}"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312)
for p in manylinux_2_17 manylinux_2_18 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux2014; do
  PLAT+=(--platform "${p}_x86_64")
done
"$PY" -m pip --version >/dev/null 2>&1 || die "$PY has no pip (set PY)"
rm -rf "$DEST"
mkdir -p "$DEST/base" "$DEST/.dl"
for spec in "${SPECS[@]}" "$NCCL_SPEC"; do
  "$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$DEST/.dl" "$spec" || die "pip download $spec failed"
done

# Each wheel's Requires-Dist against the set: base requirements, and [cu13] of the two NCCL ones.
"$PY" - "$DEST/.dl" <<'PY' || die "the set does not satisfy its own requirements"
import glob, os, re, sys, zipfile
try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
have, reqs = {}, {}
for whl in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    with zipfile.ZipFile(whl) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    name = canonicalize_name(re.search(r"^Name: (.+)$", meta, re.M).group(1).strip())
    have[name] = re.search(r"^Version: (.+)$", meta, re.M).group(1).strip()
    reqs[name] = re.findall(r"^Requires-Dist: (.+)$", meta, re.M)
assumed = {"numpy", "packaging", "typing-extensions"}   # in the torch venv (or not for 3.12)
unused = {"nvidia-cutlass-dsl"}                        # nccl.core.device.cute only
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython"}
bad = 0
for name, lines in reqs.items():
    extras = [""] + (["cu13"] if name in ("nccl-extensions", "nccl4py") else [])
    for line in lines:
        r = Requirement(line)
        if r.marker and not any(r.marker.evaluate(dict(env, extra=e)) for e in extras):
            continue
        dep = canonicalize_name(r.name)
        if dep in have:
            ok = r.specifier.contains(have[dep], prereleases=True)
            state = f"{have[dep]} {'ok' if ok else 'DOES NOT SATISFY'}"
            bad += not ok
        else:
            state = ("assumed present" if dep in assumed else
                     "left out: not used" if dep in unused else "MISSING")
            bad += state == "MISSING"
        print(f"ncclep wheels:   {name} {have[name]} needs {line}: {state}")
sys.exit(1 if bad else 0)
PY

(cd "$DEST/.dl" && sha256sum ./*.whl) >"$DEST/base/SHA256SUMS"
nccl_whl=$(ls "$DEST"/.dl/nvidia_nccl_cu13-*.whl)
mv "$DEST"/.dl/*.whl "$DEST/base/"
mv "$DEST/base/$(basename "$nccl_whl")" "$DEST/.dl/"
(cd "$DEST/.dl" && split -b "${PART_MIB}M" "$(basename "$nccl_whl")" "$(basename "$nccl_whl").part-")
i=0
for part in "$DEST"/.dl/*.part-*; do
  i=$((i + 1))
  mkdir -p "$DEST/nccl-$i"
  mv "$part" "$DEST/nccl-$i/"
done
rm -rf "$DEST/.dl"
say "in $DEST:"
(cd "$DEST" && find . -type f | sort | xargs ls -l | awk '{printf "  %10d  %s\n", $5, $NF}')
total=$(du -sb "$DEST" | cut -f1)
say "total $total bytes ($((total / 1024 / 1024)) MiB); folders of at most ${PART_MIB} MiB each:"
for d in "$DEST"/base "$DEST"/nccl-*; do
  say "  $(basename "$d"): $(du -sb "$d" | cut -f1) bytes"
done
