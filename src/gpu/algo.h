// The device-algorithm interface (DDA, FP8: one algorithm per file, each answering "can I run
// these arguments?" and "launch them") and what an algorithm needs to launch: this rank's device
// facts, configuration, peer memory, per-block epoch counters and the timeout error words. The GPU
// backend owns the context; algorithms receive it by reference. Plain C++: no CUDA headers.
#pragma once

#include <cstdint>

#include "core/backend.h"
#include "core/config.h"
#include "gpu/peer_mem.h"

namespace cclx {

/// Device-local counters (uint64, zeroed at init, never peer-visible), advanced only by kernels:
/// a block reads its counter at entry and writes counter+1 before exiting, so graph replays keep
/// counting without host involvement. Index ranges per user:
enum : int {
  kCounterFlat = 0,       // [0, 128): DDA flat, one per block
  kCounterTree = 128,     // [128, 256): DDA tree, one per block
  kCounterBarrier = 256,  // [256, 384): barrier kernel
  kCounterLamport = 384,  // [384, 512): DDA Lamport, one per block
  kCounterFp8OneShot = 512,  // [512, 640): FP8 one-shot allreduce, one per CTA
  kCounterFp8 = 1024,     // [1024, 2048): FP8 collectives (free use)
  kNumCounters = 4096,
};

/// Error flag words (host-mapped, zeroed at init). A kernel that hits its deadline writes
/// kErrTimeout to word 0 and 1 to word 1 + r for every rank r it was still waiting for, then
/// __threadfence_system() and returns (never traps). The host reads them in Work/asyncError.
enum : uint32_t { kErrNone = 0, kErrTimeout = 1 };
constexpr int kErrorWords = 1 + kMaxRanks;

struct DeviceCtx {
  int rank = 0;
  int size = 1;
  int device = -1;
  int smCount = 0;
  Config cfg;
  PeerMem* peer = nullptr;            // non-null; peer->usable says whether kernels may use it
  uint64_t* counters = nullptr;       // device pointer, kNumCounters entries
  uint32_t* errorFlagDev = nullptr;   // device pointer of the host-mapped error words
  volatile uint32_t* errorFlagHost = nullptr;  // host pointer of the same words
  double timerScale = 1.0;  // device-timer ns per real ns (gpurt::timerScale; 1 with CUDA)
  bool peerUsable() const { return peer && peer->usable; }
};

class DeviceAlgo {
 public:
  virtual ~DeviceAlgo() = default;
  virtual const char* name() const = 0;
  /// True when this algorithm can run these (validated) arguments on this comm.
  virtual bool canRun(const CollArgs& args, const DeviceCtx& ctx) const = 0;
  /// Enqueues the collective on `stream` (a cudaStream_t): exactly one kernel, no host
  /// synchronization, no allocation, so it is legal inside CUDA-graph capture. Only called for
  /// arguments canRun() accepted.
  virtual void launch(const CollArgs& args, DeviceCtx& ctx, void* stream) = 0;
};

/// The collective timeout of one call, in nanoseconds.
inline uint64_t timeoutNs(const CollArgs& a) {
  auto ms = a.opts.timeout.count();
  return ms <= 0 ? 600ull * 1000000000ull : uint64_t(ms) * 1000000ull;
}
/// The same timeout as kernels take it: in nanoseconds of the device timer (dev::globalTimerNs).
inline uint64_t timeoutNs(const CollArgs& a, const DeviceCtx& ctx) {
  const uint64_t ns = timeoutNs(a);
  return ctx.timerScale == 1.0 ? ns : uint64_t(double(ns) * ctx.timerScale);
}

}  // namespace cclx
