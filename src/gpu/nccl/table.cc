// The table of NCCL functions that cclx calls, and the checks of their results (see table.h).
#include "gpu/nccl/table.h"

#include <cclx/cclx.hpp>

#include <atomic>
#include <thread>

#include "base/error.h"

namespace cclx {

namespace {

std::atomic<const NcclLib*> gInstalled{nullptr};


}  // namespace

const NcclLib* installNcclLib(const NcclLib* table) { return gInstalled.exchange(table); }

const NcclLib& ncclLib() {
  if (const NcclLib* t = gInstalled.load()) return *t;
  return loadedNcclLib();
}

void ncclCheck(nccl::ncclResult_t r, const char* what, nccl::ncclComm_t comm) {
  if (r == nccl::ncclSuccess) return;
  const NcclLib& l = ncclLib();
  const char* str = l.getErrorString ? l.getErrorString(r) : nullptr;
  const char* last = (comm && l.getLastError) ? l.getLastError(comm) : nullptr;
  CCLX_THROW(cclxNcclError, "%s failed: NCCL error %d (%s)%s%s", what, int(r),
             str && *str ? str : nccl::resultName(r), last && *last ? ": " : "",
             last && *last ? last : "");
}

NcclDeadline ncclDeadlineAfter(std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds(0) || timeout >= kInfiniteTimeout)
    return NcclDeadline::max();
  return std::chrono::steady_clock::now() + timeout;
}

void ncclCall(nccl::ncclResult_t r, const char* what, nccl::ncclComm_t comm, NcclDeadline deadline) {
  if (r != nccl::ncclInProgress || !comm) return ncclCheck(r, what, comm);
  const NcclLib& l = ncclLib();
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    nccl::ncclResult_t st = nccl::ncclSuccess;
    const nccl::ncclResult_t q = l.commGetAsyncError(comm, &st);
    if (q != nccl::ncclSuccess) {
      ncclCheck(q, strFormat("ncclCommGetAsyncError (after %s)", what).c_str(), comm);
    }
    if (st == nccl::ncclSuccess) return;
    if (st != nccl::ncclInProgress) ncclCheck(st, what, comm);
    if (std::chrono::steady_clock::now() >= deadline)
      CCLX_THROW(cclxTimeout, "%s: the NCCL comm was still in progress (ncclInProgress) at the "
                 "call's deadline", what);
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(1)) pause *= 2;
  }
}

}  // namespace cclx
