// The failure model of every peer-memory kernel, written once (docs/design/failure.md).
//
// Each comm has a sticky abort word in every rank's control words (SignalRegion::kControl,
// peer-visible device memory; FailParams in gpu/algo.h): two 32-bit words, [kCtlTimeout] raised by
// a kernel whose deadline passed (with the missing-rank mask in [kCtlMissing] and that call's
// timeout in [kCtlTimeoutMs]) and [kCtlHost]
// raised for an abort the host asked for (abort(), the watchdog, a Work's timeout: by the host's
// own copies, or by a kernel that finds the host's request kErrHostAbort). Two words, so that an
// abort never hides the timeout that caused it. They are 0 while the comm is healthy and never
// reset: a new comm gets new memory. "The abort word is raised" means either is non-zero.
//
// Contract for a kernel (every block, all threads; steps 1 and 3 and the counter advance are
// written once as dev::peerCall, device/peer_kernel.cuh, which every peer kernel runs):
//  1. At entry, before pushing anything to a peer: `if (dev::abortedAtEntry(p.fail))` (block-uniform)
//     poison its share of the output, advance its epoch / call counters exactly as a completed call
//     would, and return.
//  2. Every spin loop polls through a dev::Waiter: `while (!ready) if (!w.again(peer)) -> stop`.
//     again() returns false once the abort word is raised or the host asked to abort (recorded in
//     the error words) or the deadline passed (then the abort word is raised on every rank, the
//     missing peer recorded).
//  3. A block in which any thread stopped poisons the whole output (dev::poison) and still
//     advances its counters; it never consumes anything afterwards.
// Why this never yields a wrong value: a rank pushes data of call e only if its abort word was
// clear at the start of call e, which implies its call e - 1 completed every step, refills and
// flags included (a kernel that stops raises the abort word before it returns, and the next
// kernel of the rank reads it at entry). So the slot-reuse arguments of the protocols hold for
// every push that happens; a consumer either finds the data of its own call or stops. Outputs are
// exact or all-ones bytes (a NaN in every floating-point type; integer outputs are undefined).
#pragma once

#include <cstdint>

#include "gpu/algo.h"
#include "gpu/device/prims.cuh"

namespace cclx {
namespace dev {

/// Control word i (kCtl*) of rank r.
__device__ __forceinline__ char* ctlWord(const FailParams& f, int r, int i) {
  return reinterpret_cast<char*>(f.ctl[r] + i);
}

/// This rank's abort word: non-zero once raised (either word; the two loads are in flight
/// together).
__device__ __forceinline__ uint32_t abortWord(const FailParams& f) {
  const uint32_t t = ldVolatile4(ctlWord(f, f.rank, kCtlTimeout));
  const uint32_t h = ldVolatile4(ctlWord(f, f.rank, kCtlHost));
  return t | h;
}

/// Copies what the abort word says into this rank's error words (once: the first observation),
/// the timeout word before the host's.
__device__ __forceinline__ void noteAbort(const FailParams& f) {
  volatile uint32_t* e = f.err;
  const uint32_t t = ldVolatile4(ctlWord(f, f.rank, kCtlTimeout));
  if (e[kErrOrigin] == 0 || (t != 0 && (e[kErrOrigin] >> 16) != kAbortTimeout)) {
    e[kErrOriginMissing] = ldVolatile4(ctlWord(f, f.rank, kCtlMissing));
    if (t != 0) e[kErrOriginTimeoutMs] = ldVolatile4(ctlWord(f, f.rank, kCtlTimeoutMs));
    e[kErrOrigin] = t != 0 ? t : ldVolatile4(ctlWord(f, f.rank, kCtlHost));
  }
  if (e[kErrCode] == kErrNone) e[kErrCode] = kErrPeerAbort;
  fenceSystem();
}

/// Raises the abort word on every rank (this one first): reason kAbortTimeout (with `missing`, a
/// rank mask OR-ed into every rank's kCtlMissing, so blocks or ranks that time out waiting for
/// different peers name them all, and this call's timeout in kCtlTimeoutMs) or another kAbort*.
/// raiseAbortWord raises a given word (kAbort* << 16 | origin rank + 1) with the origin's
/// timeout: the host's request, which may forward a failure another rank raised first.
__device__ __forceinline__ void raiseAbortWord(const FailParams& f, uint32_t word, uint32_t missing,
                                               uint32_t timeoutMs) {
  const bool timeout = (word >> 16) == kAbortTimeout;
  const int slot = timeout ? kCtlTimeout : kCtlHost;
  for (int i = 0; i < f.size; ++i) {
    const int r = (f.rank + i) % f.size;
    if (missing) atomOrRelaxedSys4(reinterpret_cast<uint32_t*>(ctlWord(f, r, kCtlMissing)), missing);
    if (timeout) stVolatile4(ctlWord(f, r, kCtlTimeoutMs), timeoutMs);
    fenceSystem();
    stVolatile4(ctlWord(f, r, slot), word);
  }
  fenceSystem();
}
__device__ __forceinline__ void raiseAbort(const FailParams& f, uint32_t reason, uint32_t missing) {
  raiseAbortWord(f, reason << 16 | uint32_t(f.rank + 1), missing, f.timeoutMs);
}

/// A deadline `timeoutNs` after now on the device timer; never for timeoutNs == 0.
__device__ __forceinline__ uint64_t deadlineAfter(uint64_t timeoutNs) {
  return timeoutNs ? globalTimerNs() + timeoutNs : ~uint64_t(0);
}

/// Publishes, in this rank's own control words, that a wait for `peer` stopped (kCtlWaitingFor:
/// peers read it to name the end of a chain of waits).
__device__ __forceinline__ void publishWait(const FailParams& f, int peer) {
  atomOrRelaxedSys4(reinterpret_cast<uint32_t*>(ctlWord(f, f.rank, kCtlWaitingFor)), 1u << peer);
}

/// Records a timeout waiting for `missing` in the error words and raises the abort word.
__device__ __forceinline__ void raiseTimeout(const FailParams& f, int missing) {
  volatile uint32_t* e = f.err;
  publishWait(f, missing);
  e[kErrMissing + missing] = 1u;
  if (e[kErrCode] == kErrNone) {
    e[kErrTimeoutMs] = f.timeoutMs;
    e[kErrCode] = kErrTimeout;
  }
  fenceSystem();
  raiseAbort(f, kAbortTimeout, 1u << missing);
}

/// Records that `peer` sent a message of another length than this rank expected (all-to-all-v
/// counts that disagree) and raises the abort word, naming it; the caller stops and poisons.
__device__ __forceinline__ void raiseMismatch(const FailParams& f, int peer) {
  volatile uint32_t* e = f.err;
  e[kErrMissing + peer] = 1u;
  if (e[kErrCode] == kErrNone) e[kErrCode] = kErrMismatch;
  fenceSystem();
  raiseAbort(f, kAbortMismatch, 1u << peer);
}

/// Records that this rank's device split sizes cannot run (negative, or summing beyond the
/// buffers: all_to_all_v_device) and raises the abort word naming this rank; the caller stops
/// and poisons.
__device__ __forceinline__ void raiseCapacity(const FailParams& f) {
  volatile uint32_t* e = f.err;
  e[kErrMissing + f.rank] = 1u;
  if (e[kErrCode] == kErrNone) e[kErrCode] = kErrCapacity;
  fenceSystem();
  raiseAbort(f, kAbortCapacity, 1u << f.rank);
}

/// Kernel entry (all threads of the block, block-uniform result): true when the comm is aborted;
/// the kernel then poisons its share of the output, advances its counters and returns without
/// touching any peer. Records the abort in the error words (one thread).
__device__ __forceinline__ bool abortedAtEntry(const FailParams& f) {
  const bool aborted = syncThreadsOr(abortWord(f) != 0u);
  if (aborted && threadIdx.x == 0) noteAbort(f);
  return aborted;
}

/// The poll budget of one thread's waits in a kernel: call again(peer) after every unsuccessful
/// poll of something `peer` must write. Every 256 polls it reads this rank's abort word (device
/// memory) and the deadline, every 4096 the host's abort request (host-mapped).
struct Waiter {
  const FailParams& f;
  uint64_t deadline;
  uint32_t spins = 0;
  __device__ __forceinline__ Waiter(const FailParams& fp, uint64_t dl) : f(fp), deadline(dl) {}

