#!/usr/bin/env bash
# Builds torchcomms' Python package as a wheel for a GPU machine with Python 3.12 and torch 2.11.0+cu130
# (from PyPI), on a machine without a GPU: backends nccl (CUDA) and gloo only; ncclx, rccl, rcclx,
# xccl, the transport / CCA-hook extensions and triton are off, so no NVSHMEM or pipes code is built.
# Nothing of torchcomms enters this tree: sources, venv and build live under $TCBUILD, the wheel
# under .dev/wheels (ignored through /.dev/).
#
#   scripts/torchcomms_wheel.sh <torchcomms git repository or source tree> [git ref]
#     ref: default 59426ba4bfee75800b2909274d200401c4d5d2df (torchcomms 0.3.0, the commit of the
#     earlier GPU runs) where the repository has it, else HEAD. A git repository is exported with
#     `git archive` (comms/rcclx, ROCm only, is left out); a source tree is copied.
#
# Steps (from scratch each time; only the venv and pip's cache are reused):
#   1. torchcomms into $TCBUILD/src; setup.py's unbounded `make -j` becomes `make -j$MAX_JOBS`
#   2. third-party sources into $TCBUILD/deps, at the versions torchcomms' CMake pins (its FetchContent
#      fallbacks, which would download them): glog v0.4.0, gflags v2.2.2 (built static, PIC, into
#      libtorchcomms.so), nlohmann/json v3.11.3 (headers), and gloo's headers. gloo's symbols come
#      from torch's libtorch_cpu.so, so its headers must match torch's bundled gloo: by the strings
#      in libtorch_cpu.so, torch 2.11.0 carries a gloo between a735743 and 3135b0b (default 3135b0b).
#      fmt is torch's bundled copy (header-only, as torchcomms' CMake finds it beside torch).
#      nvml.h (torch's c10/cuda/driver_api.h includes it) from PyPI's nvidia-nvml-dev==$TORCH_CUDA.*
#      where $CUDA_HOME/include has none.
#   3. venv $TCBUILD/venv312 with torch==$TORCH_VERSION from PyPI (must report CUDA $TORCH_CUDA)
#   4. `pip wheel --no-deps --no-build-isolation` under nice -n 19, CMAKE_BUILD_TYPE=Release, NCCL from
#      $NCCL_INCLUDE / $NCCL_LIBRARY, linked by SONAME (libnccl.so.2: at run time the one in torch's
#      nvidia-nccl-cu13), RUNPATH $ORIGIN, ../torch/lib, ../nvidia/{nccl,cu13}/lib
#   5. the wheel into .dev/wheels with a `packaging` wheel beside it (torchcomms imports it and torch
#      does not depend on it); checks: size < $WHEEL_MAX_MIB MiB, every DT_NEEDED is torch's, CUDA's,
#      NCCL's or the C/C++ runtime's, and a smoke import in the venv (no GPU needed; a missing
#      libcuda.so.1 is reported, not fatal)
#
# env:
#   TCBUILD        work folder (default /work/tcbuild)
#   PY312          a Python 3.12 interpreter (default: the newest ~/.pyenv/versions/3.12.*)
#   TORCH_VERSION  2.11.0            TORCH_CUDA  13.0 (checked against torch.version.cuda)
#   TORCH_CUDA_ARCH_LIST  9.0 (sm_90; the nccl and gloo backends compile no device code, it
#                  only reaches torch's CMake)
#   CUDA_HOME      /usr/local/cuda   NCCL_INCLUDE $CUDA_HOME/include  NCCL_LIBRARY $CUDA_HOME/lib64/libnccl.so
#   MIRROR         /work/.mirror: a folder of fetched git copies of github:pytorch/gloo,
#                  google/glog, gflags/gflags, nlohmann/json (as <owner>+<name>/repo)
#   GLOO_SRC GLOG_SRC GFLAGS_SRC JSON_SRC   git repository or source tree of each (default the mirror)
#   GLOO_REF 3135b0b41b67dde590eef0938a0bf3d6238df5f7  GLOG_REF v0.4.0  GFLAGS_REF v2.2.2  JSON_REF v3.11.3
#   MAX_JOBS       2 (compile jobs; the whole build runs under nice -n 19)
#   PIP_CACHE_DIR  $TCBUILD/pipcache
#   WHEEL_MAX_MIB  60
# outputs:
#   .dev/wheels/torchcomms-<version>-cp312-cp312-linux_x86_64.whl and .dev/wheels/packaging-*.whl,
#   $TCBUILD/build.log (the whole build), $TCBUILD/wheel_info.txt (sources, switches, sizes, checks)
# On the GPU machine: python3 -m pip install --no-deps --no-build-isolation .dev/wheels/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

