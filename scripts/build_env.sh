# Sourced by scripts/setup_env.sh (for scripts/run.sh and scripts/test.sh) with PYTHON set to the
# .venv interpreter: the CMake arguments for a build of cclx with the Python extension (when
# nanobind is importable; ctest's pytest entries use this interpreter) and the CUDA parts (when a
# GPU is visible; they cannot run without one, and compiling the kernels dominates the build on
# small machines). CCLX_ENABLE_CUDA=ON|OFF|AUTO overrides.
BUILD_DIR="${BUILD_DIR:-build}"
PYTHON="${PYTHON:-python3}"
if [ -z "${CCLX_ENABLE_CUDA:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    CCLX_ENABLE_CUDA=AUTO
  else
    CCLX_ENABLE_CUDA=OFF
  fi
fi
cmake_args=(-DCCLX_BUILD_TESTS=ON -DCCLX_ENABLE_CUDA="$CCLX_ENABLE_CUDA")
if "$PYTHON" -c "import nanobind" >/dev/null 2>&1; then
  py="$(command -v "$PYTHON")"
  cmake_args+=(-DCCLX_BUILD_PYTHON=ON -DPython_EXECUTABLE="$py" -DPython3_EXECUTABLE="$py"
               -Dnanobind_DIR="$("$PYTHON" -m nanobind --cmake_dir)")
  have_python=1
else
  have_python=0  # the caller says what that means for it
fi
