# Sourced by scripts/run.sh and scripts/test.sh (after `cd` to the repository root), with
# SETUP_WHO (the caller's name, for messages) and SETUP_EXTRAS (pyproject.toml extras) set.
# Sets up, idempotently, everything a build and its tests need on a fresh Debian/Ubuntu machine:
#   1. system packages (cmake >= 3.25, g++, make, libgtest-dev, python3-dev, python3-venv),
#      installed with apt-get when missing (as root, or with password-less sudo); otherwise one
#      line names the command to run, and the caller stops;
#   2. a virtual environment in .venv (CCLX_VENV overrides) made with $PYTHON (default python3),
#      holding the packages scripts/pyproject_reqs.py reads from pyproject.toml for the extras in
#      CCLX_EXTRAS (space-separated; default SETUP_EXTRAS). A stamp in the environment lists what
#      was installed, so a second run installs nothing and takes a second;
# then sources scripts/build_env.sh with PYTHON set to the environment's interpreter.
SETUP_WHO="${SETUP_WHO:-setup}"
setup_say() { echo "$SETUP_WHO: $*" >&2; }

_setup_cmake_ok() {
  local v
  v="$(cmake --version 2>/dev/null | head -1 | sed -n 's/^cmake version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')"
  [ -n "$v" ] && set -- $v && { [ "$1" -gt 3 ] || { [ "$1" -eq 3 ] && [ "$2" -ge 25 ]; }; }
}

_setup_system() {
  local base="${PYTHON:-python3}" need=() inc
  _setup_cmake_ok || need+=(cmake)
  command -v g++ >/dev/null 2>&1 || need+=(g++)
  command -v make >/dev/null 2>&1 || need+=(make)
  [ -e /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
  if ! command -v "$base" >/dev/null 2>&1; then
    need+=(python3 python3-dev python3-venv)
  else
    inc="$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)"
    [ -n "$inc" ] && [ -e "$inc/Python.h" ] || need+=(python3-dev)
    "$base" -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
  fi
  [ "${#need[@]}" -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
      sudo="sudo"
    else
      setup_say "missing system packages; run: sudo apt-get install -y ${need[*]} (then start again)"
      return 1
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    setup_say "missing ${need[*]} and there is no apt-get: install them (cmake >= 3.25) and start again"
    return 1
  fi
  setup_say "installing system packages ${need[*]} with apt-get (needed to build and test cclx)"
  $sudo apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need[@]}" || {
      setup_say "apt-get install ${need[*]} failed"; return 1; }
  hash -r
  if ! _setup_cmake_ok; then
    # older distributions: cmake from PyPI goes into the virtual environment (step 2)
    setup_say "the distribution's cmake is older than 3.25; the virtual environment gets one from PyPI"
    SETUP_PIP_CMAKE=1
  fi
}

_setup_venv() {
  local venv="${CCLX_VENV:-.venv}" base="${PYTHON:-python3}" extras reqs stamp missing
  extras="${CCLX_EXTRAS-$SETUP_EXTRAS}"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    setup_say "creating the virtual environment $venv with $(command -v "$base") ($("$base" --version 2>&1))"
    rm -rf "$venv"
    "$base" -m venv "$venv" || { setup_say "$base -m venv $venv failed"; return 1; }
  fi
  VENV_PY="$PWD/$venv/bin/python"
  [ "${venv#/}" != "$venv" ] && VENV_PY="$venv/bin/python"
  # shellcheck disable=SC2086  # the extras are words
  reqs="$("$VENV_PY" scripts/pyproject_reqs.py $extras)" || return 1
  [ "${SETUP_PIP_CMAKE:-0}" = 1 ] && reqs="$reqs"$'\n'"cmake>=3.25"
  stamp="$venv/.cclx-installed"
  touch "$stamp"
  missing="$(printf '%s\n' "$reqs" | grep -Fxv -f "$stamp" || true)"
  if [ -n "$missing" ]; then
    setup_say "installing into $venv (pyproject.toml: build requirements, dependencies," \
              "extras: ${extras:-none}): $(echo $missing)"
    if printf '%s\n' "$missing" | grep -qx 'torch'; then
      setup_say "pip prints each download; torch with its CUDA libraries is about 3 GB (minutes)"
    fi
    # shellcheck disable=SC2086
    "$VENV_PY" -m pip install --disable-pip-version-check $missing ||
      { setup_say "pip install failed (network? a package name in pyproject.toml?)"; return 1; }
    printf '%s\n' "$missing" >> "$stamp"
  fi
  export PATH="$(dirname "$VENV_PY"):$PATH"
  export VIRTUAL_ENV="${VENV_PY%/bin/python}"
}

# a cmake from PyPI in the environment (older distributions) counts as installed
if [ -x "${CCLX_VENV:-.venv}/bin/cmake" ]; then
  PATH="$(cd "${CCLX_VENV:-.venv}/bin" && pwd):$PATH"
fi
_setup_system || exit 1
_setup_venv || exit 1
PYTHON="$VENV_PY"
source scripts/build_env.sh
