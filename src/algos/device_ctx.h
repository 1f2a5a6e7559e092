// What a device algorithm (DDA, FP8) needs to launch: this rank's device facts, configuration,
// peer memory, per-block epoch counters and the timeout error flag. Owned by the CUDA backend;
// algorithms receive it by reference in canRun()/launch().
#pragma once

#include <cstdint>

#include "core/config.h"
#include "transport/ipc.h"

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
  bool peerUsable() const { return peer && peer->usable; }
};

/// The collective timeout of one call, in nanoseconds, as kernels take it.
inline uint64_t timeoutNs(const CollArgs& a) {
  auto ms = a.opts.timeout.count();
  return ms <= 0 ? 600ull * 1000000000ull : uint64_t(ms) * 1000000ull;
}

}  // namespace cclx
