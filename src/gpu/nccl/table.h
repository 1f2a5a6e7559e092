// The one way cclx's GPU code reaches NCCL: ncclLib() (loader.h), a table of function pointers
// (NcclLib). Normally the table of the library loader.cc found; a test may install a table of its
// own (fakes that fail, report ncclInProgress forever, or record their arguments), which every
// later ncclLib() returns until it is removed. Callers read ncclLib() at each call, so an
// installed table takes effect at the next call (a one-sided window keeps the table it was
// created with, nccl/window.cc).
//
// Contract:
//  * ncclLib() returns the installed table when there is one, else the loaded library (loading it
//    at the first use); installing never loads anything, so CPU tests run without libnccl;
//  * the results of NCCL calls go through ncclCheck / ncclCall below: a failure is a
//    cclx::Error(cclxNcclError) whose message names the call, the numeric code, NCCL's string for
//    it and, when the call had a comm, that comm's last error (ncclGetLastError, optional);
//  * ncclCall bounds ncclInProgress (a nonblocking comm still enqueuing): it polls
//    ncclCommGetAsyncError until the comm settles, and throws cclxTimeout naming the call at the
//    deadline; a comm that settles on an error throws cclxNcclError naming the call. A call that
//    never returns cannot be bounded by its caller (NCCL's enqueue calls are synchronous): that
//    is the watchdog's and abort's job (core/failure/watchdog.h);
//  * this file and colls.cc use no CUDA API (the device work around NCCL calls goes through
//    stream_ops.h), so a CPU build compiles them for tests (tests/cpp/nccl).
#pragma once

#include <chrono>

#include "gpu/nccl/loader.h"

namespace cclx {

/// Installs `table` (not owned; it must outlive its use) as what ncclLib() returns; null removes
/// it. Returns the table installed before. For tests; thread-safe, but calls in flight on other
/// threads may still use the previous table.
const NcclLib* installNcclLib(const NcclLib* table);

/// Installs a table for the lifetime of the object, then restores the previous one.
class ScopedNcclLib {
 public:
  explicit ScopedNcclLib(const NcclLib& table) : prev_(installNcclLib(&table)) {}
  ~ScopedNcclLib() { installNcclLib(prev_); }
  ScopedNcclLib(const ScopedNcclLib&) = delete;
  ScopedNcclLib& operator=(const ScopedNcclLib&) = delete;

 private:
  const NcclLib* prev_;
};

/// The loaded library (loader.cc), whatever table is installed.
const NcclLib& loadedNcclLib();

using NcclDeadline = std::chrono::steady_clock::time_point;
/// now + timeout; kInfiniteTimeout (or more) and 0 never expire.
NcclDeadline ncclDeadlineAfter(std::chrono::milliseconds timeout);

/// ncclCheck, except that ncclInProgress waits for `comm` to settle until `deadline` (see above).
void ncclCall(nccl::ncclResult_t r, const char* what, nccl::ncclComm_t comm, NcclDeadline deadline);

}  // namespace cclx
