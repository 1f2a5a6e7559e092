// The skeleton of every peer-memory kernel (DDA, FP8, fused), written once: how a call of one
// block starts, fails and ends under the failure model of device/fail.cuh. A kernel supplies
// three pieces and the skeleton runs them the same way on every path:
//   poison(all)  fills the call's outputs with 0xFF bytes: all == false, this block's share
//                (every block of the grid takes part: the abort at entry); all == true, the
//                whole output by this block alone (a block that stopped mid-call);
//   body()       the call proper, run by every thread only when the abort word was clear at
//                entry; returns true in a thread that stopped waiting (a Waiter said so, which
//                recorded why); the block votes;
//   advance(ok)  after a __syncthreads() that follows every thread's last read of the counters
//                and last write of the outputs: writes the call counters exactly as a completed
//                call would, on every path (entry abort, stop, success), so that the ranks keep
//                counting the same calls. ok: the body ran and no thread stopped (a kernel that
//                publishes a "done" signal does so only then).
// Contract of the skeleton (every block, all threads, block-uniform control flow):
//   1. abortedAtEntry(f) (nothing pushed to a peer yet): poison(false), no body;
//   2. otherwise body(); when any thread returned true: poison(true);
//   2b. when the body completed but the abort word is raised now (read after this block's last
//      write of the outputs): another block of the call may have stopped and poisoned the whole
//      output before this block's writes landed, so this block poisons it whole again and
//      records the abort (noteAbort: the host fails the call, never a silent NaN); ok stays true
//      (the block did complete its protocol steps);
//   3. __syncthreads(); advance(ok).
// Hence an output is exact or NaN as a whole, never a mix of exact and poisoned parts.
// The kernel reads its counters before it calls the skeleton (the reads happen before step 3's
// barrier).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/device/fail.cuh"

namespace cclx {
namespace dev {

/// One call of a peer kernel (all threads of the block): the contract above.
template <class Poison, class Body, class Advance>
__device__ __forceinline__ void peerCall(const FailParams& f, Poison&& poison, Body&& body,
                                         Advance&& advance) {
  bool ok = false;
  if (abortedAtEntry(f)) {
    poison(false);
  } else if (syncThreadsOr(body())) {
    poison(true);
  } else {
    ok = true;
    __threadfence();  // this block's output writes before the abort word's read
    if (syncThreadsOr(threadIdx.x == 0 && abortWord(f) != 0u)) {
      if (threadIdx.x == 0) noteAbort(f);
      poison(true);
    }
  }
  __syncthreads();  // every thread has read the counters and is done with the outputs
  advance(ok);
}

/// peerCall for a kernel with one call counter per block: advance() is thread 0 storing `next`
/// into `counter` (read at the end: the body may move it).
template <class Poison, class Body>
__device__ __forceinline__ void peerCall(const FailParams& f, uint64_t* counter,
                                         const uint64_t& next, Poison&& poison, Body&& body) {
  peerCall(f, poison, body, [&](bool) {
    if (threadIdx.x == 0) *counter = next;
  });
}

/// poison() of one output buffer of `n` bytes.
struct PoisonBuf {
  char* out;
  size_t n;
  __device__ __forceinline__ void operator()(bool all) const {
    if (all) poisonAll(out, n);
    else poisonShare(out, n);
  }
};

}  // namespace dev
}  // namespace cclx