SRC_IN=${1:?usage: scripts/torchcomms_wheel.sh <torchcomms git repository or source tree> [git ref]}
REF_IN=${2:-}
TCBUILD=${TCBUILD:-/work/tcbuild}
TORCH_VERSION=${TORCH_VERSION:-2.11.0}
TORCH_CUDA=${TORCH_CUDA:-13.0}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NCCL_INCLUDE=${NCCL_INCLUDE:-$CUDA_HOME/include}
NCCL_LIBRARY=${NCCL_LIBRARY:-$CUDA_HOME/lib64/libnccl.so}
MIRROR=${MIRROR:-/work/.mirror}
GLOO_SRC=${GLOO_SRC:-$MIRROR/pytorch+gloo/repo}
GLOO_REF=${GLOO_REF:-3135b0b41b67dde590eef0938a0bf3d6238df5f7}
GLOG_SRC=${GLOG_SRC:-$MIRROR/google+glog/repo}
GLOG_REF=${GLOG_REF:-v0.4.0}
GFLAGS_SRC=${GFLAGS_SRC:-$MIRROR/gflags+gflags/repo}
GFLAGS_REF=${GFLAGS_REF:-v2.2.2}
JSON_SRC=${JSON_SRC:-$MIRROR/nlohmann+json/repo}
JSON_REF=${JSON_REF:-v3.11.3}
MAX_JOBS=${MAX_JOBS:-2}
ARCHS=${TORCH_CUDA_ARCH_LIST:-9.0}
WHEEL_MAX_MIB=${WHEEL_MAX_MIB:-60}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$TCBUILD/pipcache}
OUTDIR=$REPO/.dev/wheels
DEFAULT_REF=59426ba4bfee75800b2909274d200401c4d5d2df
if [[ -z "${PY312:-}" ]]; then
  PY312=$(ls -d "$HOME"/.pyenv/versions/3.12.* 2>/dev/null | sort -V | tail -1)/bin/python3.12
fi
VENV=$TCBUILD/venv312
SRC=$TCBUILD/src
DEPS=$TCBUILD/deps
LOG=$TCBUILD/build.log
NICE=(nice -n 19)

say() { echo "torchcomms_wheel: $*"; }
die() { echo "torchcomms_wheel: $*" >&2; exit 1; }
is_git() { git -C "$1" rev-parse --git-dir >/dev/null 2>&1; }

# export_tree NAME SRC REF DEST: a git repository's REF (all of it) or a source tree, into DEST;
# prints what was taken.
export_tree() {
  local name=$1 src=$2 ref=$3 dest=$4 commit
  rm -rf "$dest"
  mkdir -p "$dest"
  if is_git "$src"; then
    commit=$(git -C "$src" rev-parse "$ref^{commit}") || die "$name: no $ref in $src"
    git -C "$src" archive "$commit" | tar -x -C "$dest"
    echo "$ref = $commit"
  elif [[ -d "$src" ]]; then
    tar -C "$src" --exclude=./.git -cf - . | tar -x -C "$dest"
    echo "source tree $src"
  else
    die "$name: no git repository or source tree at '$src' (fetch github:$name or set its *_SRC)"
  fi
}

[[ -x "$PY312" ]] || die "no Python 3.12 at '$PY312' (set PY312)"
[[ -f "$NCCL_INCLUDE/nccl.h" && -e "$NCCL_LIBRARY" ]] || die "no NCCL at $NCCL_INCLUDE / $NCCL_LIBRARY"
[[ -x "$CUDA_HOME/bin/nvcc" ]] || die "no nvcc in $CUDA_HOME/bin"
mkdir -p "$TCBUILD" "$OUTDIR"
t0=$(date +%s)