  /// true: poll again; false: stop (recorded: abort seen, host request, or this timeout).
  __device__ __forceinline__ bool again(int peer) {
    if ((++spins & 255u) != 0) return true;
    if (abortWord(f) != 0u) {
      static_cast<volatile uint32_t*>(f.err)[kErrWaitingFor + peer] = 1u;  // named in messages
      publishWait(f, peer);
      noteAbort(f);
      return false;
    }
    if ((spins & 4095u) == 0) {
      const uint32_t word = ldVolatile4(reinterpret_cast<const char*>(f.err + kErrHostAbort));
      if (word) {  // the host's word: its own abort or a failure it forwards (gpu/algo.h)
        const volatile uint32_t* e = f.err;
        raiseAbortWord(f, word, e[kErrHostAbortMissing], e[kErrHostAbortMs]);
        noteAbort(f);
        return false;
      }
    }
    if (globalTimerNs() > deadline) {
      raiseTimeout(f, peer);
      return false;
    }
    return true;
  }
};

/// Spins until *flag >= expected (acquire, system scope); false when the wait stopped (Waiter).
__device__ __forceinline__ bool waitFlagGE(const uint64_t* flag, uint64_t expected, Waiter& w,
                                           int peer) {
  while (ldAcquireSys(flag) < expected)
    if (!w.again(peer)) return false;
  return true;
}
/// The same for a flag only blocks on this GPU set (acquire at GPU scope; the setter releases
/// with stReleaseGpu).
__device__ __forceinline__ bool waitGpuFlagGE(const uint64_t* flag, uint64_t expected, Waiter& w,
                                              int peer) {
  while (ldAcquireGpu(flag) < expected)
    if (!w.again(peer)) return false;
  return true;
}

/// Fills bytes [0, n) of `out` with 0xFF (a NaN in every floating-point type) from thread `t` of
/// `threads` (grid-stride or block-stride as the caller passes), never beyond out + n.
__device__ __forceinline__ void poison(char* out, size_t n, size_t t, size_t threads) {
  if (!out || n == 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(out);
  const size_t head = ((16 - (a & 15)) & 15) < n ? ((16 - (a & 15)) & 15) : n;
  const size_t vecs = (n - head) / 16;
  for (size_t i = t; i < head; i += threads) out[i] = char(0xFF);
  uint4* v = reinterpret_cast<uint4*>(out + head);
  for (size_t i = t; i < vecs; i += threads) v[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
  for (size_t i = head + vecs * 16 + t; i < n; i += threads) out[i] = char(0xFF);
}

/// This block's share of poison() when every block of the grid takes part (entry abort).
__device__ __forceinline__ void poisonShare(char* out, size_t n) {
  poison(out, n, size_t(blockIdx.x) * blockDim.x + threadIdx.x, size_t(gridDim.x) * blockDim.x);
}
/// poison() of the whole output by this block alone (a block that stopped mid-call).
__device__ __forceinline__ void poisonAll(char* out, size_t n) {
  poison(out, n, threadIdx.x, blockDim.x);
}

}  // namespace dev
}  // namespace cclx
