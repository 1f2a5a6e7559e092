// The data-as-flag ("Lamport") protocol on the device, written once for the kernels that use it:
// the DDA Lamport allreduce (dda/lamport.cu), the FP8 one-shot allreduce (fp8/oneshot.cu) and the
// fused allreduce + RMSNorm (fused/oneshot.cu, fused/twoshot.cu).
// What "empty" means for a payload is the caller's: core/elements/lamport.h for float elements, the FP8
// codec's never-0xFF codes for FP8 units.
//
// Inboxes. Rank r's region (a StagingRegion filled with 0xFF bytes at init) holds inboxes
// [parity][src] for every src != r, `slotBytes` each. Rank src pushes into inbox [par][src] of
// every peer with volatile stores; the owner polls its inboxes until nothing in the piece it
// needs is empty, reads it, and refills it with ones.
//
// Calls. Every block of every call reads its call counter e at entry (lamportBegin) and writes
// e + 1 at exit (the advance of dev::peerCall, device/peer_kernel.cuh, on every path): the grid is the same for every call, so all blocks of all ranks count the same
// calls and use parity e & 1. Inbox reuse: a peer writes parity p again in call e + 2 only after
// its call e + 1 read everything this rank pushed in call e + 1, which this rank pushed after its
// call-e kernel, refills included, had finished (peer kernels are stream-ordered on every rank).
// So a reader never sees a value from an earlier call, and there is no flag, fence or barrier.
// Counters advance on the device, so CUDA-graph replays keep counting.
//
// Schedule (teamRounds). Round r of block b covers the units [(r * gridDim + b) * R, + R). The
// first P threads (whole warps, the producers) push round after round and count the rounds in
// shared memory after a barrier of their own (blockFlagSet); the other threads (the consumers)
// take a round once it has been pushed (blockFlagGet). In place, a unit is thus read from `send`
// (push) before the consumer that writes its output starts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/device/prims.cuh"
#include "core/elements/lamport.h"
#include "gpu/peer_mem.h"

namespace cclx {
namespace dev {

/// Inbox [par][src] in rank `owner`'s region. P (a kernel's parameters) has `char*
/// region[kMaxRanks]` (every rank's region base) and `size_t slotBytes`; size() gives the world
/// size.
template <class P, class Size>
__device__ __forceinline__ char* inbox(const P& p, int owner, int src, int par, Size&& size) {
  const int slot = src < owner ? src : src - 1;
  return p.region[owner] + (size_t(par) * (size() - 1) + slot) * p.slotBytes;
}

/// Host: bytes of one inbox [parity][src] of region `r` with `size` ranks (a multiple of `align`,
/// a power of two).
inline size_t inboxBytes(const PeerMem& pm, StagingRegion r, int size, size_t align) {
  return (pm.regionBytes(r) / (2 * size_t(size - 1))) & ~(align - 1);
}

/// Start of a call of a data-as-flag kernel: returns this block's call counter e (its inboxes
/// have parity e & 1) and zeroes `pushed` (the producers' round count, in shared memory) before
/// any thread uses it. P (the kernel's parameters) has `uint64_t* counters`, one per block.
template <class P>
__device__ __forceinline__ uint64_t lamportBegin(const P& p, uint32_t* pushed) {
  const uint64_t epoch = p.counters[blockIdx.x];
  if (threadIdx.x == 0) *pushed = 0;
  namedBarriersInit();  // teamRounds' producer barrier (HIP: emulated in shared memory)
  __syncthreads();
  return epoch;
}

/// Producer / consumer rounds over `total` units, R per block and round. Threads [0, P) push round
/// after round: units v = base + t, + pushStep, ... below hi (below hi + (t & 31) when kWarpWide:
/// every lane of a warp takes part, for warp-wide shuffles) with push(v, hi). The other C threads
/// consume a round once it was pushed: units base + (t - P), + consumeStep(C), ... with
/// consume(v, C, hi) (false: stop, e.g. on a timeout). kSkipIdle: rounds that start past `total`
/// end the loop (otherwise they run empty).
template <bool kSkipIdle, bool kWarpWide, class Push, class ConsumeStep, class Consume>
__device__ __forceinline__ void teamRounds(size_t total, int R, int P, size_t pushStep,
                                           uint32_t* pushed, Push&& push,
                                           ConsumeStep&& consumeStep, Consume&& consume) {
  const int t = int(threadIdx.x);
  const size_t span = size_t(gridDim.x) * R;
  const size_t rounds = (total + span - 1) / span;
  if (t < P) {
    for (size_t r = 0; r < rounds; ++r) {
      const size_t base = r * span + size_t(blockIdx.x) * R;
      if (kSkipIdle && base >= total) break;
      const size_t hi = min(base + R, total);
      for (size_t v = base + t; v < hi + (kWarpWide ? (t & 31) : 0); v += pushStep) push(v, hi);
      barSync<1>(P);  // the producers only
      if (t == 0) blockFlagSet(pushed, uint32_t(r + 1));
    }
    return;
  }
  const int C = int(blockDim.x) - P, ct = t - P;
  for (size_t r = 0; r < rounds; ++r) {
    // A skipped round is never published: check for one before waiting.
    if constexpr (!kSkipIdle) {
      while (blockFlagGet(pushed) <= r) {
      }
    }
    const size_t base = r * span + size_t(blockIdx.x) * R;
    if (kSkipIdle && base >= total) break;
    const size_t hi = min(base + R, total);
    if constexpr (kSkipIdle) {
      while (blockFlagGet(pushed) <= r) {
      }
    }
    for (size_t v = base + ct; v < hi + (kWarpWide ? (ct & 31) : 0); v += consumeStep(C))
      if (!consume(v, C, hi)) return;
  }
}

/// Polls the 16-byte unit at `src` (an inbox of float elements of S bytes each) until none of its
/// elements is empty, asking `wait.again(peer)` (a Waiter) between polls. False: the wait stopped
/// (abort, deadline; recorded by the Waiter) and `x` is not a value.
template <int S, class W>
__device__ __forceinline__ bool takeUnit16(const char* src, W& wait, int peer, V16& x) {
  x = ldVolatile16(src);
  while (lamport::hasEmpty<S>(x.lo) || lamport::hasEmpty<S>(x.hi)) {
    if (!wait.again(peer)) return false;
    x = ldVolatile16(src);
  }
  return true;
}

}  // namespace dev
}  // namespace cclx
