// The drop-in's own failures as NCCL reports them (nccl_dropin/errors.h): a result code, and the
// message ncclGetLastError returns on the calling thread. No CUDA: the shared-GPU mode's twin
// test links it too.
#include "nccl_dropin/errors.h"

#include "base/log.h"

namespace cclx {
namespace dropin {

namespace {
thread_local std::string tError;  // the drop-in's last error on this thread
}  // namespace

ncclResult_t fail(ncclResult_t code, const std::string& msg) {
  tError = "cclx: " + msg;
  CCLX_WARN("NCCL drop-in: %s", msg.c_str());
  return code;
}

ncclResult_t note(ncclResult_t code, const std::string& msg) {
  tError = "cclx: " + msg;
  return code;
}

ncclResult_t ncclCodeOf(cclxResult_t code) {
  switch (code) {
    case cclxSuccess: return nccl::ncclSuccess;
    case cclxInvalidArgument: return nccl::ncclInvalidArgument;
    case cclxInvalidUsage:
    case cclxUnsupported:
    case cclxAborted: return nccl::ncclInvalidUsage;
    case cclxCudaError: return nccl::ncclUnhandledCudaError;
    case cclxSystemError: return nccl::ncclSystemError;
    case cclxTimeout:
    case cclxRemoteError: return nccl::ncclRemoteError;
    case cclxInProgress: return nccl::ncclInProgress;
    default: return nccl::ncclInternalError;
  }
}

ncclResult_t fail(const Error& e) { return fail(ncclCodeOf(e.code()), e.what()); }

void clearError() { tError.clear(); }
const char* lastError() { return tError.empty() ? nullptr : tError.c_str(); }

}  // namespace dropin
}  // namespace cclx
