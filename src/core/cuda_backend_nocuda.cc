// Builds without CUDA: CUDA comms are refused with a clear error.
#include "core/backend.h"
#include "core/error.h"

namespace cclx {

std::unique_ptr<Backend> makeCudaBackend(const BootstrapInfo&) {
  CCLX_THROW(cclxUnsupported,
             "cclx was built without CUDA: CUDA communicators are unavailable (use DeviceSpec::cpu())");
}

}  // namespace cclx
