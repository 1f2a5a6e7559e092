// Device-side synchronization primitives for peer-memory kernels (DDA, barrier, FP8).
//
// Memory-ordering contract: a writer makes its data visible to a peer GPU with
//   (all threads write data) -> __syncthreads() -> one thread per peer: st.release.sys(flag, v)
// and a reader observes it with
//   one thread per peer: ld.acquire.sys(flag) >= v -> __syncthreads() -> all threads read data.
// Flag values only increase (no resets), so a late reader never misses a signal and a stale value
// can never look new. Every spin loop carries a %globaltimer deadline: on expiry it records the
// missing rank in the host-mapped error words (see device_ctx.h) and gives up instead of hanging.
#pragma once

#include <cstdint>

#include "algos/device_ctx.h"

namespace cclx {
namespace dev {

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t ldAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void stReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint64_t ldRelaxedSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/// LL16 packet: 16 bytes = {data0, flag, data1, flag}. A 16-byte volatile store reaches a peer
/// as (at least) two atomic 8-byte halves, each carrying its own copy of the flag, so a reader
/// that sees the flag in both halves has both data words.
__device__ __forceinline__ void stLL16(uint4* p, uint32_t d0, uint32_t d1, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(d0), "r"(flag),
               "r"(d1), "r"(flag)
               : "memory");
}
__device__ __forceinline__ uint4 ldLL16(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

/// Records a timeout: error word 0 = kErrTimeout, word 1 + missingRank = 1 (host-mapped memory,
/// plain stores: no atomics are needed because every writer writes the same values).
__device__ __forceinline__ void reportTimeout(uint32_t* err, int missingRank) {
  volatile uint32_t* e = err;
  e[1 + missingRank] = 1u;
  e[0] = kErrTimeout;
  __threadfence_system();
}

/// Spins until *flag >= expected (acquire, system scope) or the deadline passes. Returns false on
/// timeout after reporting `peer` as missing.
__device__ __forceinline__ bool waitFlagGE(const uint64_t* flag, uint64_t expected,
                                           uint64_t deadlineNs, uint32_t* err, int peer) {
  uint32_t spins = 0;
  while (ldAcquireSys(flag) < expected) {
    if ((++spins & 1023u) == 0 && globalTimerNs() > deadlineNs) {
      reportTimeout(err, peer);
      return false;
    }
  }
  return true;
}

/// Block-level barrier with the same block index on every rank: thread t < size signals rank t
/// (slot [myRank] of t's flag row) and waits for slot [t] of the local row. `rows[r]` points to
/// rank r's flag row for this block (kMaxRanks uint64 each). Call with all threads of the block;
/// returns false (in every thread) on timeout. Includes the __syncthreads() on both sides.
__device__ __forceinline__ bool blockBarrier(uint64_t* const* rows, int rank, int size,
                                             uint64_t value, uint64_t deadlineNs, uint32_t* err) {
  __syncthreads();  // the block's writes happen before the release below
  int t = threadIdx.x, failed = 0;
  if (t < size) {
    stReleaseSys(rows[t] + rank, value);
    failed = !waitFlagGE(rows[rank] + t, value, deadlineNs, err, t);
  }
  return __syncthreads_or(failed) == 0;  // the acquires happen before the block's reads
}

/// A team: whole warps [first, first + threads) of a block with their own named barrier (ids 1
/// and 2; 0 is __syncthreads). Kernels that pipeline split a block into a producer and a
/// consumer team that meet only at the start and the end of a call (__syncthreads) and
/// otherwise talk through flags.
struct Team {
  int id, first, threads;
  __device__ int tid() const { return int(threadIdx.x) - first; }
};

__device__ __forceinline__ void teamSync(const Team& t) {
  asm volatile("bar.sync %0, %1;" ::"r"(t.id), "r"(t.threads) : "memory");
}

/// Barrier of the team that also ORs `v` over its threads.
__device__ __forceinline__ bool teamAny(const Team& t, bool v) {
  int r;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\tsetp.ne.s32 p, %1, 0;\n\t"
      "bar.red.or.pred q, %2, %3, p;\n\tselp.s32 %0, 1, 0, q;\n\t}"
      : "=r"(r)
      : "r"(v ? 1 : 0), "r"(t.id), "r"(t.threads)
      : "memory");
  return r != 0;
}

}  // namespace dev
}  // namespace cclx
