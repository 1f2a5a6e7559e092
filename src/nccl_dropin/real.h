// The real NCCL behind the drop-in: found explicitly (never through the dynamic linker's name
// lookup, which would find this library itself), opened RTLD_LOCAL | RTLD_DEEPBIND so that NCCL's
// calls to its own API stay inside it, every exported function looked up (null where the loaded
// version lacks it).
#pragma once

#include <string>

#include "nccl_dropin/abi.h"

namespace cclx {
namespace dropin {

struct RealNccl {
#define CCLX_R(name, params, args) ncclResult_t(*name) params = nullptr;
  CCLX_NCCL_RESULT_FUNCTIONS(CCLX_R, CCLX_R, CCLX_R)
#undef CCLX_R
#define CCLX_O(type, name, params, args, fallback) type(*name) params = nullptr;
  CCLX_NCCL_OTHER_FUNCTIONS(CCLX_O, CCLX_O)
#undef CCLX_O
  void* handle = nullptr;  // null: no usable library (see error)
  std::string path;        // the file it came from
  std::string how;         // which rule of the search order found it
  std::string error;       // every place tried and why it failed, when handle is null
  int version = 0;
};

/// Loads the real NCCL once per process (thread-safe). Search order: CCLX_NCCL_PATH (binding);
/// the nvidia-nccl pip package beside the interpreter (CCLX_NCCL_PIP_DIR, else site-packages
/// under the running executable's prefix and $VIRTUAL_ENV); an already loaded libnccl.so* that is
/// not this library; the system's (LD_LIBRARY_PATH, the CUDA toolkit, the usual lib directories).
///
/// A test may install a table of its own (fakes that fail or record): real() then returns it,
/// without loading anything, until it is removed. Every forwarded call reads real() afresh, so
/// the drop-in's forwarding (forward.cc) and its "missing function" errors build and are tested
/// on a CPU without NCCL (tests/cpp/dropin/test_dropin_forward.cc).
const RealNccl& real();
/// Installs `table` (not owned; null removes it) as what real() returns; returns the table
/// installed before. For tests.
const RealNccl* installRealNccl(const RealNccl* table);

/// The name of an ncclResult_t code, for when the real library cannot say.
const char* errorName(ncclResult_t r);

}  // namespace dropin
}  // namespace cclx
