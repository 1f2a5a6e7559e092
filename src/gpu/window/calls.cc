// The stream handling of GPU window calls (gpu/window/window.h): the same stream semantics as
// the collectives (docs/design/gpu-backend.md), plus the eager ordering rules of windows.
#include "gpu/backend.h"
#include "gpu/runtime.h"
#include "gpu/window/window.h"

namespace cclx {

namespace {
cudaStream_t S(void* p) { return static_cast<cudaStream_t>(p); }
cudaEvent_t E(void* p) { return static_cast<cudaEvent_t>(p); }
}  // namespace

WinCalls::WinCalls(CudaBackend& b, int size) : b_(b), lastPut_(size_t(size)), lastWait_(size_t(size)) {
  DeviceGuard g(b.device());
  cudaStream_t s = nullptr;
  CCLX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  internal_ = s;
  cudaEvent_t e = nullptr;
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  fork_ = e;
}

WinCalls::~WinCalls() {
  DeviceGuard g(b_.device());
  for (std::vector<Last>& v : lastPut_)
    for (Last& l : v)
      if (l.event) (void)cudaEventDestroy(E(l.event));
  for (auto* v : {&lastWait_, &lastOnStream_})
    for (Last& l : *v)
      if (l.event) (void)cudaEventDestroy(E(l.event));
  if (fork_) (void)cudaEventDestroy(E(fork_));
  if (internal_) (void)cudaStreamDestroy(S(internal_));
}

WinCalls::Call::~Call() {
  if (captureMode >= 0) {
    cudaStreamCaptureMode m = static_cast<cudaStreamCaptureMode>(captureMode);
    (void)cudaThreadExchangeStreamCaptureMode(&m);
  }
  int cur = -1;
  if (prevDevice >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prevDevice)
    (void)cudaSetDevice(prevDevice);
}

WinCalls::Call WinCalls::begin(const CollOptions& o) {
  Call c;
  c.lock = std::unique_lock<std::mutex>(mu_);
  const std::shared_ptr<CudaShared>& sh = b_.shared();
  sh->throwIfFailed();
  sh->checkDeviceError();
  CCLX_CUDA_CHECK(cudaGetDevice(&c.prevDevice));
  if (c.prevDevice != b_.device()) CCLX_CUDA_CHECK(cudaSetDevice(b_.device()));
  cudaStream_t user = S(o.stream);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CCLX_CUDA_CHECK(cudaStreamIsCapturing(user, &cs));
  c.capturing = cs != cudaStreamCaptureStatusNone;
  if (c.capturing) {
    // Pointer queries and event bookkeeping are host-only, but a global-mode capture may count
    // them as unsafe: this thread runs the call in relaxed mode (restored by ~Call).
    cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    CCLX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m));
    c.captureMode = int(m);
  }
  c.stream = user;
  if (o.async) {
    CCLX_CUDA_CHECK(cudaEventRecord(E(fork_), user));
    CCLX_CUDA_CHECK(cudaStreamWaitEvent(S(internal_), E(fork_), 0));
    c.stream = internal_;
  }
  return c;
}

std::shared_ptr<Work> WinCalls::finish(const Call& c, const CollOptions& o) {
  record(c, on(lastOnStream_, c.stream));
  if (!o.async && c.capturing) return completedWork();
  const std::shared_ptr<CudaShared>& sh = b_.shared();
  EventRef ev = sh->takeEventRef(sh);
  CCLX_CUDA_CHECK(cudaEventRecord(ev.get(), S(c.stream)));
  return makeCudaWork(sh, std::move(ev), c.capturing, o.timeout);
}

WinCalls::Last& WinCalls::on(std::vector<Last>& v, void* stream) {
  for (Last& x : v)
    if (x.stream == stream) return x;
  Last& l = v.emplace_back();
  l.stream = stream;
  return l;
}

// Puts to one destination may be spread over several streams (async puts run on the internal
// stream): a signal waits for the last put on each of them.
void WinCalls::orderAfterPuts(const Call& c, int dst) {
  for (const Last& l : lastPut_[size_t(dst)]) orderAfter(c, l);
}

void WinCalls::putDone(const Call& c, int dst) {
  if (!c.capturing) record(c, on(lastPut_[size_t(dst)], c.stream));
}

void WinCalls::orderAfter(const Call& c, const Last& l) {
  if (c.capturing || !l.event || l.stream == c.stream) return;
  CCLX_CUDA_CHECK(cudaStreamWaitEvent(S(c.stream), E(l.event), 0));
}

void WinCalls::record(const Call& c, Last& l) {
  if (c.capturing) return;
  if (!l.event) {
    cudaEvent_t e = nullptr;
    CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    l.event = e;
  }
  CCLX_CUDA_CHECK(cudaEventRecord(E(l.event), S(c.stream)));
  l.stream = c.stream;
}

void WinCalls::drain() {
  std::lock_guard<std::mutex> g(mu_);
  DeviceGuard d(b_.device());
  for (const Last& l : lastOnStream_)
    if (l.event) CCLX_CUDA_CHECK(cudaEventSynchronize(E(l.event)));
}

}  // namespace cclx
