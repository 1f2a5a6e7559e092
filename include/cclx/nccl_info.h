// Which NCCL library cclx loaded at run time (CUDA builds load it on first use).
#pragma once

#include <string>

namespace cclx {

/// NCCL_VERSION_CODE of the loaded libnccl (e.g. 22809 for 2.28.9); 0 when none can be loaded or
/// cclx was built without CUDA.
int ncclRuntimeVersion();
/// File the library was loaded from ("" when none).
std::string ncclRuntimePath();

}  // namespace cclx
