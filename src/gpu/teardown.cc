// Teardown of the GPU backend (docs/design/failure.md "Setup, teardown and abort"):
// finalize waits for this comm's own work only (never the whole device), then makes sure that no
// peer will write into this rank's peer memory any more (a last peer barrier) before freeing it;
// abort and a failed or timed-out teardown free nothing a kernel or a peer may still use (counted
// in a log line) and never wait.
#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "gpu/backend.h"

namespace cclx {

namespace {

// The teardown barrier's bound when the comm's timeout is longer (or infinite). A peer that has
// finished its last kernel writes nothing more into this rank's memory but the tail of that
// kernel (a last flag or "consumed" signal), so the barrier only has to outlast that tail and the
// ranks' skew in calling finalize; a peer that exits without finalizing must not hold finalize
// for long, and what a bounded wait gives up on is only left allocated, never freed under a peer.
constexpr std::chrono::milliseconds kTeardownBound{10000};

}  // namespace

// This comm's own work: the last eager peer kernel (orderEv_, on whichever stream it ran), the
// internal stream (async calls) and the NCCL operations it enqueued. Graph replays are the
// application's to complete before finalize, as with NCCL.
bool CudaBackend::waitOwnWork(std::chrono::steady_clock::time_point deadline) {
  const std::atomic<bool>* stop = &sh_->abortRequested;  // an abort from another thread
  if (orderValid_ && !gpurt::waitEvent(orderEv_.get(), deadline, stop)) return false;
  if (!gpurt::waitStream(internal_.get(), deadline, stop)) return false;
  std::vector<EventRef> ends;
  {
    std::lock_guard<std::mutex> g(opsMu_);
    for (const NcclOp& op : ncclOps_) ends.push_back(op.end);
  }
  for (const EventRef& e : ends)
    if (!gpurt::waitEvent(e.get(), deadline, stop)) return false;
  return true;
}

// Cross-rank quiescence: every rank stops writing into its peers' control words (ctl cleared
// under ctlMu, so requestAbort writes nowhere from now on), then runs the peer barrier kernel on
// the internal stream after its last peer kernel. When this rank's barrier completes, every peer
// has launched its own barrier, i.e. finished all its peer kernels and cleared its ctl pointers:
// nothing will write into this rank's memory any more. False when the barrier failed or did not
// complete within `bound` (then nothing may be freed).
bool CudaBackend::quiesce(std::chrono::milliseconds bound) {
  if (!pm_.usable) return true;
  {
    std::lock_guard<std::mutex> g(sh_->ctlMu);
    for (uint32_t*& c : sh_->ctl) c = nullptr;
  }
  if (sh_->abortRequested.load()) return false;  // its copies into peers may still be queued
  CollArgs b;
  b.type = CollType::Barrier;
  b.opts.timeout = bound;
  if (orderValid_) CCLX_CUDA_CHECK(cudaStreamWaitEvent(internal_.get(), orderEv_.get(), 0));
  barrier_->launch(b, ctx_, internal_.get());
  // The kernel stops at its own deadline; the host bound adds a second for a kernel that could
  // not even start (a device kept busy by something else).
  if (!gpurt::waitStream(internal_.get(), gpurt::deadlineAfter(bound + std::chrono::seconds(1)),
                         &sh_->abortRequested)) {
    CCLX_WARN("rank %d: comm '%s': the teardown barrier did not complete within %lld ms",
              ctx_.rank, sh_->name.c_str(), (long long)bound.count());
    return false;
  }
  const auto dev = sh_->deviceError();
  if (dev.first != cclxSuccess) {
    CCLX_WARN("rank %d: comm '%s': teardown barrier: %s", ctx_.rank, sh_->name.c_str(),
              dev.second.c_str());
    return false;
  }
  return true;
}

// Forgets every device resource a kernel or a peer may still use; streams and events are
// destroyed (the runtime releases them once their work is done; destroying never waits).
void CudaBackend::leakAll(const char* why) {
  sh_->leak.store(true);
  {
    std::lock_guard<std::mutex> g(sh_->ctlMu);
    for (uint32_t*& c : sh_->ctl) c = nullptr;
  }
  const size_t device = peerMemLeak(pm_) + counters_.leak() + scratch_.leak();
  ctx_.counters = nullptr;
  const size_t pinned = sh_->errHost ? kErrorWords * sizeof(uint32_t) + sizeof(uint32_t) : 0;
  forkEv_.reset();
  orderEv_.reset();
  captureEv_.reset();
  internal_.reset();
  growStream_.reset();
  orderValid_ = captureValid_ = false;
  CCLX_WARN("rank %d: comm '%s' %s: %zu bytes of device memory and %zu bytes of pinned host "
            "memory left allocated (kernels or peers may still use them)",
            ctx_.rank, sh_->name.c_str(), why, device, pinned);
}

void CudaBackend::finalize() {
  std::lock_guard<std::mutex> lock(runMu_);
  finalizeLocked();
}

void CudaBackend::finalizeLocked() {
  if (finalized_) return;
  finalized_ = true;
  DeviceGuard guard(sh_->device);
  const auto bound = std::min(sh_->timeout.count() > 0 ? sh_->timeout : kInfiniteTimeout,
                              kTeardownBound);
  const auto healthy = [&] {
    return !abandoned_.load() && !sh_->failed.load() && !sh_->abortRequested.load();
  };
  bool ok = healthy();
  try {
    // This comm's calls may legitimately wait for late peers: up to the comm's timeout (none for
    // the drop-in, as NCCL's destroy); an abort from another thread ends the wait.
    if (ok) ok = waitOwnWork(gpurt::deadlineAfter(sh_->timeout));
    if (ok) ok = quiesce(bound) && healthy();
  } catch (const Error& e) {
    CCLX_WARN("rank %d: comm '%s' teardown: %s", ctx_.rank, sh_->name.c_str(), e.what());
    ok = false;
  }
  nccl::ncclComm_t c = nullptr;
  bool owned = true;
  {
    std::lock_guard<std::mutex> g(sh_->mu);
    std::swap(c, sh_->comm);
    owned = sh_->ownsComm;
  }
  if (c && owned) {
    nccl::ncclResult_t r = ok ? ncclLib().commDestroy(c) : ncclLib().commAbort(c);
    if (r != nccl::ncclSuccess) CCLX_WARN("NCCL comm teardown returned %d", int(r));
  }
  if (!ok) {
    sh_->requestAbort();  // kernels of this comm that still spin stop
    leakAll(abandoned_.load() ? "aborted" : "released after a failure");
    return;
  }
  {
    std::lock_guard<std::mutex> g(opsMu_);
    for (const NcclOp& op : ncclOps_) sh_->returnEvent(op.start);
    ncclOps_.clear();
  }
  peerMemClose(pm_);
  ctx_.counters = nullptr;
  counters_.reset();
  scratch_.reset();
  forkEv_.reset();
  orderEv_.reset();
  captureEv_.reset();
  internal_.reset();
  growStream_.reset();
}

void CudaBackend::abort() {
  sh_->requestAbort();
  sh_->abortNccl();
  sh_->fail(cclxAborted, strFormat("rank %d: comm '%s' was aborted", ctx_.rank, sh_->name.c_str()));
}

void CudaBackend::abandon() {
  abandoned_.store(true);
  sh_->requestAbort();
  sh_->abortNccl();
  sh_->fail(cclxAborted, strFormat("rank %d: comm '%s' was aborted", ctx_.rank, sh_->name.c_str()));
  // A call in progress holds runMu_ only while it enqueues (never while it waits for the
  // device); a finalize in progress stops at once (its waits see the abort). Whoever holds it
  // leaves the release to the destructor, which leaks (abandoned_).
  std::unique_lock<std::mutex> lock(runMu_, std::try_to_lock);
  if (lock.owns_lock()) finalizeLocked();
}

}  // namespace cclx
