// The device-algorithm interface (DDA, FP8: one algorithm per file, each answering "can I run
// these arguments?" and "launch them"; its factory, std::unique_ptr<DeviceAlgo> make...(), is
// named by its row of the algorithm catalogue, core/select/algorithms.def) and what an
// algorithm needs to launch: this rank's device facts, configuration, peer memory, per-block
// epoch counters and the timeout error words. The GPU backend owns the context; algorithms
// receive it by reference. Plain C++: no CUDA headers.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/comm/backend.h"
#include "core/settings/config.h"
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
  kCounterFused = 640,    // [640, 768): fused allreduce + RMSNorm (one-shot and two-shot share it)
  kCounterFp8 = 1024,     // [1024, 2048): FP8 collectives (free use)
  kCounterXchg = 2048,    // [2048, 4096): DDA pipelined exchange: chunks sent [peer][block], then
                          // chunks received [peer][block] (kMaxRanks * kMaxBlocks each)
  kNumCounters = 4096,
};

/// Error words (host-mapped, zeroed at init): what this rank's kernels observed, read by the host
/// (Work, asyncError, the watchdog). Layout (uint32 indices):
///   [kErrCode]            kErrNone, kErrTimeout (a kernel of this rank hit its deadline),
///                         kErrPeerAbort (a kernel found the comm's abort word raised by a peer,
///                         or by this rank's host) or kErrMismatch (a peer sent a different
///                         number of bytes than this rank expected: all-to-all-v counts) or
///                         kErrCapacity (this rank's device split sizes are negative or sum
///                         beyond its buffers: all_to_all_v_device)
///   [kErrMissing + r]     1: rank r never arrived (this rank's own timeouts), or sent the
///                         mismatching message, or (kErrCapacity) is this rank
///   [kErrOrigin]          the abort word a kernel found (kAbort* << 16 | origin rank + 1)
///   [kErrOriginMissing]   the origin's missing-rank mask (bit r: rank r)
///   [kErrHostAbort]       written by the host (abort(), the watchdog): the abort word that spinning
///                         kernels raise on every rank before they stop (kAbort* << 16 | origin
///                         + 1: the host's own abort, or a failure this rank learnt of first, so
///                         that a forwarded abort never hides the first failure's reason)
///   [kErrTimeoutMs]       the timeout (ms) of this rank's call that hit its deadline (kErrTimeout)
///   [kErrOriginTimeoutMs] the origin's timeout (ms) when the abort word is a timeout; 0: unknown
///   [kErrWaitingFor + r]  1: a kernel of this rank was waiting for rank r when it found the abort
///                         word raised (a peer that timed out waiting for this rank was in fact
///                         waiting behind rank r: the messages name r too)
///   [kErrHostAbortMissing], [kErrHostAbortMs]  the missing-rank mask and timeout (ms) of the
///                         abort word the host asks kernels to raise (written before kErrHostAbort)
/// Kernels never trap; they record, stop, poison their output and return (device/fail.cuh).
enum : uint32_t { kErrNone = 0, kErrTimeout = 1, kErrPeerAbort = 2, kErrMismatch = 3, kErrCapacity = 4 };
enum : int {
  kErrCode = 0,
  kErrMissing = 1,
  kErrOrigin = 1 + kMaxRanks,
  kErrOriginMissing = 2 + kMaxRanks,
  kErrHostAbort = 3 + kMaxRanks,
  kErrTimeoutMs = 4 + kMaxRanks,
  kErrOriginTimeoutMs = 5 + kMaxRanks,
  kErrWaitingFor = 6 + kMaxRanks,
  kErrHostAbortMissing = 6 + 2 * kMaxRanks,
  kErrHostAbortMs = 7 + 2 * kMaxRanks,
  kErrorWords = 8 + 2 * kMaxRanks,
};
/// Reasons carried in the abort word (bits 16..23; bits 0..15 hold origin rank + 1).
enum : uint32_t { kAbortTimeout = 1, kAbortHost = 2, kAbortMismatch = 3, kAbortCapacity = 4 };
/// The control words of a rank (SignalRegion::kControl, uint32 indices; device/fail.cuh);
/// kCtlTimeoutMs: the timeout (ms) of the rank that raised kCtlTimeout, written before it;
/// kCtlWaitingFor: in rank r's words only, the ranks r's kernels were waiting for when their waits
/// stopped (a timeout or an abort seen), read by peers to name the end of a chain of waits
/// (core/failure/wait_chain.h).
enum : int { kCtlTimeout = 0, kCtlHost = 1, kCtlMissing = 2, kCtlTimeoutMs = 3, kCtlWaitingFor = 4 };

