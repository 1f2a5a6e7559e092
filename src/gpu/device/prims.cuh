// Every inline-assembly wrapper of the device code, in one place: memory accesses with a given
// ordering and scope, the global timer, named barriers and the hardware conversions. Kernels use
// these functions and never write PTX themselves.
//
// Ordering vocabulary (PTX memory model): *volatile* accesses are not cached in L1 and not merged
// or removed by the compiler (the LL and data-as-flag protocols poll with them; a 16-byte
// volatile store reaches a peer as two 8-byte pieces, each whole); *release / acquire* at system
// scope order every earlier store / later load of the thread against the flag, across GPUs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cclx {
namespace dev {

// ---- time ----

/// Nanoseconds of the GPU's global timer (the same clock on every SM).
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- flags: 8-byte acquire / release / relaxed at system scope ----

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

// ---- LL16 packets: 16 bytes = {data0, flag, data1, flag} ----

/// A 16-byte volatile store reaches a peer as (at least) two atomic 8-byte halves, each carrying
/// its own copy of the flag, so a reader that sees the flag in both halves has both data words.
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

// ---- volatile data accesses (the data-as-flag protocol, device/lamport.cuh) ----

/// 16 bytes as two 8-byte pieces: the unit a peer receives atomically.
struct V16 {
  uint64_t lo, hi;
};

__device__ __forceinline__ void stVolatile16(char* p, V16 v) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v.lo), "l"(v.hi));
}
__device__ __forceinline__ V16 ldVolatile16(const char* p) {
  V16 v;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(v.lo), "=l"(v.hi) : "l"(p));
  return v;
}
__device__ __forceinline__ void stVolatile16(char* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ uint4 ldVolatile16u4(const char* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ void stVolatile8(char* p, uint32_t a, uint32_t b) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(a), "r"(b));
}
__device__ __forceinline__ void stVolatile4(char* p, uint32_t v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v));
}
__device__ __forceinline__ uint32_t ldVolatile4(const char* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
/// A plain (weak) 16-byte store of the 8-byte pattern `w` twice, kept in program order.
__device__ __forceinline__ void stFill16(char* p, uint64_t w) {
  asm volatile("st.global.v2.u64 [%0], {%1, %1};" ::"l"(p), "l"(w));
}

// ---- named barriers (id 0 is __syncthreads) ----

/// Barrier of `threads` threads (whole warps) on barrier `id`, with a compiler memory fence.
__device__ __forceinline__ void barSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
/// barSync on a barrier id known at compile time.
template <int kId>
__device__ __forceinline__ void barSync(int threads) {
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "r"(threads) : "memory");
}
/// barSync that also returns the OR of `v` over the participating threads.
__device__ __forceinline__ bool barSyncOr(int id, int threads, bool v) {
  int r;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\tsetp.ne.s32 p, %1, 0;\n\t"
      "bar.red.or.pred q, %2, %3, p;\n\tselp.s32 %0, 1, 0, q;\n\t}"
      : "=r"(r)
      : "r"(v ? 1 : 0), "r"(id), "r"(threads)
      : "memory");
  return r != 0;
}

// ---- hardware conversions (fp8/device.cuh checks them against the host codec) ----

/// Two floats -> two bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t cvtBf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/// Two floats -> two f16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t cvtF16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/// Two floats -> two e4m3 (round to nearest even, saturating to +-448), lo in the low byte.
__device__ __forceinline__ uint32_t cvtE4m3x2(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}
/// Two e4m3 codes (low byte first) -> two f16 (exact), lo in the low half.
__device__ __forceinline__ uint32_t cvtE4m3x2ToF16x2(unsigned short pair) {
  uint32_t hh;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hh) : "h"(pair));
  return hh;
}

}  // namespace dev
}  // namespace cclx
