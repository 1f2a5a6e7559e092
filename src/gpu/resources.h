// Owning handles of GPU runtime objects: each releases its object when destroyed, so a setup that
// throws half-way frees what it made. leak() forgets the object instead (teardown after a
// failure: a kernel may still use the memory, and freeing it would wait for the whole device or
// let a later allocation receive a peer's late writes) and reports its size for the log line.
// Also stream-ordered temporaries (StreamTemp) and the attribution of kernel launch errors
// (LaunchCheck).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>
#include <utility>

#include "gpu/runtime.h"

namespace cclx {
namespace gpures {

template <typename T, typename Release>
class Owned {
 public:
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : v_(std::exchange(o.v_, T{})), bytes_(std::exchange(o.bytes_, 0)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      v_ = std::exchange(o.v_, T{});
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~Owned() { reset(); }

  T get() const { return v_; }
  explicit operator bool() const { return v_ != T{}; }
  size_t bytes() const { return bytes_; }
  /// Releases the object now (errors ignored: a teardown path).
  void reset() {
    if (v_ != T{}) Release()(v_);
    v_ = T{};
    bytes_ = 0;
  }
  /// Forgets the object without releasing it; returns its size in bytes (0 for streams/events).
  size_t leak() {
    v_ = T{};
    return std::exchange(bytes_, 0);
  }
  /// Takes ownership of `v` (`bytes` for the leak count).
  void adopt(T v, size_t bytes = 0) {
    reset();
    v_ = v;
    bytes_ = bytes;
  }

 private:
  T v_{};
  size_t bytes_ = 0;
};

struct FreeDevice {
  void operator()(void* p) const { (void)cudaFree(p); }
};
struct FreePinned {
  void operator()(void* p) const { (void)cudaFreeHost(p); }
};
struct DestroyStream {
  void operator()(cudaStream_t s) const { (void)cudaStreamDestroy(s); }
};
struct DestroyEvent {
  void operator()(cudaEvent_t e) const { (void)cudaEventDestroy(e); }
};

using DeviceMem = Owned<void*, FreeDevice>;   // cudaMalloc (or gpurt::mallocPeerVisible)
using PinnedMem = Owned<void*, FreePinned>;   // cudaHostAlloc
using Stream = Owned<cudaStream_t, DestroyStream>;
using Event = Owned<cudaEvent_t, DestroyEvent>;

/// cudaMalloc of `bytes` into `m` (throws cclxCudaError).
inline void allocDevice(DeviceMem& m, size_t bytes) {
  void* p = nullptr;
  CCLX_CUDA_CHECK(cudaMalloc(&p, bytes));
  m.adopt(p, bytes);
}
/// cudaHostAlloc of `bytes` with `flags` into `m`.
inline void allocPinned(PinnedMem& m, size_t bytes, unsigned flags) {
  void* p = nullptr;
  CCLX_CUDA_CHECK(cudaHostAlloc(&p, bytes, flags));
  m.adopt(p, bytes);
}
/// A non-blocking stream.
inline void createStream(Stream& s) {
  cudaStream_t v = nullptr;
  CCLX_CUDA_CHECK(cudaStreamCreateWithFlags(&v, cudaStreamNonBlocking));
  s.adopt(v);
}
/// An event without timing.
inline void createEvent(Event& e) {
  cudaEvent_t v = nullptr;
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&v, cudaEventDisableTiming));
  e.adopt(v);
}

/// A stream-ordered temporary (cudaMallocAsync on `s`; legal inside graph capture), freed on `s`
/// on every exit path: a launch that throws after the allocation frees it too (errors of that
/// free ignored: the first error is the one that propagates). The free follows, in stream order,
/// whatever was enqueued on `s` before it.
class StreamTemp {
 public:
  StreamTemp(size_t bytes, cudaStream_t s) : s_(s) { CCLX_CUDA_CHECK(cudaMallocAsync(&p_, bytes, s)); }
  StreamTemp(const StreamTemp&) = delete;
  StreamTemp& operator=(const StreamTemp&) = delete;
  ~StreamTemp() {
    if (p_ && cudaFreeAsync(p_, s_) != cudaSuccess) (void)cudaGetLastError();
  }
  void* get() const { return p_; }
  /// The normal path: frees now (cudaFreeAsync on the stream), throwing its error.
  void free() {
    void* p = std::exchange(p_, nullptr);
    CCLX_CUDA_CHECK(cudaFreeAsync(p, s_));
  }

 private:
  void* p_ = nullptr;
  cudaStream_t s_;
};

}  // namespace gpures

namespace gpurt {

using Deadline = std::chrono::steady_clock::time_point;

/// now + t, or never for kInfiniteTimeout (and beyond) or a non-positive t.
inline Deadline deadlineAfter(std::chrono::milliseconds t) {
  if (t >= kInfiniteTimeout || t.count() <= 0) return Deadline::max();
  return std::chrono::steady_clock::now() + t;
}

/// Polls until `query()` (cudaStreamQuery / cudaEventQuery of one object) reports completion:
/// true; false when `deadline` passed first or `*stop` became true (the work may still be
/// pending). Waits for nothing else on the device. Throws a runtime error the query reports.
template <typename Query>
bool pollUntil(Query query, Deadline deadline, const std::atomic<bool>* stop = nullptr) {
  for (int polls = 0;; ++polls) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      CCLX_THROW(cclxCudaError, "waiting for the comm's work: %s (%s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
    }
    if (std::chrono::steady_clock::now() > deadline || (stop && stop->load())) return false;
    if (polls > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}
inline bool waitStream(cudaStream_t s, Deadline deadline, const std::atomic<bool>* stop = nullptr) {
  return pollUntil([s] { return cudaStreamQuery(s); }, deadline, stop);
}
inline bool waitEvent(cudaEvent_t e, Deadline deadline, const std::atomic<bool>* stop = nullptr) {
  return pollUntil([e] { return cudaEventQuery(e); }, deadline, stop);
}

/// Kernel launch errors, attributed to their launch: construct before the launch(es), call
/// check() after. An error already pending on this thread (an unrelated failure of the
/// application) is neither reported as the launch's nor cleared; an error the launch produced is
/// cleared and thrown. (When the launch fails while another error was pending, the runtime keeps
/// only the launch's: the message names the earlier one too.)
class LaunchCheck {
 public:
  LaunchCheck() : pre_(cudaPeekAtLastError()) {}
  void check(const char* what) const {
    const cudaError_t e = cudaPeekAtLastError();
    if (e == cudaSuccess || e == pre_) return;
    (void)cudaGetLastError();
    if (pre_ != cudaSuccess)
      CCLX_THROW(cclxCudaError, "%s launch failed: %s (%s; an earlier error was pending on this "
                 "thread: %s)", what, cudaGetErrorName(e), cudaGetErrorString(e),
                 cudaGetErrorName(pre_));
    CCLX_THROW(cclxCudaError, "%s launch failed: %s (%s)", what, cudaGetErrorName(e),
               cudaGetErrorString(e));
  }

 private:
  cudaError_t pre_;
};

}  // namespace gpurt

/// Puts the calling thread in relaxed stream-capture mode for its lifetime (when `on`): its host
/// calls (event queries, pointer attributes) then neither fail nor invalidate a capture that this
/// or another thread runs in global mode (torch.cuda.graph's default). The enqueuing thread uses
/// it while its caller captures; the watchdog thread for every poll.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(bool on) : on_(on) {
    if (on_) CCLX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_));
  }
  ~RelaxedCapture() {
    if (on_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  bool on_;
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace cclx
