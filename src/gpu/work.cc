// Work handles of the GPU backend and the failure state they share with it.
#include <chrono>
#include <thread>

#include "gpu/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "core/failure/wait_chain.h"
#include "gpu/runtime.h"

namespace cclx {

CudaShared::~CudaShared() {
  for (cudaEvent_t e : freeEvents) (void)cudaEventDestroy(e);
  if (abortStream) (void)cudaStreamDestroy(abortStream);
  if (leak.load()) return;  // kernels or queued copies may still use them (teardown.cc)
  if (abortValue) (void)cudaFreeHost(abortValue);
  if (a2avHost) (void)cudaFreeHost(a2avHost);
  if (errHost) (void)cudaFreeHost(const_cast<uint32_t*>(errHost));
}

void CudaShared::throwIfFailed() {
  if (!failed.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> g(mu);
  throw Error(failCode, failMsg);
}

Error CudaShared::fail(cclxResult_t code, const std::string& msg) {
  std::lock_guard<std::mutex> g(mu);
  if (!failed.load()) {
    failCode = code;
    failMsg = msg;
    failed.store(true, std::memory_order_release);
    CCLX_WARN("%s", msg.c_str());
  }
  return Error(failCode, failMsg);
}

namespace {

std::string rankList(uint32_t mask) {
  std::string s;
  for (int r = 0; r < kMaxRanks; ++r)
    if (mask & (1u << r)) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s.empty() ? "?" : s;
}

}  // namespace

// The ranks the kernels named in the error words (missing, or sending the wrong size).
static uint32_t namedRanks(const volatile uint32_t* err, int size) {
  uint32_t mask = 0;
  for (int r = 0; r < size && r < kMaxRanks; ++r)
    if (err[kErrMissing + r]) mask |= 1u << r;
  return mask;
}

std::pair<cclxResult_t, std::string> CudaShared::deviceError() const {
  if (!errHost || errHost[kErrCode] == kErrNone) return {cclxSuccess, ""};
  // The timeout the failed call ran with (the device records it: a call's own timeout or one set
  // after creation); the comm's creation timeout only where none was recorded.
  const auto recorded = [&](int word) {
    return errHost[word] ? (long long)errHost[word] : (long long)timeout.count();
  };
  const auto named = [&] { return namedRanks(errHost, size); };
  if (errHost[kErrCode] == kErrTimeout) {
    const long long ms = recorded(kErrTimeoutMs);
    const uint32_t mask = named();
    return {cclxTimeout,
            strFormat("rank %d: a collective or window wait_signal on comm '%s' (cuda:%d) timed "
                      "out after %lld ms waiting for rank(s) %s%s; its output is NaN and the comm "
                      "is unusable",
                      rank, name.c_str(), device, ms, rankList(mask).c_str(),
                      waitChainOf(mask).c_str())};
  }
  if (errHost[kErrCode] == kErrMismatch) {
    const uint32_t mask = named();
    return {cclxInvalidUsage,
            strFormat("rank %d: on comm '%s' (cuda:%d) rank(s) %s sent a message of another size "
                      "than this rank expected (all-to-all-v counts disagree); its output is NaN "
                      "and the comm is unusable",
                      rank, name.c_str(), device, rankList(mask).c_str())};
  }
  if (errHost[kErrCode] == kErrCapacity)
    return {cclxInvalidUsage,
            strFormat("rank %d: on comm '%s' (cuda:%d) the split sizes of all_to_all_v_device are "
                      "negative or sum beyond the rows of its input or output; its output is NaN "
                      "and the comm is unusable",
                      rank, name.c_str(), device)};
  const uint32_t word = errHost[kErrOrigin];
  const uint32_t reason = word >> 16;
  const int origin = int(word & 0xFFFFu) - 1;
  if (reason == kAbortMismatch)
    return {cclxInvalidUsage,
            strFormat("rank %d: comm '%s' failed: rank %d received a message of another size than "
                      "it expected from rank(s) %s (all-to-all-v counts disagree); collectives "
                      "from then on have NaN outputs and the comm is unusable",
                      rank, name.c_str(), origin, rankList(errHost[kErrOriginMissing]).c_str())};
  if (reason == kAbortCapacity)
    return {cclxInvalidUsage,
            strFormat("rank %d: comm '%s' failed: rank %d's split sizes of all_to_all_v_device are "
                      "negative or sum beyond the rows of its input or output; collectives from "
                      "then on have NaN outputs and the comm is unusable",
                      rank, name.c_str(), origin)};
  const long long ms = recorded(kErrOriginTimeoutMs);
  if (reason == kAbortTimeout) {
    // The origin waited for this rank while this rank waited behind others: name those too.
    uint32_t behind = 0;
    for (int r = 0; r < size && r < kMaxRanks; ++r)
      if (errHost[kErrWaitingFor + r] && r != rank) behind |= 1u << r;
    const std::string chain =
        (errHost[kErrOriginMissing] >> rank & 1u) && behind
            ? strFormat(" (this rank was waiting for rank(s) %s)", rankList(behind).c_str())
            : std::string();
    return {cclxTimeout,
            strFormat("rank %d: comm '%s' failed: rank %d timed out after %lld ms waiting for "
                      "rank(s) %s%s%s; collectives from then on have NaN outputs and the comm is "
                      "unusable",
                      rank, name.c_str(), origin, ms, rankList(errHost[kErrOriginMissing]).c_str(),
                      waitChainOf(errHost[kErrOriginMissing]).c_str(), chain.c_str())};
  }
  if (origin == rank || origin < 0)
    return {cclxAborted, strFormat("rank %d: comm '%s' was aborted; collectives from then on have "
                                   "NaN outputs",
                                   rank, name.c_str())};
  return {cclxRemoteError,
          strFormat("rank %d: comm '%s' was aborted by rank %d; collectives from then on have NaN "
                    "outputs and the comm is unusable",
                    rank, name.c_str(), origin)};
}

std::string CudaShared::waitChainOf(uint32_t missing) const {
  std::lock_guard<std::mutex> g(chainMu);
  if (missing == 0 || missing == chainMask) return missing ? chainNote : std::string();
  uint32_t words[kMaxRanks] = {};
  {
    std::lock_guard<std::mutex> c(ctlMu);  // teardown clears ctl[]
    if (!abortStream || !abortValue || !ctl[rank]) return "";
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // this thread may be capturing
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    int prev = -1;
    (void)cudaGetDevice(&prev);
    if (prev != device) (void)cudaSetDevice(device);
    uint32_t* buf = abortValue + kWaitRead;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    for (;;) {
      bool ok = true;
      for (int r = 0; r < size && r < kMaxRanks && ok; ++r) {
        buf[r] = 0;
        ok = !ctl[r] || cudaMemcpyAsync(buf + r, ctl[r] + kCtlWaitingFor, sizeof(uint32_t),
                                        cudaMemcpyDeviceToHost, abortStream) == cudaSuccess;
      }
      ok = ok && cudaStreamSynchronize(abortStream) == cudaSuccess;
      if (!ok) (void)cudaGetLastError();  // a dead peer's memory may be gone: no note then
      for (int r = 0; r < size && r < kMaxRanks; ++r) words[r] = ok ? buf[r] : 0u;
      bool all = true;  // every rank this one waited for has said whom it waited for
      for (int r = 0; r < size && r < kMaxRanks; ++r)
        if ((missing >> r & 1u) && !words[r]) all = false;
      if (!ok || all || std::chrono::steady_clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (prev >= 0 && prev != device) (void)cudaSetDevice(prev);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
  }
  chainMask = missing;
  chainNote = waitChainNote(missing, words, size, rank);
  return chainNote;
}

void CudaShared::checkDeviceError() {
  auto [code, msg] = deviceError();
  if (code == cclxSuccess) return;
  requestAbort();  // forwards what the error words say (abortWordOf)
  abortNccl();
  throw fail(code, msg);
}

// The abort word that describes the failure the error words report, as the kernel that found it
// raised it: this rank's own timeout, mismatch or capacity error, or the first abort word a kernel
// of this rank observed. {0, 0, 0} when they report none. The missing mask is left out: the
// kernel that raised the word OR-ed it into every rank already, and a host copy would overwrite.
CudaShared::AbortWord CudaShared::abortWordOf() const {
  if (!errHost) return {};
  const uint32_t self = uint32_t(rank + 1);
  switch (errHost[kErrCode]) {
    case kErrTimeout: return {kAbortTimeout << 16 | self, 0, errHost[kErrTimeoutMs]};
    case kErrMismatch: return {kAbortMismatch << 16 | self, 0, 0};
    case kErrCapacity: return {kAbortCapacity << 16 | self, 0, 0};
    case kErrPeerAbort:
      if (errHost[kErrOrigin]) return {errHost[kErrOrigin], 0, errHost[kErrOriginTimeoutMs]};
      return {};
    default: return {};
  }
}

void CudaShared::requestAbort(uint32_t reason, uint32_t missing, uint32_t timeoutMs) {
  // A failure the kernels already reported is what every rank must learn, not "aborted by this
  // rank": once the error words hold one, a host abort forwards its word instead.
  AbortWord w{reason << 16 | uint32_t(rank + 1), missing, timeoutMs};
  if (reason == kAbortHost)
    if (const AbortWord d = abortWordOf(); d.word) w = d;
  raiseAbortWord(w);
}

void CudaShared::raiseAbortWord(const AbortWord& w) {
  if (abortRequested.exchange(true)) return;
  if (errHost) {  // spinning kernels stop and raise this word (device/fail.cuh, Waiter)
    errHost[kErrHostAbortMissing] = w.missing;
    errHost[kErrHostAbortMs] = w.timeoutMs;
    std::atomic_thread_fence(std::memory_order_release);
    errHost[kErrHostAbort] = w.word;
  }
  std::lock_guard<std::mutex> g(ctlMu);  // teardown clears ctl[] once no peer may be written
  if (!abortStream || !abortValue || !ctl[rank]) return;
  // Kernels not yet started read the abort word at entry: write it on every rank (async copies on
  // a stream of our own: nothing waits for other work; errors are ignored, a dead peer's memory
  // may be gone). Relaxed capture mode: this thread may be capturing a graph elsewhere.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  int prev = -1;
  (void)cudaGetDevice(&prev);
  if (prev != device) (void)cudaSetDevice(device);
  const uint32_t reason = w.word >> 16, missing = w.missing;
  abortValue[0] = w.word;
  abortValue[1] = missing;
  abortValue[2] = w.timeoutMs;
  const int slot = reason == kAbortTimeout ? kCtlTimeout : kCtlHost;
  for (int i = 0; i < size && i < kMaxRanks; ++i) {
    const int r = (rank + i) % size;
    if (!ctl[r]) continue;
    // The missing mask and the timeout before the word itself: the copies run in order on one
    // stream.
    if ((missing && cudaMemcpyAsync(ctl[r] + kCtlMissing, abortValue + 1, sizeof(uint32_t),
                                    cudaMemcpyHostToDevice, abortStream) != cudaSuccess) ||
        (reason == kAbortTimeout &&
         cudaMemcpyAsync(ctl[r] + kCtlTimeoutMs, abortValue + 2, sizeof(uint32_t),
                         cudaMemcpyHostToDevice, abortStream) != cudaSuccess) ||
        cudaMemcpyAsync(ctl[r] + slot, abortValue, sizeof(uint32_t), cudaMemcpyHostToDevice,
                        abortStream) != cudaSuccess)
      (void)cudaGetLastError();
  }
  if (prev >= 0 && prev != device) (void)cudaSetDevice(prev);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
}

void CudaShared::abortNccl() {
  nccl::ncclComm_t c = nullptr;
  {
    std::lock_guard<std::mutex> g(mu);
    if (!ownsComm) return;  // the application's comm: its owner aborts it
    std::swap(c, comm);
  }
  if (c) {
    nccl::ncclResult_t r = ncclLib().commAbort(c);
    if (r != nccl::ncclSuccess) CCLX_WARN("ncclCommAbort returned %d", int(r));
  }
}

cudaEvent_t CudaShared::takeEvent() {
  {
    std::lock_guard<std::mutex> g(mu);
    if (!freeEvents.empty()) {
      cudaEvent_t e = freeEvents.back();
      freeEvents.pop_back();
      return e;
    }
  }
  cudaEvent_t e;
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

EventRef CudaShared::takeEventRef(const std::shared_ptr<CudaShared>& self) {
  return EventRef(self->takeEvent(), [self](cudaEvent_t e) { self->returnEvent(e); });
}

void CudaShared::returnEvent(cudaEvent_t e) {
  std::lock_guard<std::mutex> g(mu);
  if (freeEvents.size() < 256) freeEvents.push_back(e);
  else (void)cudaEventDestroy(e);
}

DeviceGuard::DeviceGuard(int dev) {
  CCLX_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != dev) CCLX_CUDA_CHECK(cudaSetDevice(dev));
}
DeviceGuard::~DeviceGuard() {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_) (void)cudaSetDevice(prev_);
}

namespace {

class CudaWork final : public Work {
 public:
  // The pooled event goes back when the Work and the watchdog's tracking let go of it; it may be
  // re-recorded at once: a later record does not affect earlier waits.
  CudaWork(std::shared_ptr<CudaShared> sh, EventRef ev, bool captured,
           std::chrono::milliseconds timeout)
      : sh_(std::move(sh)), ev_(std::move(ev)), captured_(captured), timeout_(timeout) {}

  bool isCompleted() override {
    if (done_) return true;
    sh_->throwIfFailed();
    sh_->checkDeviceError();
    if (captured_) return true;  // graph work: completion belongs to each replay
    DeviceGuard g(sh_->device);
    cudaError_t e = cudaEventQuery(ev_.get());
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw sh_->fail(cclxCudaError, strFormat("collective failed on cuda:%d: %s", sh_->device,
                                                cudaGetErrorString(e)));
    }
    sh_->checkDeviceError();  // the kernel may have finished by giving up
    done_ = true;
    return true;
  }

  void wait(void* stream) override {
    sh_->throwIfFailed();
    sh_->checkDeviceError();
    DeviceGuard g(sh_->device);
    CCLX_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), ev_.get(), 0));
  }

  void waitBlocking(std::chrono::milliseconds timeout) override {
    if (timeout.count() <= 0) timeout = timeout_;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int polls = 0;
    while (!isCompleted()) {
      if (std::chrono::steady_clock::now() > deadline) {
        sh_->requestAbort();
        sh_->abortNccl();
        throw sh_->fail(cclxTimeout,
                        strFormat("rank %d: collective on cuda:%d did not complete within %lld ms "
                                  "(a peer never arrived or is stuck); NCCL aborted, the "
                                  "communicator is unusable",
                                  sh_->rank, sh_->device, (long long)timeout.count()));
      }
      if (++polls > 200) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<CudaShared> sh_;
  EventRef ev_;
  bool captured_;
  bool done_ = false;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<Work> makeCudaWork(std::shared_ptr<CudaShared> sh, EventRef ev, bool captured,
                                   std::chrono::milliseconds timeout) {
  return std::make_shared<CudaWork>(std::move(sh), std::move(ev), captured, timeout);
}

}  // namespace cclx