# 1. torchcomms source ---------------------------------------------------------------------------
rm -rf "$SRC"
mkdir -p "$SRC"
if is_git "$SRC_IN"; then
  if [[ -z "$REF_IN" ]]; then
    if git -C "$SRC_IN" cat-file -e "$DEFAULT_REF^{commit}" 2>/dev/null; then REF_IN=$DEFAULT_REF; else REF_IN=HEAD; fi
  fi
  COMMIT=$(git -C "$SRC_IN" rev-parse "$REF_IN^{commit}")
  # Every top-level entry and every comms/* entry but comms/rcclx (ROCm only; the mirror lacks some
  # of its blobs). git 2.39 may still print one "invalid object" line for it: filtered, harmless.
  mapfile -t paths < <(git -C "$SRC_IN" ls-tree --name-only "$COMMIT" | grep -vx comms
                       git -C "$SRC_IN" ls-tree --name-only "$COMMIT" comms/ | grep -vx comms/rcclx)
  git -C "$SRC_IN" archive "$COMMIT" -- "${paths[@]}" 2> >(grep -v 'comms/rcclx' >&2 || true) | tar -x -C "$SRC"
  COMMIT="$COMMIT ($(git -C "$SRC_IN" describe --tags "$COMMIT" 2>/dev/null || echo "no tag"), version.txt $(cat "$SRC/version.txt"))"
  say "torchcomms $COMMIT exported into $SRC"
else
  [[ -f "$SRC_IN/setup.py" ]] || die "$SRC_IN is neither a git repository nor a torchcomms source tree"
  COMMIT="source tree $SRC_IN"
  tar -C "$SRC_IN" --exclude=./.git --exclude=./build --exclude=./dist --exclude='*.egg-info' -cf - . | tar -x -C "$SRC"
  say "torchcomms source tree $SRC_IN copied into $SRC"
fi
[[ -f "$SRC/setup.py" && -d "$SRC/comms/torchcomms/nccl" ]] || die "$SRC has no setup.py or comms/torchcomms/nccl"
# setup.py runs `cmake --build . -- -j` (make without a job limit): bound it.
grep -q 'build_args = \["--", "-j"\]' "$SRC/setup.py" || die "setup.py's build_args line changed: bound make's jobs by hand"
sed -i 's/build_args = \["--", "-j"\]/build_args = ["--", "-j" + os.environ.get("MAX_JOBS", "2")]/' "$SRC/setup.py"

# 2. third-party sources -------------------------------------------------------------------------
rm -rf "$DEPS"
GLOO_AT=$(export_tree pytorch/gloo "$GLOO_SRC" "$GLOO_REF" "$DEPS/gloo")
GLOG_AT=$(export_tree google/glog "$GLOG_SRC" "$GLOG_REF" "$DEPS/glog")
GFLAGS_AT=$(export_tree gflags/gflags "$GFLAGS_SRC" "$GFLAGS_REF" "$DEPS/gflags")
JSON_AT=$(export_tree nlohmann/json "$JSON_SRC" "$JSON_REF" "$DEPS/nlohmann_json")
[[ -f "$DEPS/gloo/gloo/context.h" && -f "$DEPS/glog/CMakeLists.txt" && -f "$DEPS/gflags/CMakeLists.txt" \
   && -f "$DEPS/nlohmann_json/CMakeLists.txt" ]] || die "a third-party source in $DEPS is incomplete"
say "gloo $GLOO_AT; glog $GLOG_AT; gflags $GFLAGS_AT; nlohmann/json $JSON_AT"

