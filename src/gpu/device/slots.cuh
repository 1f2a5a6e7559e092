// The per-slot signal protocol, written once (device side of the MoE kernels, gpu/moe): a warp
// writes one record (a row of data and its descriptor) into a peer's slot with plain stores, and
// one lane then publishes the slot's 8-byte flag with a release store at system scope; a reader
// polls the flag (acquire, through a dev::Waiter) and then reads the record with loads that do
// not hit a stale L1 line. Flag values only increase (the call's epoch + 1, never reset), so a
// late reader never misses one and a stale value never looks new.
//
// Why the flag publishes every lane's stores: __syncwarp() orders the memory accesses of the
// lanes that take part (bar.warp.sync), so every lane's data store happens before the flag's
// release store, and a release store at system scope is cumulative (PTX memory model), as the
// block-level form (bar.sync + st.release, device/sync.cuh) relies on. HIP: each lane fences at
// system scope first (fenceBeforeSignal), as for block barriers (device/prims.cuh).
#pragma once

#include <cstdint>

#include "gpu/device/fail.cuh"
#include "gpu/device/prims.cuh"

namespace cclx {
namespace dev {

/// Lane index within the 32-lane warp.
__device__ __forceinline__ int laneId() { return int(threadIdx.x) & 31; }

/// Synchronizes the lanes of this thread's 32-lane warp and orders their memory accesses.
__device__ __forceinline__ void warpSync() {
#if defined(CCLX_HAVE_HIP)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#else
  __syncwarp();
#endif
}

/// Ballot of `p` over this thread's 32-lane warp (bit i: lane i).
__device__ __forceinline__ uint32_t ballot32(bool p) {
#if defined(CCLX_HAVE_HIP)
  const uint64_t m = __ballot(p);
  return uint32_t(m >> (__lane_id() & 32u));
#else
  return __ballot_sync(0xffffffffu, p);
#endif
}

/// Publishes a record every lane of the warp wrote: after the warp's stores (all lanes call it),
/// the lanes with `mine` store `value` to their `flag` (release, system scope).
__device__ __forceinline__ void warpPublish(uint64_t* flag, uint64_t value, bool mine) {
  fenceBeforeSignal();
  warpSync();
  if (mine) stReleaseSys(flag, value);
}

/// One lane (`leader`) of the warp waits (acquire) until *flag >= value, polling through `w`
/// on behalf of rank `peer`; then the warp synchronizes, so every lane may read the record.
/// Returns false in every lane when the wait stopped (recorded by the Waiter).
__device__ __forceinline__ bool warpAwait(const uint64_t* flag, uint64_t value, Waiter& w,
                                          int peer, int leader = 0) {
  int ok = 1;
  if (laneId() == leader) ok = waitFlagGE(flag, value, w, peer) ? 1 : 0;
  ok = shfl32(ok, leader);
  warpSync();
  fenceAfterWait();
  return ok != 0;
}

/// Every lane with a flag (`flag` non-null: each lane its own) waits (acquire) until *flag >=
/// value, all at once, polling through `w` on behalf of rank `peer`; then the warp
/// synchronizes. Returns false in every lane when a wait stopped (recorded by the Waiter).
__device__ __forceinline__ bool warpAwaitEach(const uint64_t* flag, uint64_t value, Waiter& w,
                                              int peer) {
  const bool ok = flag == nullptr || waitFlagGE(flag, value, w, peer);
  const bool all = ballot32(!ok) == 0;
  warpSync();
  fenceAfterWait();
  return all;
}

/// A 4-byte word of a record a peer wrote, read after warpAwait (not from a stale L1 line).
__device__ __forceinline__ uint32_t ldRecord4(const char* p) { return ldVolatile4(p); }

}  // namespace dev
}  // namespace cclx
