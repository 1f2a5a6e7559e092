// The NCCL library cclx loaded, for cclx/nccl_info.h (never a table a test installed).
#include <cclx/nccl_info.h>

#include "base/error.h"
#include "gpu/nccl/table.h"

namespace cclx {

int ncclRuntimeVersion() {
  try {
    return loadedNcclLib().version;
  } catch (const Error&) {
    return 0;
  }
}

std::string ncclRuntimePath() {
  try {
    return loadedNcclLib().path;
  } catch (const Error&) {
    return "";
  }
}

}  // namespace cclx
