// The drop-in's setup exchange through the application's NCCL comm (see exchange.h).
#include "nccl_dropin/exchange.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "gpu/backend.h"
#include "gpu/peer_mem.h"
#include "nccl_dropin/real.h"

namespace cclx {
namespace dropin {

namespace {

std::string ncclMessage(ncclResult_t r, ncclComm_t comm) {
  const RealNccl& L = real();
  const char* last = L.ncclGetLastError ? L.ncclGetLastError(comm) : nullptr;
  return strFormat("NCCL error %d (%s)%s%s", int(r),
                   L.ncclGetErrorString ? L.ncclGetErrorString(r) : errorName(r),
                   last && *last ? ": " : "", last ? last : "");
}

std::mutex gPoolMu;  // NcclExchange::pool()

}  // namespace

// Never destroyed: the process may exit while the pool holds buffers.
std::vector<std::unique_ptr<NcclExchange::Buffers>>& NcclExchange::pool() {
  static auto* p = new std::vector<std::unique_ptr<Buffers>>();
  return *p;
}

std::unique_ptr<NcclExchange::Buffers> NcclExchange::takeBuffers(int device) {
  {
    std::lock_guard<std::mutex> g(gPoolMu);
    auto& p = pool();
    for (auto it = p.begin(); it != p.end(); ++it)
      if ((*it)->device == device) {
        std::unique_ptr<Buffers> b = std::move(*it);
        p.erase(it);
        return b;
      }
  }
  auto b = std::make_unique<Buffers>();
  b->device = device;
  DeviceGuard guard(device);
  gpures::createStream(b->stream);
  gpures::createEvent(b->done);
  gpures::allocDevice(b->dev, kRecord * kMaxRanks);
  gpures::allocPinned(b->pinned, kRecord * (kMaxSteps + kMaxRanks), cudaHostAllocDefault);
  return b;
}

void NcclExchange::giveBack(std::unique_ptr<Buffers> b) {
  std::lock_guard<std::mutex> g(gPoolMu);
  pool().push_back(std::move(b));
}

NcclExchange::NcclExchange(int device) : device_(device), b_(takeBuffers(device)) {}

NcclExchange::~NcclExchange() {
  if (pending_) {
    const cudaError_t e = cudaEventQuery(b_->done.get());
    if (e != cudaSuccess) {
      if (e != cudaErrorNotReady) (void)cudaGetLastError();
      // An all-gather of the application's comm may still read and write these.
      Buffers* left = b_.release();
      CCLX_WARN("NCCL drop-in: a setup all-gather of comm %p is still pending: %zu bytes of "
                "device memory and %zu bytes of pinned host memory stay allocated",
                static_cast<void*>(comm_), left->dev.bytes(), left->pinned.bytes());
      return;
    }
  }
  giveBack(std::move(b_));
}

void NcclExchange::begin(ncclComm_t comm, int rank, int size, gpurt::Deadline deadline,
                         const std::atomic<bool>* cancel) {
  CCLX_REQUIRE(size >= 1 && size <= kMaxRanks && rank >= 0 && rank < size, cclxInternalError,
               "drop-in setup exchange for rank %d of %d", rank, size);
  comm_ = comm;
  rank_ = rank;
  size_ = size;
  deadline_ = deadline;
  cancel_ = cancel;
}

// Waits while a nonblocking comm still enqueues the last call (ncclInProgress). Enqueuing does
// not wait for peers, so a rank that already gave up allows it a few seconds past its deadline.
void NcclExchange::settle(gpurt::Deadline deadline) {
  const RealNccl& L = real();
  for (;;) {
    ncclResult_t st = nccl::ncclSuccess;
    const ncclResult_t r = L.ncclCommGetAsyncError(comm_, &st);
    if (r != nccl::ncclSuccess) CCLX_THROW(cclxNcclError, "%s", ncclMessage(r, comm_).c_str());
    if (st == nccl::ncclSuccess) return;
    if (st != nccl::ncclInProgress)
      CCLX_THROW(cclxNcclError, "the comm failed: %s", ncclMessage(st, comm_).c_str());
    CCLX_REQUIRE(std::chrono::steady_clock::now() < deadline, cclxTimeout,
                 "the NCCL comm was still in progress at the setup deadline");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Copies `mine` into this exchange's send slot and enqueues the all-gather (and, for a gather
// whose result is wanted, the copy back). Throws when NCCL refuses the all-gather.
void NcclExchange::enqueue(const std::string& tag, const std::string& mine, bool gather) {
  CCLX_REQUIRE(steps_ < kMaxSteps, cclxInternalError, "drop-in setup: more than %d exchanges",
               kMaxSteps);
  CCLX_REQUIRE(mine.size() + 4 <= kRecord, cclxInternalError, "setup record '%s' too long",
               tag.c_str());
  char* send = static_cast<char*>(b_->pinned.get()) + kRecord * size_t(steps_++);
  std::memset(send, 0, kRecord);
  const uint32_t len = uint32_t(mine.size());
  std::memcpy(send, &len, 4);
  std::memcpy(send + 4, mine.data(), mine.size());
  DeviceGuard guard(device_);
  char* dev = static_cast<char*>(b_->dev.get());
  char* slot = dev + kRecord * size_t(rank_);
  pending_ = true;
  CCLX_CUDA_CHECK(cudaMemcpyAsync(slot, send, kRecord, cudaMemcpyHostToDevice, b_->stream.get()));
  const ncclResult_t r =
      real().ncclAllGather(slot, dev, kRecord, nccl::ncclUint8, comm_, b_->stream.get());
  if (r == nccl::ncclInProgress) {
    const auto late = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    settle(std::max(deadline_, late));
  } else if (r != nccl::ncclSuccess) {
    CCLX_THROW(cclxNcclError, "ncclAllGather (drop-in setup '%s'): %s", tag.c_str(),
               ncclMessage(r, comm_).c_str());
  }
  if (gather)
    CCLX_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(b_->pinned.get()) + kRecord * kMaxSteps, dev,
                                    kRecord * size_t(size_), cudaMemcpyDeviceToHost,
                                    b_->stream.get()));
  CCLX_CUDA_CHECK(cudaEventRecord(b_->done.get(), b_->stream.get()));
}

std::vector<std::string> NcclExchange::allGather(const std::string& tag, const std::string& mine) {
  enqueue(tag, mine, /*gather=*/true);
  if (!gpurt::waitEvent(b_->done.get(), deadline_, cancel_)) {
    if (cancel_ && cancel_->load())
      CCLX_THROW(cclxAborted, "the comm was aborted during the drop-in's setup ('%s')",
                 tag.c_str());
    CCLX_THROW(cclxTimeout, "drop-in setup ('%s'): not every rank took part within the timeout",
               tag.c_str());
  }
  pending_ = false;
  // An all-gather of an aborted comm completes without data.
  ncclResult_t st = nccl::ncclSuccess;
  const ncclResult_t q = real().ncclCommGetAsyncError(comm_, &st);
  if (q != nccl::ncclSuccess || (st != nccl::ncclSuccess && st != nccl::ncclInProgress))
    CCLX_THROW(cclxNcclError, "drop-in setup ('%s'): %s", tag.c_str(),
               ncclMessage(q != nccl::ncclSuccess ? q : st, comm_).c_str());
  const char* recv = static_cast<const char*>(b_->pinned.get()) + kRecord * kMaxSteps;
  std::vector<std::string> out(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    uint32_t l = 0;
    std::memcpy(&l, recv + kRecord * size_t(r), 4);
    if (l + 4 > kRecord) continue;  // malformed: an empty record (core/failure/setup_sequence.h reports it)
    out[size_t(r)].assign(recv + kRecord * size_t(r) + 4, l);
  }
  return out;
}

void NcclExchange::contribute(const std::string& tag, const std::string& mine) {
  try {
    enqueue(tag, mine, /*gather=*/false);
  } catch (const std::exception& e) {
    CCLX_WARN("NCCL drop-in: setup exchange '%s' of comm %p: %s", tag.c_str(),
              static_cast<void*>(comm_), e.what());
  }
}

}  // namespace dropin
}  // namespace cclx
