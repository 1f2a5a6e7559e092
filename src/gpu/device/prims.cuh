// The device primitives, one home for both GPU toolchains: memory accesses with a given ordering
// and scope, fences, the global timer, warp-level operations, named barriers and the hardware
// conversions. Kernels are written once against these functions: they never write PTX or GCN
// assembly and reach warp-level and architecture-specific operations only through them (what
// both toolchains spell alike, e.g. __syncthreads or __fmul_rn, they use directly). CUDA builds
// get the PTX below; HIP builds (CCLX_HAVE_HIP: AMD gfx90a / gfx940) get the HIP branch, which
// keeps the same contracts where the hardware allows and says where it cannot (docs/design/amd.md
// "Where the memory model differs").
//
// Ordering vocabulary (PTX memory model): *volatile* accesses are not cached in L1 and not merged
// or removed by the compiler (the LL and data-as-flag protocols poll with them; a 16-byte
// volatile store reaches a peer as two 8-byte pieces, each whole); *release / acquire* at system
// scope order every earlier store / later load of the thread against the flag, across GPUs.
//
// Warps. Kernels are written for 32-lane warps (shuffles, votes, `threadIdx.x & 31`). AMD GPUs run
// 64-lane wavefronts: there a warp is one half of a wavefront, shuffles and votes act within that
// half (width 32), and the threads of a team (named barrier) are whole wavefronts.
#pragma once

#include <cstdint>

#include "gpu/runtime.h"

#if defined(CCLX_HAVE_HIP)
#include <hip/hip_fp16.h>

#include "core/elements/fp8_codec.h"
#else
#include <cuda_fp16.h>
#endif

