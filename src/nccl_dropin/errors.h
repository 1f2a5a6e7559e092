// What the drop-in's own failures look like to the application: an ncclResult_t code, and the
// message that ncclGetLastError returns on this thread.
#pragma once

#include <string>

#include "core/error.h"
#include "nccl_dropin/abi.h"

#define CCLX_DROPIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace cclx {
namespace dropin {

/// Records `msg` as this thread's last error and returns `code`.
ncclResult_t fail(ncclResult_t code, const std::string& msg);
/// A cclx error as NCCL would report it.
ncclResult_t fail(const Error& e);
/// The loaded NCCL lacks `name` (or no NCCL was found): ncclInvalidUsage with the reason.
ncclResult_t missing(const char* name);
/// Clears this thread's last error (every call does, as NCCL's API calls do).
void clearError();
/// This thread's last error, or null when the last call did not fail in the drop-in.
const char* lastError();

}  // namespace dropin
}  // namespace cclx
