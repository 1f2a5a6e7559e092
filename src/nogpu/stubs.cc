// Builds without CUDA: CUDA communicators are refused with a clear error, and no NCCL is loaded.
#include <cclx/nccl_info.h>

#include "core/comm/backend.h"
#include "base/error.h"

namespace cclx {

std::unique_ptr<Backend> makeCudaBackend(const BootstrapInfo&) {
  CCLX_THROW(cclxUnsupported,
             "cclx was built without CUDA: CUDA communicators are unavailable (use DeviceSpec::cpu())");
}

void* memAlloc(size_t, int) {
  CCLX_THROW(cclxUnsupported, "cclx was built without CUDA: memAlloc has no device memory to give");
}
void memFree(void* ptr) {
  CCLX_ARG_CHECK(ptr == nullptr, "memFree: %p cannot come from memAlloc in a build without CUDA",
                 ptr);
}

int ncclRuntimeVersion() { return 0; }
std::string ncclRuntimePath() { return ""; }

}  // namespace cclx