namespace cclx {
namespace dev {

/// Lanes of one hardware warp / wavefront: teams of threads are made of whole ones.
#if defined(CCLX_HAVE_HIP)
constexpr int kWaveLanes = 64;
#else
constexpr int kWaveLanes = 32;
#endif

/// 16 bytes as two 8-byte pieces: the unit a peer receives atomically.
struct V16 {
  uint64_t lo, hi;
};

// ---- the same source for both toolchains ----

/// f16 bits -> float (exact).
__device__ __forceinline__ float f16BitsToF32(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

/// Orders this thread's earlier memory accesses before its later ones for every observer (other
/// GPUs, the host).
__device__ __forceinline__ void fenceSystem() { __threadfence_system(); }

/// Stops the kernel with an error the launch's stream reports (a state the host never asks for:
/// a bug, never a result).
__device__ __forceinline__ void trap() {
#if defined(CCLX_HAVE_HIP)
  __builtin_trap();
#else
  __trap();
#endif
}

/// __syncthreads() that also returns whether `p` is non-zero in any thread of the block.
__device__ __forceinline__ int syncThreadsOr(int p) { return __syncthreads_or(p); }

/// A word in shared memory that one thread of the block sets and other threads of the block poll
/// with no barrier between them (teamRounds' round counter): atomics on both sides, so no access
/// races, and a block fence before the set and after a get, so a poller that sees a value also
/// sees the memory operations the setter made before it. Such a word is never accessed otherwise
/// while pollers run.
__device__ __forceinline__ void blockFlagSet(uint32_t* f, uint32_t v) {
  __threadfence_block();
  atomicExch(f, v);
}
__device__ __forceinline__ uint32_t blockFlagGet(uint32_t* f) {
  const uint32_t v = atomicAdd(f, 0u);
  __threadfence_block();
  return v;
}

#if !defined(CCLX_HAVE_HIP)
// ================================ CUDA (PTX) ================================

// ---- time ----

/// Nanoseconds of the GPU's global timer (the same clock on every SM).
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- flags: 8-byte acquire / release / relaxed at system scope, release add; GPU scope ----

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
/// The same at GPU scope: flags that only blocks on this GPU read (cheaper than system scope).
__device__ __forceinline__ uint64_t ldAcquireGpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void stReleaseGpu(uint64_t* p, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
/// Atomic *p += v at system scope with release semantics (the counter of one-sided signals): a
/// reader that sees the new value (acquire) sees every store this thread made before it.
__device__ __forceinline__ void atomAddReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
/// Atomic *p |= v at system scope, relaxed (masks several ranks or blocks add bits to).
__device__ __forceinline__ void atomOrRelaxedSys4(uint32_t* p, uint32_t v) {
  asm volatile("red.relaxed.sys.global.or.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
/// Atomic *p += v at GPU scope, acquire and release (counters this GPU's blocks share); returns
/// the value *p held.
__device__ __forceinline__ uint64_t atomAddAcqRelGpu(uint64_t* p, uint64_t v) {
  uint64_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;"
               : "=l"(old)
               : "l"(p), "l"(v)
               : "memory");
  return old;
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

// ---- warps (32 lanes, all active) ----

template <class T>
__device__ __forceinline__ T shflXor32(T v, int laneMask) {
  return __shfl_xor_sync(0xffffffffu, v, laneMask);
}
template <class T>
__device__ __forceinline__ T shfl32(T v, int srcLane) {
  return __shfl_sync(0xffffffffu, v, srcLane);
}
__device__ __forceinline__ bool any32(bool p) { return __any_sync(0xffffffffu, p); }
/// Barrier of the 32 lanes of this warp that also orders their memory accesses (bar.warp.sync:
/// a lane's accesses before it happen before every lane's accesses after it).
__device__ __forceinline__ void syncWarp32() { __syncwarp(0xffffffffu); }

// ---- loads that bypass L1 (data a peer wrote, read after an acquire) ----

__device__ __forceinline__ uint4 ldCg(const uint4* p) { return __ldcg(p); }

// ---- block barriers around a flag exchange with peers ----

/// Before the block barrier that precedes one thread's stReleaseSys of a flag. Nothing here:
/// bar.sync followed by st.release.sys is cumulative (PTX memory model), so the flag publishes
/// every thread's earlier stores.
__device__ __forceinline__ void fenceBeforeSignal() {}
/// After the block barrier that follows one thread's ldAcquireSys of a flag. Nothing here, for
/// the same reason.
__device__ __forceinline__ void fenceAfterWait() {}
/// Named barriers need no state: nothing to set up.
__device__ __forceinline__ void namedBarriersInit() {}

#else
// ============================ HIP (gfx90a, gfx940) ============================
//
// Memory model: the HIP/LLVM AMDGPU model. Peer-visible buffers are fine-grained
// (gpurt::mallocPeerVisible), so system-scope atomics and volatile accesses to them are coherent
// with the peers' writes while kernels run. Volatile accesses bypass the caches and keep their
// order among themselves (never merged or removed); 16-byte ones are single dwordx4 accesses.

typedef uint32_t U32x2 __attribute__((ext_vector_type(2)));
typedef uint32_t U32x4 __attribute__((ext_vector_type(4)));
typedef uint64_t U64x2 __attribute__((ext_vector_type(2)));

// ---- time ----

/// Nanoseconds of the device's wall clock (wall_clock64(): a constant-rate counter shared by all
/// CUs) at its nominal rate gpurt::kWallClockKHz. Only deadlines use it; the host scales the
/// timeouts it passes by the device's actual rate (DeviceCtx::timerScale).
__device__ __forceinline__ uint64_t globalTimerNs() {
#if defined(__HIP_DEVICE_COMPILE__)
  return uint64_t(wall_clock64()) * (1000000u / gpurt::kWallClockKHz);
#else
  return 0;  // the host pass of a device function (ROCm 5 declares wall_clock64 for devices only)
#endif
}

// ---- flags: 8-byte acquire / release / relaxed at system scope, release add; GPU scope ----

__device__ __forceinline__ uint64_t ldAcquireSys(const uint64_t* p) {
  return __hip_atomic_load(const_cast<uint64_t*>(p), __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void stReleaseSys(uint64_t* p, uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ uint64_t ldRelaxedSys(const uint64_t* p) {
  return __hip_atomic_load(const_cast<uint64_t*>(p), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ uint64_t ldAcquireGpu(const uint64_t* p) {
  return __hip_atomic_load(const_cast<uint64_t*>(p), __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ void stReleaseGpu(uint64_t* p, uint64_t v) {
  __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ __forceinline__ void atomAddReleaseSys(uint64_t* p, uint64_t v) {
  (void)__hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ void atomOrRelaxedSys4(uint32_t* p, uint32_t v) {
  (void)__hip_atomic_fetch_or(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ uint64_t atomAddAcqRelGpu(uint64_t* p, uint64_t v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
}

// ---- LL16 packets: 16 bytes = {data0, flag, data1, flag} ----

/// One 16-byte volatile store. That each 8-byte half reaches a peer whole is what the protocol
/// needs and what AMD does not document for xGMI (docs/design/amd.md).
__device__ __forceinline__ void stLL16(uint4* p, uint32_t d0, uint32_t d1, uint32_t flag) {
  *reinterpret_cast<volatile U32x4*>(p) = U32x4{d0, flag, d1, flag};
}
__device__ __forceinline__ uint4 ldLL16(const uint4* p) {
  const U32x4 v = *reinterpret_cast<const volatile U32x4*>(p);
  return make_uint4(v.x, v.y, v.z, v.w);
}

// ---- volatile data accesses (the data-as-flag protocol, device/lamport.cuh) ----

__device__ __forceinline__ void stVolatile16(char* p, V16 v) {
  *reinterpret_cast<volatile U64x2*>(p) = U64x2{v.lo, v.hi};
}
__device__ __forceinline__ V16 ldVolatile16(const char* p) {
  const U64x2 v = *reinterpret_cast<const volatile U64x2*>(p);
  return {v.x, v.y};
}
__device__ __forceinline__ void stVolatile16(char* p, uint4 v) {
  *reinterpret_cast<volatile U32x4*>(p) = U32x4{v.x, v.y, v.z, v.w};
}
__device__ __forceinline__ uint4 ldVolatile16u4(const char* p) {
  const U32x4 v = *reinterpret_cast<const volatile U32x4*>(p);
  return make_uint4(v.x, v.y, v.z, v.w);
}
__device__ __forceinline__ void stVolatile8(char* p, uint32_t a, uint32_t b) {
  *reinterpret_cast<volatile U32x2*>(p) = U32x2{a, b};
}
__device__ __forceinline__ void stVolatile4(char* p, uint32_t v) {
  *reinterpret_cast<volatile uint32_t*>(p) = v;
}
__device__ __forceinline__ uint32_t ldVolatile4(const char* p) {
  return *reinterpret_cast<const volatile uint32_t*>(p);
}
/// A plain (weak) 16-byte store of the 8-byte pattern `w` twice, kept in program order (compiler
/// fences on both sides).
__device__ __forceinline__ void stFill16(char* p, uint64_t w) {
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  *reinterpret_cast<U64x2*>(p) = U64x2{w, w};
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

// ---- warps: 32-lane halves of a wavefront ----

template <class T>
__device__ __forceinline__ T shflXor32(T v, int laneMask) {
  return __shfl_xor(v, laneMask, 32);
}
template <class T>
__device__ __forceinline__ T shfl32(T v, int srcLane) {
  return __shfl(v, srcLane, 32);
}
/// True when p holds in any active lane of this lane's half-wavefront.
__device__ __forceinline__ bool any32(bool p) {
  const uint64_t m = __ballot(p);
  return ((m >> (__lane_id() & 32u)) & 0xffffffffull) != 0;
}
/// Barrier of this lane's half-wavefront that also orders its lanes' memory accesses: the
/// wavefront runs in lockstep, so workgroup-scope fences around a wave barrier give the order.
__device__ __forceinline__ void syncWarp32() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// ---- loads of data a peer wrote, after an acquire (fenceAfterWait invalidated L1) ----

__device__ __forceinline__ uint4 ldCg(const uint4* p) { return *p; }

// ---- block barriers around a flag exchange with peers ----

/// Before the block barrier that precedes one thread's stReleaseSys of a flag: every thread
/// completes its own earlier stores (peer memory included) at system scope. A workgroup barrier
/// followed by one wave's system-scope release is not documented to publish the other waves'
/// remote stores.
__device__ __forceinline__ void fenceBeforeSignal() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
}
/// After the block barrier that follows one thread's ldAcquireSys of a flag: every thread
/// acquires at system scope itself (invalidates its CU's L1), whatever the CU mode.
__device__ __forceinline__ void fenceAfterWait() { __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, ""); }

// ---- named barriers (id 0 is __syncthreads), emulated ----
//
// AMD GPUs have one barrier per workgroup. A named barrier of `threads` threads (whole
// wavefronts) is a sense-reversing barrier in shared memory: the first active lane of each
// wavefront counts its arrival; the last one to arrive resets the count, clears the OR slot of the
// next round and advances the generation the others wait for. System-scope fences around it give
// the team's flag exchanges (fp8/device.cuh teamSignal / teamWait) what fenceBeforeSignal /
// fenceAfterWait give block barriers. namedBarriersInit() must run at kernel entry, before any
// thread uses a named barrier.

constexpr int kNamedBarriers = 3;

struct NamedBarrier {
  uint32_t arrived, gen, any[2];
};

__device__ __forceinline__ NamedBarrier* namedBarrier(int id) {
  __shared__ NamedBarrier bars[kNamedBarriers];
  return &bars[id];
}

__device__ __forceinline__ void namedBarriersInit() {
  if (threadIdx.x < unsigned(kNamedBarriers)) *namedBarrier(int(threadIdx.x)) = NamedBarrier{};
  __syncthreads();
}

/// The emulated bar.sync / bar.red.or of `threads` threads on barrier `id`.
__device__ __forceinline__ bool namedBarrierOr(int id, int threads, bool v) {
  constexpr int kWg = __HIP_MEMORY_SCOPE_WORKGROUP;
  NamedBarrier& b = *namedBarrier(id);
  const uint64_t active = __ballot(1);
  const bool waveAny = __ballot(v) != 0;
  const int leader = int(__builtin_ctzll(active));
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
  uint32_t any = 0;
  if (int(__lane_id()) == leader) {
    const uint32_t waves = uint32_t(threads) / uint32_t(kWaveLanes);
    const uint32_t g = __hip_atomic_load(&b.gen, __ATOMIC_RELAXED, kWg);
    if (waveAny) __hip_atomic_fetch_or(&b.any[g & 1u], 1u, __ATOMIC_RELAXED, kWg);
    if (__hip_atomic_fetch_add(&b.arrived, 1u, __ATOMIC_ACQ_REL, kWg) + 1u == waves) {
      __hip_atomic_store(&b.arrived, 0u, __ATOMIC_RELAXED, kWg);
      __hip_atomic_store(&b.any[(g + 1u) & 1u], 0u, __ATOMIC_RELAXED, kWg);
      __hip_atomic_store(&b.gen, g + 1u, __ATOMIC_RELEASE, kWg);
    } else {
      while (__hip_atomic_load(&b.gen, __ATOMIC_ACQUIRE, kWg) == g) __builtin_amdgcn_s_sleep(1);
    }
    any = __hip_atomic_load(&b.any[g & 1u], __ATOMIC_RELAXED, kWg);
  }
  any = __shfl(any, leader);
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "");
  return any != 0;
}

/// Barrier of `threads` threads (whole wavefronts) on barrier `id`, with a memory fence.
__device__ __forceinline__ void barSync(int id, int threads) {
  (void)namedBarrierOr(id, threads, false);
}
/// barSync on a barrier id known at compile time.
template <int kId>
__device__ __forceinline__ void barSync(int threads) {
  (void)namedBarrierOr(kId, threads, false);
}
/// barSync that also returns the OR of `v` over the participating threads.
__device__ __forceinline__ bool barSyncOr(int id, int threads, bool v) {
  return namedBarrierOr(id, threads, v);
}

// ---- conversions: exact software forms where gfx90a / gfx940 have no matching instruction ----

/// Two floats -> two bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t cvtBf16x2(float lo, float hi) {
  return uint32_t(math::f32ToBf16(lo)) | uint32_t(math::f32ToBf16(hi)) << 16;
}
/// Two floats -> two f16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t cvtF16x2(float lo, float hi) {
  return uint32_t(__half_as_ushort(__float2half_rn(lo))) |
         uint32_t(__half_as_ushort(__float2half_rn(hi))) << 16;
}
/// Two floats -> two e4m3 (round to nearest even, saturating to +-448), lo in the low byte. The
/// host codec's conversion: gfx940's fp8 instructions implement the FNUZ variant, not e4m3.
__device__ __forceinline__ uint32_t cvtE4m3x2(float lo, float hi) {
  return uint32_t(fp8::f32ToE4m3(lo)) | uint32_t(fp8::f32ToE4m3(hi)) << 8;
}
/// Two e4m3 codes (low byte first) -> two f16 (exact), lo in the low half.
__device__ __forceinline__ uint32_t cvtE4m3x2ToF16x2(unsigned short pair) {
  const float lo = fp8::e4m3ToF32(uint8_t(pair & 0xffu)), hi = fp8::e4m3ToF32(uint8_t(pair >> 8));
  return uint32_t(__half_as_ushort(__float2half_rn(lo))) |
         uint32_t(__half_as_ushort(__float2half_rn(hi))) << 16;
}

#endif  // CCLX_HAVE_HIP

}  // namespace dev
}  // namespace cclx
