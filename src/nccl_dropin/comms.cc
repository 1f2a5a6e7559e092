// The drop-in's comm table and the setup of a comm's cclx state through the application's own
// NCCL comm (see comms.h).
#include "nccl_dropin/comms.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "gpu/cuda_check.h"
#include "nccl_dropin/real.h"

namespace cclx {
namespace dropin {

namespace {

std::mutex gMu;
std::unordered_map<ncclComm_t, std::shared_ptr<DropinComm>>& table() {
  static auto* t = new std::unordered_map<ncclComm_t, std::shared_ptr<DropinComm>>();
  return *t;
}

void check(ncclResult_t r, const char* what, ncclComm_t comm) {
  if (r == nccl::ncclSuccess) return;
  const RealNccl& L = real();
  const char* last = L.ncclGetLastError ? L.ncclGetLastError(comm) : nullptr;
  CCLX_THROW(cclxNcclError, "%s failed: NCCL error %d (%s)%s%s", what, int(r),
             L.ncclGetErrorString ? L.ncclGetErrorString(r) : errorName(r),
             last && *last ? ": " : "", last ? last : "");
}

// Waits until a nonblocking comm's last call is no longer in progress.
void settle(ncclComm_t comm, std::chrono::steady_clock::time_point deadline) {
  const RealNccl& L = real();
  for (;;) {
    ncclResult_t st = nccl::ncclSuccess;
    check(L.ncclCommGetAsyncError(comm, &st), "ncclCommGetAsyncError", comm);
    if (st != nccl::ncclInProgress) return check(st, "NCCL (asynchronous)", comm);
    CCLX_REQUIRE(std::chrono::steady_clock::now() < deadline, cclxTimeout,
                 "NCCL comm still in progress at the drop-in's setup deadline");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// Setup records through the application's comm: an all-gather of fixed-size records (a length
// and the bytes) with the real ncclAllGather, on a stream of the drop-in's own.
class NcclExchange final : public Exchange {
 public:
  static constexpr size_t kRecord = 4096;

  NcclExchange(const DropinComm& dc) : dc_(dc) {
    CCLX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CCLX_CUDA_CHECK(cudaMalloc(&dev_, kRecord * size_t(dc.size)));
  }
  ~NcclExchange() override {
    (void)cudaFree(dev_);
    (void)cudaStreamDestroy(stream_);
  }

  std::vector<std::string> allGather(const std::string& tag, const std::string& mine) override {
    CCLX_REQUIRE(mine.size() + 4 <= kRecord, cclxInternalError, "setup record '%s' too long",
                 tag.c_str());
    const size_t n = size_t(dc_.size);
    std::vector<char> host(kRecord * n, 0);
    char* rec = host.data() + kRecord * size_t(dc_.rank);
    const uint32_t len = uint32_t(mine.size());
    std::memcpy(rec, &len, 4);
    std::memcpy(rec + 4, mine.data(), mine.size());
    char* slot = dev_ + kRecord * size_t(dc_.rank);
    CCLX_CUDA_CHECK(cudaMemcpyAsync(slot, rec, kRecord, cudaMemcpyHostToDevice, stream_));
    const auto deadline = std::chrono::steady_clock::now() + dc_.timeout;
    ncclResult_t r = real().ncclAllGather(slot, dev_, kRecord, nccl::ncclUint8, dc_.comm, stream_);
    if (r == nccl::ncclInProgress) settle(dc_.comm, deadline);
    else check(r, "ncclAllGather (drop-in setup)", dc_.comm);
    CCLX_CUDA_CHECK(cudaMemcpyAsync(host.data(), dev_, kRecord * n, cudaMemcpyDeviceToHost, stream_));
    for (;;) {  // a rank that never arrives: the comm's timeout, not a hang
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) CCLX_CUDA_CHECK(e);
      CCLX_REQUIRE(std::chrono::steady_clock::now() < deadline, cclxTimeout,
                   "drop-in setup (%s): a rank did not take part within %lld ms", tag.c_str(),
                   (long long)dc_.timeout.count());
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    std::vector<std::string> out(n);
    for (size_t r2 = 0; r2 < n; ++r2) {
      uint32_t l = 0;
      std::memcpy(&l, host.data() + kRecord * r2, 4);
      CCLX_REQUIRE(l + 4 <= kRecord, cclxRemoteError, "rank %zu sent a malformed setup record", r2);
      out[r2].assign(host.data() + kRecord * r2 + 4, l);
    }
    return out;
  }

 private:
  const DropinComm& dc_;
  cudaStream_t stream_ = nullptr;
  char* dev_ = nullptr;
};

// Collective over the comm's ranks: peer memory and the algorithms, or Off with the reason.
void setUp(DropinComm& dc) {
  const RealNccl& L = real();
  const Config& cfg = config();
  check(L.ncclCommCount(dc.comm, &dc.size), "ncclCommCount", dc.comm);
  check(L.ncclCommUserRank(dc.comm, &dc.rank), "ncclCommUserRank", dc.comm);
  check(L.ncclCommCuDevice(dc.comm, &dc.device), "ncclCommCuDevice", dc.comm);
  if (cfg.timeoutMs > 0) dc.timeout = std::chrono::milliseconds(cfg.timeoutMs);
  logSetRank(dc.rank);
  if (dc.size < 2 || dc.size > kMaxRanks) {  // every rank sees the same size: no exchange
    dc.state = DropinComm::State::Off;
    dc.whyOff = strFormat("world size %d is outside 2..%d", dc.size, kMaxRanks);
    return;
  }
  DeviceGuard guard(dc.device);
  NcclExchange ex(dc);
  GpuSetup s;
  s.rank = dc.rank;
  s.size = dc.size;
  s.device = dc.device;
  s.cfg = cfg;
  s.timeout = dc.timeout;
  auto b = std::make_unique<CudaBackend>(s, ex);
  if (!b->peerUsable()) {
    dc.state = DropinComm::State::Off;
    dc.whyOff = "peer memory is off (CCLX_DEBUG=INFO says why)";
    return;
  }
  b->attachNccl(dc.comm, /*owned=*/false);
  dc.backend = std::move(b);
  dc.state = DropinComm::State::Ready;
}

void setUpLogged(DropinComm& dc) {
  try {
    setUp(dc);
  } catch (const std::exception& e) {
    dc.backend.reset();
    dc.state = DropinComm::State::Off;
    dc.whyOff = e.what();
  }
  if (dc.state == DropinComm::State::Ready)
    CCLX_INFO("NCCL drop-in: comm %p rank %d/%d on cuda:%d: DDA and FP8 collectives on",
              static_cast<void*>(dc.comm), dc.rank, dc.size, dc.device);
  else
    CCLX_INFO("NCCL drop-in: comm %p: every call forwarded (%s)", static_cast<void*>(dc.comm),
              dc.whyOff.c_str());
}

}  // namespace

std::shared_ptr<DropinComm> findComm(ncclComm_t comm) {
  std::lock_guard<std::mutex> g(gMu);
  auto it = table().find(comm);
  return it == table().end() ? nullptr : it->second;
}

void addComm(ncclComm_t comm, bool ready) {
  if (!comm) return;
  auto dc = std::make_shared<DropinComm>();
  dc->comm = comm;
  if (ready) setUpLogged(*dc);
  std::lock_guard<std::mutex> g(gMu);
  table()[comm] = std::move(dc);
}

DropinComm::State prepare(DropinComm& dc, ncclStream_t stream, int groupDepth) {
  if (dc.state != DropinComm::State::Pending || groupDepth > 0) return dc.state;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<::cudaStream_t>(stream), &cs) != cudaSuccess) {
    (void)cudaGetLastError();
    return dc.state;
  }
  if (cs != cudaStreamCaptureStatusNone) return dc.state;
  ncclResult_t st = nccl::ncclSuccess;
  if (real().ncclCommGetAsyncError(dc.comm, &st) != nccl::ncclSuccess || st != nccl::ncclSuccess)
    return dc.state;
  setUpLogged(dc);
  return dc.state;
}

void dropComm(ncclComm_t comm, bool graceful) {
  std::shared_ptr<DropinComm> dc;
  {
    std::lock_guard<std::mutex> g(gMu);
    auto it = table().find(comm);
    if (it == table().end()) return;
    dc = it->second;
    table().erase(it);
  }
  if (!dc->backend) return;
  try {
    if (!graceful) dc->backend->abort();  // no device synchronization, memory left alone
    dc->backend.reset();
  } catch (const std::exception& e) {
    CCLX_WARN("NCCL drop-in: releasing comm %p: %s", static_cast<void*>(comm), e.what());
  }
}

}  // namespace dropin
}  // namespace cclx