/// What every peer-memory kernel needs to honour the failure model (device/fail.cuh), by value in
/// its parameters: the comm's control words on every rank (SignalRegion::kControl, kCtl*), this
/// rank's error words, the call's timeout.
struct FailParams {
  uint32_t* ctl[kMaxRanks];  // ctl[r]: rank r's control words (peer-visible device memory)
  uint32_t* err;             // this rank's host-mapped error words (kErrorWords)
  uint64_t timeoutNs;        // device-timer ns from kernel start; 0 = no deadline (abort only)
  uint32_t timeoutMs;        // the same timeout in ms, for the error words (0 = none)
  int rank, size;
};

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

/// The call's timeout in nanoseconds as kernels take it: 0 (no deadline: the kernel waits until
/// it arrives or the comm is aborted) when the timeout is infinite (kInfiniteTimeout or beyond;
/// docs/design/failure.md).
inline uint64_t timeoutNs(const CollArgs& a) {
  const auto ms = a.opts.timeout.count();
  return ms <= 0 || ms >= kInfiniteTimeout.count() ? 0 : uint64_t(ms) * 1000000ull;
}
/// The same timeout in nanoseconds of the device timer (dev::globalTimerNs); 0 = none.
inline uint64_t timeoutNs(const CollArgs& a, const DeviceCtx& ctx) {
  const uint64_t ns = timeoutNs(a);
  return ctx.timerScale == 1.0 || ns == 0 ? ns : uint64_t(double(ns) * ctx.timerScale);
}
/// FailParams of a call (every rank's control words, the error words, the timeout).
inline FailParams failParams(const CollArgs& a, const DeviceCtx& ctx) {
  FailParams f{};
  for (int r = 0; r < ctx.size && r < kMaxRanks; ++r)
    f.ctl[r] = reinterpret_cast<uint32_t*>(ctx.peer->signalRegion(r, SignalRegion::kControl));
  f.err = ctx.errorFlagDev;
  f.timeoutNs = timeoutNs(a, ctx);
  f.timeoutMs = f.timeoutNs ? uint32_t(std::min<long long>(a.opts.timeout.count(), 0xFFFFFFFFll)) : 0u;
  f.rank = ctx.rank;
  f.size = ctx.size;
  return f;
}

class DeviceAlgo {
 public:
  virtual ~DeviceAlgo() = default;
  /// Unused: an algorithm is named by its catalogue row (core/select/algorithms.def, algoName).
  virtual const char* name() const { return nullptr; }
  /// True when this algorithm can run these (validated) arguments on this comm.
  virtual bool canRun(const CollArgs& args, const DeviceCtx& ctx) const = 0;
  /// The staging regions (regionBit of StagingRegion) a launch of these arguments uses; the
  /// backend allocates them (peerMemGrow) before the first such launch.
  virtual uint32_t regions(const CollArgs& args) const = 0;
  /// Enqueues the collective on `stream` (a cudaStream_t): exactly one kernel, no host
  /// synchronization, no allocation, so it is legal inside CUDA-graph capture. Only called for
  /// arguments canRun() accepted.
  virtual void launch(const CollArgs& args, DeviceCtx& ctx, void* stream) = 0;
};

}  // namespace cclx
