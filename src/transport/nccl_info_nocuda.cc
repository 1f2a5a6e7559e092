// Builds without CUDA load no NCCL.
#include <cclx/nccl_info.h>

namespace cclx {

int ncclRuntimeVersion() { return 0; }
std::string ncclRuntimePath() { return ""; }

}  // namespace cclx
