// What the drop-in's own failures look like to the application: an ncclResult_t code, and the
// message that ncclGetLastError returns on this thread.
#pragma once

#include <string>

#include "base/error.h"
#include "nccl_dropin/abi.h"

#define CCLX_DROPIN_EXPORT extern "C" __attribute__((visibility("default")))
// NCCL's profiling names (as libnccl exports them, after MPI's PMPI): pnccl<X> is an alias of
// the drop-in's nccl<X>, so a tool that defines nccl<X> itself and calls pnccl<X> reaches the
// drop-in. Must follow the definition of `name` in the same file.
#define CCLX_DROPIN_ALIAS(type, name, params) \
  extern "C" __attribute__((visibility("default"), alias(#name))) type p##name params;

namespace cclx {
namespace dropin {

/// Records `msg` as this thread's last error, logs it (WARN) and returns `code`.
ncclResult_t fail(ncclResult_t code, const std::string& msg);
/// As fail(), without the log line (an error reported again, e.g. to a watchdog that polls).
ncclResult_t note(ncclResult_t code, const std::string& msg);
/// A cclx error as NCCL would report it (its NCCL code, its message).
ncclResult_t fail(const Error& e);
/// The NCCL code of a cclx error.
ncclResult_t ncclCodeOf(cclxResult_t code);
/// The loaded NCCL lacks `name` (or no NCCL was found): ncclInvalidUsage with the reason.
ncclResult_t missing(const char* name);
/// Clears this thread's last error (every call does, as NCCL's API calls do).
void clearError();
/// This thread's last error, or null when the last call did not fail in the drop-in.
const char* lastError();

}  // namespace dropin
}  // namespace cclx
