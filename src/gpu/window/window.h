// One-sided windows of CUDA comms (core/window/window.h): the device kernels' parameters and launchers
// (kernels.cu), the stream handling every GPU window call shares (calls.cc), and the two
// transports: CUDA IPC between the ranks of one host (ipc.cc) and NCCL's one-sided API across
// hosts (gpu/nccl/window.cc). Plain C++: no CUDA headers needed by callers.
//
// Signal slots (SignalRegion::kWindow of every rank's peer-visible signal area, 1 KiB each, one
// per live window, the same slot on every rank): counts[src] at byte src * 64 (the number of
// signals rank src has sent to this rank through this window; only src adds to it, with a
// release-ordered system-scope atomic add), waited[src] at byte 512 + src * 8 (signals from src
// that this rank's waits consumed; only this rank's wait kernel writes it). Both only grow, and
// both live on the device, so graph replays keep counting without the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/window/window.h"
#include "gpu/algo.h"

namespace cclx {

class CudaBackend;

constexpr size_t kWinSlotBytes = 1024;
constexpr size_t kWinCountStride = 64;
constexpr size_t kWinWaitedOffset = 512;

struct WinPutParams {
  FailParams fail;
  const char* src;
  char* dst;  // the destination's window as mapped here, offset included
  size_t bytes;
};
struct WinSignalParams {
  FailParams fail;
  uint64_t* count;  // counts[this rank] in the destination's slot (peer memory)
};
struct WinWaitParams {
  FailParams fail;
  const uint64_t* count;  // counts[src] in this rank's slot
  uint64_t* waited;       // waited[src] in this rank's slot
  char* window;           // this rank's window (poisoned when the wait fails)
  size_t bytes;
  int src;
};

/// Kernels (kernels.cu; their synchronization contract is written above each).
void launchWinPut(const WinPutParams& p, int blocks, void* stream);
void launchWinSignal(const WinSignalParams& p, void* stream);
void launchWinWait(const WinWaitParams& p, void* stream);
/// waited[r] = counts[r] for every rank r < n of a slot (a reused slot starts from its counts).
void launchWinBaseline(char* slot, int n, void* stream);

/// The stream handling of one GPU window call, as the collectives do it (gpu/backend.h): the
/// comm's failure checked first; async: the window's internal stream waits for the caller's and
/// the call runs there; the Work is an event after it (a completed Work for synchronous calls
/// inside CUDA-graph capture). Eager calls also record what the ordering rules below need.
class WinCalls {
 public:
  WinCalls(CudaBackend& b, int size);
  ~WinCalls();
  /// One call in progress: holds the window's lock, the comm's device and (inside capture) this
  /// thread's relaxed capture mode until it is destroyed.
  struct Call {
    void* stream = nullptr;  // where the operation goes
    bool capturing = false;
    std::unique_lock<std::mutex> lock;
    int prevDevice = -1;
    int captureMode = -1;  // the thread's capture mode to restore (-1: unchanged)
    Call() = default;
    Call(Call&&) = default;
    ~Call();
  };
  /// Starts a call: checks the comm, sets the device, forks for async.
  Call begin(const CollOptions& o);
  /// The Work of a call begun with begin().
  std::shared_ptr<Work> finish(const Call& c, const CollOptions& o);

  /// Eager ordering across streams (inside capture the graph's stream order is the order):
  /// signal(dst) runs after every earlier put to dst, and waits on one source run in call order
  /// (each reads and advances that source's expected value on the device).
  void orderAfterPuts(const Call& c, int dst);
  void putDone(const Call& c, int dst);
  void orderAfterWaits(const Call& c, int src) { orderAfter(c, lastWait_[size_t(src)]); }
  void waitDone(const Call& c, int src) { record(c, lastWait_[size_t(src)]); }
  /// Blocks until every eager call so far has completed (deregistration, teardown).
  void drain();
  /// The window's own stream (async calls, setup work).
  void* internalStream() const { return internal_; }

 private:
  struct Last {
    void* stream = nullptr;
    void* event = nullptr;  // cudaEvent_t
  };
  void orderAfter(const Call& c, const Last& l);
  void record(const Call& c, Last& l);
  CudaBackend& b_;
  std::mutex mu_;
  void* internal_ = nullptr;  // cudaStream_t
  void* fork_ = nullptr;      // cudaEvent_t
  static Last& on(std::vector<Last>& v, void* stream);
  std::vector<std::vector<Last>> lastPut_;  // per destination: the last put on every stream
  std::vector<Last> lastWait_;              // per source: the last wait
  std::vector<Last> lastOnStream_;  // the last call on every stream used (drain)
};

/// Device windows (devwin.cc), on `device` with this thread's capture mode relaxed: `bytes` of
/// zeroed device memory (cudaMalloc: CUDA IPC exports it), the handle copied to device memory,
/// their release, and a wait for every operation of this process on the device.
void* devWinAllocZeroed(int device, size_t bytes, void* stream);
void* devWinPlace(int device, const DeviceWindowHandle& h, void* stream);
void devWinFree(int device, void* p);
void devWinQuiesce(int device);

/// Collective: a window over CUDA IPC in signal slot `slot` (peer memory must be usable).
std::unique_ptr<WinImpl> makeIpcWindow(CudaBackend& b, int slot);
/// Collective: a window over NCCL's one-sided API, or cclxUnsupported saying what is missing.
std::unique_ptr<WinImpl> makeNcclWindow(CudaBackend& b, const std::string& whyNotIpc);

}  // namespace cclx
