// The drop-in's comm table and the setup of a comm's cclx state through the application's own
// NCCL comm (see comms.h; docs/design/dropin.md and docs/design/failure.md).
#include "nccl_dropin/comms.h"

#include <chrono>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/settings/config.h"
#include "base/error.h"
#include "base/log.h"
#include "gpu/runtime.h"
#include "nccl_dropin/errors.h"
#include "nccl_dropin/real.h"

namespace cclx {
namespace dropin {

namespace {

std::mutex gMu;
std::unordered_map<ncclComm_t, std::shared_ptr<DropinComm>>& table() {
  static auto* t = new std::unordered_map<ncclComm_t, std::shared_ptr<DropinComm>>();
  return *t;
}

// NCCL functions a setup calls; a loaded NCCL without them leaves every comm forwarded.
std::string missingFunctions(const RealNccl& L) {
  std::string m;
  const std::pair<const void*, const char*> fns[] = {
      {reinterpret_cast<const void*>(L.ncclCommCount), "ncclCommCount"},
      {reinterpret_cast<const void*>(L.ncclCommUserRank), "ncclCommUserRank"},
      {reinterpret_cast<const void*>(L.ncclCommCuDevice), "ncclCommCuDevice"},
      {reinterpret_cast<const void*>(L.ncclCommGetAsyncError), "ncclCommGetAsyncError"},
      {reinterpret_cast<const void*>(L.ncclCommAbort), "ncclCommAbort"},
      {reinterpret_cast<const void*>(L.ncclAllGather), "ncclAllGather"}};
  for (const auto& [fn, name] : fns)
    if (!fn) m += (m.empty() ? "" : ", ") + std::string(name);
  return m;
}

void logVerdict(const DropinComm& dc) {
  if (dc.state == DropinComm::State::Ready)
    CCLX_INFO("NCCL drop-in: comm %p rank %d/%d on cuda:%d: DDA and FP8 collectives on",
              static_cast<void*>(dc.comm), dc.rank, dc.size, dc.device);
  else
    CCLX_INFO("NCCL drop-in: comm %p: every call forwarded (%s)", static_cast<void*>(dc.comm),
              dc.whyOff.c_str());
}

struct Outcome {
  DropinComm::State state = DropinComm::State::Off;
  std::shared_ptr<CudaBackend> backend;
  std::string whyOff;
  bool settingsDiffer = false;  // every rank failed alike: an error for the application
};

// Collective over the comm's ranks (a fixed sequence of exchanges, gpu/peer_mem.h): peer memory
// and the algorithms, or Off with the reason, the same on every rank. Never throws.
Outcome setUp(DropinComm& dc) {
  Outcome o;
  const RealNccl& L = real();
  int size = 0, rank = 0, device = -1;
  if (L.ncclCommCount(dc.comm, &size) != nccl::ncclSuccess ||
      L.ncclCommUserRank(dc.comm, &rank) != nccl::ncclSuccess ||
      L.ncclCommCuDevice(dc.comm, &device) != nccl::ncclSuccess) {
    o.whyOff = "the comm's rank, size or device could not be read";
    return o;
  }
  const auto timeout = dropinTimeout(config());
  {
    std::lock_guard<std::mutex> g(dc.mu);
    dc.rank = rank;
    dc.size = size;
    dc.device = device;
    dc.timeout = timeout;
  }
  logSetRank(rank);
  if (size < 2 || size > kMaxRanks) {  // every rank sees the same size: no exchange
    o.whyOff = strFormat("world size %d is outside 2..%d", size, kMaxRanks);
    return o;
  }
  if (!dc.ex) {
    o.whyOff = "no setup buffers";
    return o;
  }
  try {
    DeviceGuard guard(device);
    dc.ex->begin(dc.comm, rank, size, gpurt::deadlineAfter(timeout), &dc.aborting);
    GpuSetup s;
    s.rank = rank;
    s.size = size;
    s.device = device;
    s.cfg = config();
    s.timeout = timeout;
    s.dropin = true;
    auto b = std::make_shared<CudaBackend>(s, *dc.ex);
    if (!b->peerUsable()) {
      o.whyOff = "peer memory is off (CCLX_DEBUG=INFO says why)";
      return o;  // b: nothing of it was used; freed here
    }
    b->attachNccl(dc.comm, /*owned=*/false);
    o.backend = std::move(b);
    o.state = DropinComm::State::Ready;
  } catch (const Error& e) {
    o.whyOff = e.what();
    o.settingsDiffer = e.code() == cclxInvalidUsage;
  } catch (const std::exception& e) {
    o.whyOff = e.what();
  }
  return o;
}

// Runs the setup (setupMu held) and publishes its outcome, unless the comm was dropped meanwhile
// (then the backend is released without waiting). Returns the error for the caller to return.
ncclResult_t setUpAndPublish(DropinComm& dc) {
  Outcome o = setUp(dc);
  dc.ex.reset();  // freed, or left to a pending all-gather (exchange.h)
  std::shared_ptr<CudaBackend> orphan;
  {
    std::lock_guard<std::mutex> g(dc.mu);
    if (dc.dropped) {
      orphan = std::move(o.backend);
    } else {
      dc.state = o.state;
      dc.backend = std::move(o.backend);
      dc.whyOff = o.whyOff;
      logVerdict(dc);
    }
  }
  if (orphan) orphan->abandon();
  if (o.settingsDiffer) return fail(nccl::ncclInvalidUsage, o.whyOff);
  return nccl::ncclSuccess;
}

}  // namespace

std::chrono::milliseconds dropinTimeout(const Config& cfg) {
  if (cfg.timeoutMs >= 0) return std::chrono::milliseconds(cfg.timeoutMs);
  if (cfg.defaultTimeoutSet && cfg.defaultTimeoutMs > 0)
    return std::min(std::chrono::milliseconds(cfg.defaultTimeoutMs), kInfiniteTimeout);
  return kInfiniteTimeout;
}

DropinComm::Snapshot DropinComm::snapshot() const {
  std::lock_guard<std::mutex> g(mu);
  return Snapshot{state, backend, timeout};
}

std::shared_ptr<DropinComm> findComm(ncclComm_t comm) {
  std::lock_guard<std::mutex> g(gMu);
  auto it = table().find(comm);
  return it == table().end() ? nullptr : it->second;
}

ncclResult_t addComm(ncclComm_t comm, bool ready) {
  if (!comm) return nccl::ncclSuccess;
  auto dc = std::make_shared<DropinComm>();
  dc->comm = comm;
  const RealNccl& L = real();
  const std::string missing = missingFunctions(L);
  int size = 0;
  if (!missing.empty()) {
    dc->state = DropinComm::State::Off;
    dc->whyOff = "the loaded NCCL lacks " + missing;
  } else if (L.ncclCommCount(comm, &size) == nccl::ncclSuccess && (size < 2 || size > kMaxRanks)) {
    dc->state = DropinComm::State::Off;
    dc->whyOff = strFormat("world size %d is outside 2..%d", size, kMaxRanks);
  } else {
    // The setup's buffers now: a rank that cannot have them must not be left out of the setup's
    // exchanges, which its peers would pair with its next NCCL calls.
    int device = -1;
    if (L.ncclCommCuDevice(comm, &device) != nccl::ncclSuccess || device < 0)
      if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
    try {
      dc->ex = std::make_unique<NcclExchange>(device);
    } catch (const std::exception& e) {
      const ncclResult_t ar = L.ncclCommAbort(comm);
      return fail(nccl::ncclUnhandledCudaError,
                  strFormat("the drop-in could not allocate its setup buffers (%s); the new comm "
                            "was aborted (%d) rather than left out of its peers' setup",
                            e.what(), int(ar)));
    }
  }
  const bool off = dc->state == DropinComm::State::Off;
  if (off) logVerdict(*dc);
  {
    std::lock_guard<std::mutex> g(gMu);
    table()[comm] = dc;
  }
  if (off || !ready) return nccl::ncclSuccess;
  std::lock_guard<std::mutex> g(dc->setupMu);
  const ncclResult_t r = setUpAndPublish(*dc);
  if (r != nccl::ncclSuccess) {  // every rank alike: the creating call fails
    dropComm(comm, /*graceful=*/false);
    (void)L.ncclCommAbort(comm);
  }
  return r;
}

DropinComm::Snapshot prepare(DropinComm& dc, ncclStream_t stream, int groupDepth, ncclResult_t& r) {
  r = nccl::ncclSuccess;
  DropinComm::Snapshot snap = dc.snapshot();
  if (snap.state != DropinComm::State::Pending || groupDepth > 0) return snap;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<::cudaStream_t>(stream), &cs) != cudaSuccess) {
    (void)cudaGetLastError();
    return snap;
  }
  if (cs != cudaStreamCaptureStatusNone) return snap;
  // A nonblocking comm still in progress (its creation or its last call being enqueued): wait for
  // it rather than forward, so that every rank sets up at the same call. An error: NCCL's to
  // report, on this call.
  const auto deadline = gpurt::deadlineAfter(dropinTimeout(config()));
  for (;;) {
    ncclResult_t st = nccl::ncclSuccess;
    if (real().ncclCommGetAsyncError(dc.comm, &st) != nccl::ncclSuccess) return snap;
    if (st == nccl::ncclSuccess) break;
    if (st != nccl::ncclInProgress || dc.aborting.load() ||
        std::chrono::steady_clock::now() > deadline)
      return snap;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  std::lock_guard<std::mutex> g(dc.setupMu);
  if (dc.snapshot().state == DropinComm::State::Pending && !dc.aborting.load())
    r = setUpAndPublish(dc);
  return dc.snapshot();
}

void stopComm(ncclComm_t comm) {
  std::shared_ptr<DropinComm> dc = findComm(comm);
  if (!dc) return;
  dc->aborting.store(true);
  if (std::shared_ptr<CudaBackend> b = dc->snapshot().backend) b->requestAbort();
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
  if (!graceful) dc->aborting.store(true);
  std::shared_ptr<CudaBackend> b;
  {
    std::lock_guard<std::mutex> g(dc->mu);
    dc->dropped = true;
    b = std::move(dc->backend);
    dc->state = DropinComm::State::Off;
    dc->whyOff = graceful ? "finalized" : "aborted";
  }
  if (!b) return;
  try {
    if (graceful) b->finalize();
    else b->abandon();
  } catch (const std::exception& e) {
    CCLX_WARN("NCCL drop-in: releasing comm %p: %s", static_cast<void*>(comm), e.what());
  }
}

}  // namespace dropin
}  // namespace cclx
