// Device-side synchronization primitives for peer-memory kernels (DDA, barrier, FP8).
//
// Memory-ordering contract: a writer makes its data visible to a peer GPU with
//   (all threads write data) -> __syncthreads() -> one thread per peer: st.release.sys(flag, v)
// and a reader observes it with
//   one thread per peer: ld.acquire.sys(flag) >= v -> __syncthreads() -> all threads read data.
// (HIP: every thread also fences at system scope before the first barrier and after the second,
// fenceBeforeSignal / fenceAfterWait in device/prims.cuh.)
// Flag values only increase (no resets), so a late reader never misses a signal and a stale value
// can never look new. Every spin loop polls through a dev::Waiter (device/fail.cuh): it stops on
// the comm's abort word, the host's abort request or its %globaltimer deadline, records why, and
// gives up instead of hanging.
#pragma once

#include <cstdint>

#include "gpu/algo.h"
#include "gpu/device/fail.cuh"
#include "gpu/device/prims.cuh"

namespace cclx {
namespace dev {

/// Block-level barrier with the same block index on every rank: thread t < size signals rank t
/// (slot [myRank] of t's flag row) and waits for slot [t] of the local row. `rows[r]` points to
/// rank r's flag row for this block (kMaxRanks uint64 each). Call with all threads of the block;
/// returns false (in every thread) when a wait stopped (device/fail.cuh: abort, host request or
/// deadline, all recorded). Includes the __syncthreads() on both sides.
__device__ __forceinline__ bool blockBarrier(uint64_t* const* rows, int rank, int size,
                                             uint64_t value, Waiter& w) {
  fenceBeforeSignal();
  __syncthreads();  // the block's writes happen before the release below
  int t = threadIdx.x, failed = 0;
  if (t < size) {
    stReleaseSys(rows[t] + rank, value);
    failed = !waitFlagGE(rows[rank] + t, value, w, t);
  }
  const bool ok = syncThreadsOr(failed) == 0;  // the acquires happen before the block's reads
  fenceAfterWait();
  return ok;
}

/// A team: whole warps [first, first + threads) of a block with their own named barrier (ids 1
/// and 2; 0 is __syncthreads). Kernels that pipeline split a block into a producer and a
/// consumer team that meet only at the start and the end of a call (__syncthreads) and
/// otherwise talk through flags. On AMD a team is whole wavefronts, and a kernel with teams calls
/// namedBarriersInit() first.
struct Team {
  int id, first, threads;
  __device__ int tid() const { return int(threadIdx.x) - first; }
};

__device__ __forceinline__ void teamSync(const Team& t) { barSync(t.id, t.threads); }

/// Barrier of the team that also ORs `v` over its threads.
__device__ __forceinline__ bool teamAny(const Team& t, bool v) { return barSyncOr(t.id, t.threads, v); }

}  // namespace dev
}  // namespace cclx