# 3. venv with torch -----------------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY312" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q -U pip
"${NICE[@]}" "$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION" setuptools wheel packaging
read -r TORCH_FULL TORCH_CUDA_GOT NCCL_GOT < <("$VENV/bin/python" -W ignore -c '
import torch
print(torch.__version__, torch.version.cuda, ".".join(map(str, torch.cuda.nccl.version())))')
[[ "$TORCH_CUDA_GOT" == "$TORCH_CUDA" ]] || die "torch $TORCH_FULL is built for CUDA $TORCH_CUDA_GOT, not $TORCH_CUDA"
say "torch $TORCH_FULL (CUDA $TORCH_CUDA_GOT, its NCCL $NCCL_GOT) in $VENV"

# torch's c10/cuda/driver_api.h includes nvml.h, which a CUDA toolkit without its NVML dev part lacks:
# then it comes from PyPI's nvidia-nvml-dev for the same CUDA (headers only, nothing is linked).
NVML_INCLUDE=
if [[ ! -f "$CUDA_HOME/include/nvml.h" ]]; then
  mkdir -p "$DEPS/nvml/wheel" "$DEPS/nvml/include"
  "$VENV/bin/python" -m pip download -q --no-deps -d "$DEPS/nvml/wheel" "nvidia-nvml-dev==$TORCH_CUDA.*"
  "$VENV/bin/python" - "$DEPS/nvml" <<'PY'
import glob, sys, zipfile
d = sys.argv[1]
(whl,) = glob.glob(d + "/wheel/nvidia_nvml_dev-*.whl")
with zipfile.ZipFile(whl) as z:
    (name,) = [n for n in z.namelist() if n.endswith("/include/nvml.h")]
    open(d + "/include/nvml.h", "wb").write(z.read(name))
print("torchcomms_wheel: nvml.h from", whl.rsplit("/", 1)[1])
PY
  NVML_INCLUDE=$DEPS/nvml/include
fi

# CMake settings that setup.py has no switch for, given through CMake's CMAKE_TOOLCHAIN_FILE env:
# the NCCL to build against, gloo's headers, the third-party sources (torchcomms' own FetchContent
# fallbacks, pointed at the exports above with downloads off; find_package of installed copies is
# disabled so that no shared glog/gflags of this machine gets in), the installed RUNPATH.
TOOLCHAIN=$TCBUILD/torchcomms-settings.cmake
cat >"$TOOLCHAIN" <<EOF
# written by cclx scripts/torchcomms_wheel.sh
set(TORCHCOMMS_NCCL_INCLUDE "$NCCL_INCLUDE")
set(TORCHCOMMS_NCCL_LIBRARY "$NCCL_LIBRARY")
set(PYTORCH_GLOO_SOURCE_DIR "$DEPS/gloo")
set(FETCHCONTENT_FULLY_DISCONNECTED ON)
set(FETCHCONTENT_SOURCE_DIR_GLOG "$DEPS/glog")
set(FETCHCONTENT_SOURCE_DIR_GFLAGS "$DEPS/gflags")
set(FETCHCONTENT_SOURCE_DIR_NLOHMANN_JSON "$DEPS/nlohmann_json")
set(CMAKE_DISABLE_FIND_PACKAGE_glog ON)
set(CMAKE_DISABLE_FIND_PACKAGE_gflags ON)
set(CMAKE_DISABLE_FIND_PACKAGE_nlohmann_json ON)
set(CMAKE_INSTALL_RPATH "\$ORIGIN;\$ORIGIN/../torch/lib;\$ORIGIN/../nvidia/nccl/lib;\$ORIGIN/../nvidia/cu13/lib")
EOF

# 4. build ---------------------------------------------------------------------------------------
SWITCHES=(USE_NCCL=1 USE_GLOO=1 USE_NCCLX=0 USE_RCCL=0 USE_RCCLX=0 USE_XCCL=0
          USE_TRANSPORT=0 USE_TRANSPORT_CCA_HOOK=0 USE_TRITON=0)
say "building (log: $LOG): ${SWITCHES[*]} CMAKE_BUILD_TYPE=Release TORCH_CUDA_ARCH_LIST=$ARCHS MAX_JOBS=$MAX_JOBS"
tb=$(date +%s)
(
  cd "$SRC"
  # CONDA_PREFIX: torchcomms looks for prebuilt glog/gflags/fmt there; an empty folder means none.
  mkdir -p "$TCBUILD/empty-prefix"
  env -u BUILD_PREFIX -u PREFIX -u USE_SYSTEM_LIBS -u BUILDDIR \
    "${SWITCHES[@]}" \
    CMAKE_BUILD_TYPE=Release \
    TORCH_CUDA_ARCH_LIST="$ARCHS" \
    MAX_JOBS="$MAX_JOBS" CMAKE_BUILD_PARALLEL_LEVEL="$MAX_JOBS" \
    CONDA_PREFIX="$TCBUILD/empty-prefix" \
    CMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" \
    CUDA_HOME="$CUDA_HOME" CUDA_PATH="$CUDA_HOME" CUDACXX="$CUDA_HOME/bin/nvcc" \
    PATH="$VENV/bin:$CUDA_HOME/bin:$PATH" \
    LDFLAGS="-Wl,--strip-debug" \
    CPLUS_INCLUDE_PATH="${CPLUS_INCLUDE_PATH:+$CPLUS_INCLUDE_PATH:}$NVML_INCLUDE" \
    "${NICE[@]}" "$VENV/bin/python" -m pip wheel -v --no-deps --no-build-isolation -w dist .
) >"$LOG" 2>&1 || { tail -40 "$LOG" >&2; die "build failed; see $LOG"; }
BUILD_S=$(( $(date +%s) - tb ))

# 5. wheel out, checks ---------------------------------------------------------------------------
shopt -s nullglob
wheels=("$SRC"/dist/torchcomms-*.whl)
(( ${#wheels[@]} == 1 )) || die "expected one wheel in $SRC/dist, found ${#wheels[@]}"
WHEEL=$OUTDIR/$(basename "${wheels[0]}")
rm -f "$OUTDIR"/torchcomms-*.whl "$OUTDIR"/packaging-*.whl
cp "${wheels[0]}" "$WHEEL"
"$VENV/bin/python" -m pip download -q --no-deps -d "$OUTDIR" packaging
SIZE=$(stat -c %s "$WHEEL")
(( SIZE < WHEEL_MAX_MIB * 1024 * 1024 )) || die "$WHEEL is $SIZE bytes, over $WHEEL_MAX_MIB MiB"

"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$WHEEL"
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SOS=("$SITE"/torchcomms/*.so)
(( ${#SOS[@]} > 0 )) || die "no shared objects in $SITE/torchcomms"
NEEDED=$(for so in "${SOS[@]}"; do readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; done | sort -u)
ALLOWED='^(libtorchcomms\.so|libtorch(_cpu|_cuda|_python)?\.so|libc10(_cuda)?\.so|libcudart\.so\.13|libnvrtc\.so\.13|libcuda\.so\.1|libnccl\.so\.2|libatomic\.so\.1|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libc\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2)$'
STRAY=$(grep -Ev "$ALLOWED" <<<"$NEEDED" || true)
[[ -z "$STRAY" ]] || die "the wheel's libraries need what the GPU machine may lack: $(echo $STRAY)"
NOT_FOUND=$(for so in "${SOS[@]}"; do ldd "$so" | sed -n "s|^[[:space:]]*\([^[:space:]]*\) => not found|$(basename "$so"): \1|p"; done | sort -u)
GLIBC=$(for so in "${SOS[@]}"; do objdump -T "$so" | grep -o 'GLIBC_[0-9.]*'; done | sort -uV | tail -1)
GLIBCXX=$(for so in "${SOS[@]}"; do objdump -T "$so" | grep -o 'GLIBCXX_[0-9.]*'; done | sort -uV | tail -1)
SMOKE=$(cd / && "$VENV/bin/python" -W ignore - <<'PY' 2>&1
import importlib
import torchcomms
print("import torchcomms:", torchcomms.__file__)
for m in ("torchcomms._comms_nccl", "torchcomms._comms_gloo"):
    try:
        importlib.import_module(m)
        print("import %s: ok" % m)
    except Exception as e:  # no GPU driver here: libcuda.so.1 may be missing
        print("import %s: %s: %s" % (m, type(e).__name__, e))
PY
) || true
{
  echo "torchcomms: $COMMIT"
  echo "third party: gloo $GLOO_AT; glog $GLOG_AT; gflags $GFLAGS_AT; nlohmann/json $JSON_AT"
  echo "torch: $TORCH_FULL (CUDA $TORCH_CUDA_GOT, NCCL $NCCL_GOT); $("$VENV/bin/python" -V 2>&1)"
  echo "built against NCCL $(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$NCCL_INCLUDE/nccl.h" | paste -sd.) ($NCCL_INCLUDE, $NCCL_LIBRARY)"
  echo "switches: ${SWITCHES[*]} CMAKE_BUILD_TYPE=Release TORCH_CUDA_ARCH_LIST=$ARCHS MAX_JOBS=$MAX_JOBS"
  echo "build: ${BUILD_S}s (whole script $(( $(date +%s) - t0 ))s)"
  echo "wheel: $WHEEL: $SIZE bytes ($(( SIZE / 1024 / 1024 )) MiB)"
  echo "DT_NEEDED: $(echo $NEEDED)"
  echo "newest symbol versions needed: $GLIBC $GLIBCXX"
  echo "ldd here, not found: ${NOT_FOUND:-none}"
  echo "$SMOKE"
} | tee "$TCBUILD/wheel_info.txt"
ls -l "$OUTDIR"
