// Device building blocks of the FP8 collectives (allreduce.cu, exchange.cu, oneshot.cu): 16-element
// loads/stores of the user's dtype, group-wise block quantization, flags.
//
// Work unit: one thread handles 16 elements of one codec block; a block of B values is handled by
// a group of B/16 adjacent lanes (2..16, inside one warp). The collectives give each lane strided
// 16-byte pieces of the block (loadBlock16 / storeBlock16: coalesced); load16 / store16 take 16
// consecutive elements (the codec checks, which compare codes with the host codec's order). A
// group reduces the block's largest magnitude with warp shuffles, so every lane of a warp must
// reach the shuffles: loops run a CTA-uniform number of rounds and idle groups take part with
// zeros.
//
// Bitwise agreement with the host codec (fp8_codec.h): the scale comes from the same makeMeta()
// (__fdiv_rn); x * s uses __fmul_rn; the float -> e4m3 step uses cvt.rn.satfinite.e4m3x2.f32, which rounds
// to nearest even and saturates exactly like fp8::f32ToE4m3 (tests/cpp/gpu/test_gpu_fp8.cc checks
// every float in [-448, 448] on the device); NaN/Inf are handled in software as on the host.
// Decoding is exact (e4m3 -> f16 in hardware, f16 -> f32), then __fmul_rn by the block's d.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gpu/device/dtype_dispatch.h"
#include "gpu/device/launch.cuh"
#include "gpu/device/peer_kernel.cuh"
#include "gpu/device/sync.cuh"
#include "core/elements/fp8_codec.h"
#include "gpu/resources.h"

namespace cclx {
namespace fp8dev {

constexpr int kThreads = 512;    // threads per CTA
constexpr int kEPT = 16;         // elements per thread per unit
constexpr int kMaxCtas = 128;    // CTAs per call at most (each pairs with the same index on peers)
constexpr int kWarps = kThreads / 32;
// Flags in the FP8 signal region: uint64 [phase][cta][source]; phase 0/1 = data phases of a
// tile, phase 2 = "done": the CTA finished every read of the call (value = its last epoch),
// phase 3 = "consumed": the consumer team finished reading a tile's inbox buffer.
constexpr int kPhaseDone = 2;
constexpr int kPhaseConsumed = 3;
constexpr int kPhases = 4;

/// Everything a kernel needs. All FP8 collectives share the staging region, the flags and the
/// per-CTA epoch counters: CTA c of every call owns bytes [c * ctaBytes, (c + 1) * ctaBytes) of
/// each rank's FP8 staging region, and tile i of a call uses epoch counter[c] + 1 + i.
struct Params {
  const char* send;
  char* recv;
  size_t count;           // elements (per rank segment for AG/RS/A2A)
  int rank, size, avg;
  size_t tileBlocks;      // codec blocks per tile
  size_t nbAll;           // codec blocks in total (per segment)
  size_t nTiles;
  size_t ctaBytes;        // staging bytes per CTA
  char* staging[kMaxRanks];    // FP8 staging region of each rank
  uint64_t* flags[kMaxRanks];  // FP8 flag area of each rank
  uint64_t* counters;          // kMaxCtas epoch counters (device-local)
  FailParams fail;             // device/fail.cuh
  size_t outBytes;             // bytes of `recv` (poisoned when the call fails)
  int producerThreads;         // teams: threads [0, producerThreads) quantize and push, the rest decode
};

template <class T> struct Vec;
template <> struct Vec<float> { static constexpr int kLoads = 4; };
template <> struct Vec<bf16_t> { static constexpr int kLoads = 2; };
template <> struct Vec<f16_t> { static constexpr int kLoads = 2; };

/// 16-bit float bits -> float in hardware (bf16: a shift; f16: exact widening). Equal to
/// math::load for every non-NaN input; a NaN stays a NaN (its payload may not). Loaded values
/// only feed the quantizer, which treats every NaN alike.
template <class T>
__device__ __forceinline__ float toF32(uint16_t bits) {
  if constexpr (std::is_same_v<T, f16_t>) return dev::f16BitsToF32(bits);
  else return math::load(T{bits});
}
template <class T>
__device__ __forceinline__ float toF32(T v) {
  if constexpr (sizeof(T) == 4) return v;
  else return toF32<T>(v.bits);
}

/// Two floats -> two 16-bit floats in one hardware conversion (cvt.rn.{bf16,f16}x2.f32: round to
/// nearest even, subnormals kept, overflow to Inf), lo in the low half. Equal to
/// math::f32ToBf16 / f32ToF16 for every non-NaN float; a NaN gives a NaN (the canonical one).
/// fp8_selftest checks every float on the device.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, f16_t>) return dev::cvtF16x2(lo, hi);
  else return dev::cvtBf16x2(lo, hi);
}

/// Converts the raw 16-byte words of 16 consecutive elements to floats.
template <class T>
__device__ __forceinline__ void unpack16(const uint4 (&w)[Vec<T>::kLoads], float v[kEPT]) {
#pragma unroll
  for (int l = 0; l < Vec<T>::kLoads; ++l) {
    uint32_t u[4] = {w[l].x, w[l].y, w[l].z, w[l].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (sizeof(T) == 4) {
        v[l * 4 + k] = __uint_as_float(u[k]);
      } else {
        v[l * 8 + 2 * k] = toF32<T>(uint16_t(u[k] & 0xffffu));
        v[l * 8 + 2 * k + 1] = toF32<T>(uint16_t(u[k] >> 16));
      }
    }
  }
}

/// Loads elements [i0, i0 + min(avail, 16)) of p as floats (avail: the elements p holds from
/// i0 on, any int: <= 0 loads nothing); missing ones are 0. Give the count as it is, not clamped
/// to [0, 16]: ptxas 13.0 compiled `max(0, min(16, r)) == 16` (the clamp in the caller, this
/// test inlined) into VIMNMX.RELU's predicate with the wrong sense, so lanes holding 1..15
/// elements at an aligned address loaded 16 (the MoE dispatch's FP8 scales then took values of
/// the next row; tests/gpu/moe, case fp8_partial_vectors).
template <class T>
__device__ __forceinline__ void load16(const T* p, size_t i0, int avail, float v[kEPT]) {
  const T* q = p + i0;
  const int n = avail;
  if (avail >= kEPT && (reinterpret_cast<uintptr_t>(q) & 15u) == 0) {
    uint4 w[Vec<T>::kLoads];
#pragma unroll
    for (int l = 0; l < Vec<T>::kLoads; ++l) w[l] = reinterpret_cast<const uint4*>(q)[l];
    unpack16<T>(w, v);
  } else {
#pragma unroll
    for (int j = 0; j < kEPT; ++j) v[j] = j < n ? toF32(q[j]) : 0.f;
  }
}

/// 16-byte piece l of 16 values in T: values [l * 16 / sizeof(T), ...) (unpack16's inverse).
template <class T>
__device__ __forceinline__ uint4 packPiece(const float v[kEPT], int l) {
  uint32_t u[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (sizeof(T) == 4) u[k] = __float_as_uint(v[l * 4 + k]);
    else u[k] = pack2<T>(v[l * 8 + 2 * k], v[l * 8 + 2 * k + 1]);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

/// One float as T (the conversion of packPiece).
template <class T>
__device__ __forceinline__ T fromF32(float x) {
  if constexpr (sizeof(T) == 4) return x;
  else return T{uint16_t(pack2<T>(x, 0.f) & 0xffffu)};
}

/// Stores n <= 16 floats to elements [i0, i0 + n) of p.
template <class T>
__device__ __forceinline__ void store16(T* p, size_t i0, int n, const float v[kEPT]) {
  T* q = p + i0;
  if (n == kEPT && (reinterpret_cast<uintptr_t>(q) & 15u) == 0) {
#pragma unroll
    for (int l = 0; l < Vec<T>::kLoads; ++l) reinterpret_cast<uint4*>(q)[l] = packPiece<T>(v, l);
  } else {
#pragma unroll
    for (int j = 0; j < kEPT; ++j)
      if (j < n) q[j] = fromF32<T>(v[j]);
  }
}

/// Block mapping of the collectives (coalesced): a codec block of B = 16 G elements is cut into
/// 16-byte pieces of E = 16 / sizeof(T) elements and lane l of the block's group holds pieces l,
/// l + G, l + 2G, ...: its value j is element (j / E) G E + l E + j % E of the block. Every 16-byte
/// access instruction of a group then covers G * 16 contiguous bytes (whole 32-byte sectors; the
/// groups of a warp cover adjacent blocks), where one unit of 16 consecutive elements per lane
/// leaves every instruction half a sector per lane (stores: up to 6x slower, 16 MiB output).
/// The block's scale and every value's code do not depend on the mapping, only where a code sits
/// inside its unit, which every collective reads back with the same mapping.
template <class T, int B>
__device__ __forceinline__ size_t blockElem(int j, int lane) {
  return fp8::blockLaneElem(j, lane, B, int(sizeof(T)));
}

/// This lane's 16 values of codec block gb of p (block mapping); elements at or past n are 0
/// (n = 0: all zero, for idle groups).
template <class T, int B>
__device__ __forceinline__ void loadBlock16(const T* p, size_t gb, size_t n, int lane,
                                            float v[kEPT]) {
  constexpr int E = 16 / int(sizeof(T)), G = B / kEPT;
  const T* q = p + gb * B;
  if (gb * B + B <= n && (reinterpret_cast<uintptr_t>(q) & 15u) == 0) {
    uint4 w[Vec<T>::kLoads];
#pragma unroll
    for (int l = 0; l < Vec<T>::kLoads; ++l)
      w[l] = *reinterpret_cast<const uint4*>(q + size_t(l * G + lane) * E);
    unpack16<T>(w, v);
  } else {
#pragma unroll
    for (int j = 0; j < kEPT; ++j) {
      const size_t i = gb * B + blockElem<T, B>(j, lane);
      v[j] = i < n ? toF32(p[i]) : 0.f;
    }
  }
}

/// loadBlock16 of two blocks; when both are full and aligned every 16-byte load of both is issued
/// before any conversion.
template <class T, int B>
__device__ __forceinline__ void loadBlock16x2(const T* p, size_t ga, size_t na, size_t gb,
                                              size_t nb, int lane, float va[kEPT],
                                              float vb[kEPT]) {
  constexpr int E = 16 / int(sizeof(T)), G = B / kEPT;
  const T* qa = p + ga * B;
  const T* qb = p + gb * B;
  if (ga * B + B <= na && gb * B + B <= nb &&
      ((reinterpret_cast<uintptr_t>(qa) | reinterpret_cast<uintptr_t>(qb)) & 15u) == 0) {
    uint4 wa[Vec<T>::kLoads], wb[Vec<T>::kLoads];
#pragma unroll
    for (int l = 0; l < Vec<T>::kLoads; ++l) {
      wa[l] = *reinterpret_cast<const uint4*>(qa + size_t(l * G + lane) * E);
      wb[l] = *reinterpret_cast<const uint4*>(qb + size_t(l * G + lane) * E);
    }
    unpack16<T>(wa, va);
    unpack16<T>(wb, vb);
  } else {
    loadBlock16<T, B>(p, ga, na, lane, va);
    loadBlock16<T, B>(p, gb, nb, lane, vb);
  }
}

/// Stores this lane's 16 values of codec block gb of p (block mapping), elements below n only.
template <class T, int B>
__device__ __forceinline__ void storeBlock16(T* p, size_t gb, size_t n, int lane,
                                             const float v[kEPT]) {
  constexpr int E = 16 / int(sizeof(T)), G = B / kEPT;
  T* q = p + gb * B;
  if (gb * B + B <= n && (reinterpret_cast<uintptr_t>(q) & 15u) == 0) {
#pragma unroll
    for (int l = 0; l < Vec<T>::kLoads; ++l)
      *reinterpret_cast<uint4*>(q + size_t(l * G + lane) * E) = packPiece<T>(v, l);
  } else {
#pragma unroll
    for (int j = 0; j < kEPT; ++j) {
      const size_t i = gb * B + blockElem<T, B>(j, lane);
      if (i < n) p[i] = fromF32<T>(v[j]);
    }
  }
}

/// Hardware float pair -> e4m3 pair (RNE, satfinite); lo lands in the low byte. Float
/// subnormals give a zero of their sign (they are far below e4m3's smallest subnormal), as in
/// fp8::f32ToE4m3: fp8_selftest compares the two for every non-NaN float on the device.
__device__ __forceinline__ uint32_t cvtPair(float lo, float hi) { return dev::cvtE4m3x2(lo, hi); }

/// Device twin of fp8::encode for one value given its hardware code.
__device__ __forceinline__ uint32_t fixSpecial(float x, uint32_t hw) {
  uint32_t b = __float_as_uint(x), a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return fp8::kCodeNaN;
  if (a == 0x7f800000u) return (b >> 31) ? fp8::kCodeNegInf : fp8::kCodePosInf;
  return hw;
}

/// Quantizes this lane's 16 values of a block handled by `group` lanes (group = B/16); returns
/// the 16 codes and the block meta (identical in all lanes of the group). Blocks without NaN/Inf
/// (the common case) skip the per-element special-value handling.
__device__ __forceinline__ uint4 quantize16(const float v[kEPT], int group, fp8::Meta& metaOut) {
  // Largest magnitude over all 16 values (NaN/Inf included: they have the largest bit patterns).
  // Without NaN/Inf (amaxAll < Inf) it equals fp8::amaxUpdate's finite maximum and there is no
  // Inf; otherwise (rare) the lane recomputes both with the host's amaxUpdate.
  uint32_t amax = 0;
#pragma unroll
  for (int j = 0; j < kEPT; ++j) amax = max(amax, __float_as_uint(v[j]) & 0x7fffffffu);
  const bool special = amax >= 0x7f800000u;
  bool inf = false;
  if (special) {
    amax = 0;
#pragma unroll
    for (int j = 0; j < kEPT; ++j) fp8::amaxUpdate(v[j], amax, inf);
  }
  int infI = inf ? 1 : 0;
  for (int off = group >> 1; off > 0; off >>= 1) {
    amax = max(amax, dev::shflXor32(amax, off));
    infI |= dev::shflXor32(infI, off);
  }
  fp8::Meta meta = fp8::makeMeta(amax, infI != 0);
  float q = fp8::metaQuantMul(meta);
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t lo = cvtPair(__fmul_rn(v[4 * k], q), __fmul_rn(v[4 * k + 1], q));
    uint32_t hi = cvtPair(__fmul_rn(v[4 * k + 2], q), __fmul_rn(v[4 * k + 3], q));
    w[k] = lo | (hi << 16);
  }
  if (special) {  // rare: per-element NaN/Inf codes (no shuffles inside; finite values of an
                  // INF block need no fix: its scale keeps them below the Inf codes)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        word |= fixSpecial(v[4 * k + e], (w[k] >> (8 * e)) & 0xffu) << (8 * e);
      w[k] = word;
    }
  }
  metaOut = meta;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// Decodes 16 codes of a block with `meta` into v (exact e4m3 value times d, rounded once).
__device__ __forceinline__ void dequantize16(uint4 c, fp8::Meta meta, float v[kEPT]) {
  float d = fp8::metaDequantMul(meta);
  uint32_t w[4] = {c.x, c.y, c.z, c.w};
  if ((meta & fp8::kMetaInf) == 0) {  // common case: hardware decode, one multiply per element
#pragma unroll
    for (int k = 0; k < 4; ++k) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unsigned short pair = (w[k] >> (16 * h)) & 0xffffu;
        const uint32_t hh = dev::cvtE4m3x2ToF16x2(pair);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = dev::f16BitsToF32(uint16_t(hh >> (16 * e)));
          v[4 * k + 2 * h + e] = __fmul_rn(x, d);
        }
      }
    }
  } else {  // INF block: the host decoder, code by code
#pragma unroll
    for (int j = 0; j < kEPT; ++j)
      v[j] = fp8::decode(uint8_t(w[j >> 2] >> (8 * (j & 3))), d, true);
  }
}

/// Stores one unit's 16 codes (and, from lane 0 of the group, the block meta) at unit u of a
/// packed run whose metas start at offset mo.
template <int B>
__device__ __forceinline__ void putUnit(char* run, size_t mo, size_t u, int lane, uint4 c,
                                        fp8::Meta meta) {
  *reinterpret_cast<uint4*>(run + u * B + lane * kEPT) = c;
  if (lane == 0) *reinterpret_cast<fp8::Meta*>(run + mo + 4 * u) = meta;
}

/// Loads one unit's 16 codes and its block meta from unit u of a packed run.
template <int B>
__device__ __forceinline__ void getUnit(const char* run, size_t mo, size_t u, int lane, uint4& c,
                                        fp8::Meta& meta) {
  c = *reinterpret_cast<const uint4*>(run + u * B + lane * kEPT);
  meta = *reinterpret_cast<const fp8::Meta*>(run + mo + 4 * u);
}

__device__ __forceinline__ uint64_t* flagAt(uint64_t* base, int phase, int cta, int src) {
  return base + (size_t(phase) * kMaxCtas + cta) * kMaxRanks + src;
}

/// After all threads wrote their data for peers: thread t < size publishes `value` in rank t's
/// flag [phase][cta][rank]. Release at system scope after __syncthreads() makes every thread's
/// earlier stores (local and remote) visible before the flag.
__device__ __forceinline__ void signalAll(const Params& p, int phase, uint64_t value) {
  dev::fenceBeforeSignal();
  __syncthreads();
  int t = threadIdx.x;
  if (t < p.size) dev::stReleaseSys(flagAt(p.flags[t], phase, blockIdx.x, p.rank), value);
}

/// Thread t < size waits (acquire, system scope) until rank t published `value` in the local flag
/// [phase][cta][t]; then __syncthreads() so every thread may read what the peers wrote. Returns
/// false in every thread when a wait stopped (device/fail.cuh; recorded in the error words).
__device__ __forceinline__ bool waitAll(const Params& p, int phase, uint64_t value,
                                        dev::Waiter& w) {
  const int t = threadIdx.x;
  const bool failed =
      t < p.size && !dev::waitFlagGE(flagAt(p.flags[p.rank], phase, blockIdx.x, t), value, w, t);
  const bool ok = dev::syncThreadsOr(failed) == 0;
  dev::fenceAfterWait();
  return ok;
}

/// The FP8 kernels split each CTA into a producer team (quantize, push to peers) and a consumer
/// team (decode the local inboxes), so NVLink transfers of one tile overlap the local decoding of
/// an earlier one (dev::Team, gpu/device/sync.cuh).
using dev::Team;
using dev::teamAny;
using dev::teamSync;

/// signalAll for a team: after the team's stores (local and remote) or reads, thread t < size of
/// the team publishes `value` in rank t's flag [phase][cta][rank] (release, system scope).
__device__ __forceinline__ void teamSignal(const Params& p, const Team& tm, int phase,
                                           uint64_t value) {
  teamSync(tm);
  const int t = tm.tid();
  if (t < p.size) dev::stReleaseSys(flagAt(p.flags[t], phase, blockIdx.x, p.rank), value);
}

/// waitAll for a team: thread t < size of the team waits (acquire, system scope) until rank t
/// published at least `value` in the local flag [phase][cta][t], then the team synchronizes.
/// False in every thread of the team when a wait stopped.
__device__ __forceinline__ bool teamWait(const Params& p, const Team& tm, int phase,
                                         uint64_t value, dev::Waiter& w) {
  const int t = tm.tid();
  bool failed = t < p.size &&
                !dev::waitFlagGE(flagAt(p.flags[p.rank], phase, blockIdx.x, t), value, w, t);
  return !teamAny(tm, failed);
}

/// Start of a call's body (all threads): false when a wait stopped (device/fail.cuh); the body
/// then returns "stopped" to the peer-kernel skeleton. Otherwise, before writing
/// into any peer's staging, every peer's same CTA has finished reading everything of its
/// previous call (phase "done" reached epoch e0).
__device__ __forceinline__ bool beginCall(const Params& p, uint64_t e0, dev::Waiter& w) {
  return e0 == 0 || waitAll(p, kPhaseDone, e0, w);
}

/// End of a call, advance() of the peer-kernel skeleton (device/peer_kernel.cuh; all threads,
/// after its barrier): a completed call (ok) publishes "done" (after this CTA's last reads);
/// the epoch counter moves to lastEpoch on every path. A failed call publishes no "done": the
/// comm is aborted and peers stop waiting.
__device__ __forceinline__ void endCall(const Params& p, uint64_t lastEpoch, bool ok) {
  if (ok) signalAll(p, kPhaseDone, lastEpoch);
  if (threadIdx.x == 0) p.counters[blockIdx.x] = lastEpoch;
}

/// Host: the kernel instance f.template operator()<T, B>() for the call's element type (f32,
/// bf16, f16) and FP8 block size B (32, 64, 128, 256); cclxInternalError naming the kernel for
/// anything else (canRun admits neither).
template <class F>
auto kernelFor(DataType t, int B, const char* what, F&& f) {
  return dev::dispatchDtype(dev::RowTypes{}, t, what, [&]<class T>() {
    switch (B) {
      case 32: return f.template operator()<T, 32>();
      case 64: return f.template operator()<T, 64>();
      case 128: return f.template operator()<T, 128>();
      case 256: return f.template operator()<T, 256>();
      default: CCLX_THROW(cclxInternalError, "%s kernel launched with FP8 block size %d", what, B);
    }
  });
}

/// Most CTAs of a call: kMaxCtas and at most one per SM (co-residency; both ranks must compute
/// the same number, i.e. have GPUs with the same SM count).
inline int ctaCap(const DeviceCtx& ctx) {
  return ctx.smCount > 0 && ctx.smCount < kMaxCtas ? ctx.smCount : kMaxCtas;
}

/// Producer warps of a team kernel when CCLX_FP8_PRODUCER_WARPS is 0: all-gather and
/// reduce-scatter push what they quantize and are fastest with half the CTA producing;
/// all-to-all's consumer also quantizes and decodes the own segment, so it is fastest with 6 of
/// 16 (docs/PERF.md, run 8).
inline int defaultProducerWarps(CollType t) { return t == CollType::AllToAll ? 6 : kWarps / 2; }

/// Threads of a producer team of `warps` warps: whole hardware wavefronts (on AMD an odd number
/// of 32-lane warps rounds up to 64-lane wavefronts), at least one, and one left to the consumer.
inline int producerThreads(int warps) {
  constexpr int kPerWave = dev::kWaveLanes / 32;
  const int waves = std::min(std::max((warps + kPerWave - 1) / kPerWave, 1),
                             kThreads / dev::kWaveLanes - 1);
  return waves * dev::kWaveLanes;
}

/// Host side: fills the shared fields of Params. `slotsPerTile(tb)` is the staging bytes one CTA
/// needs for a tile of tb codec blocks; the largest tb that fits ctaBytes is taken. Returns false
/// when peer memory is not usable or not even one block fits.
/// `teams`: the kernel splits each CTA into a producer and a consumer team (the exchange
/// kernels); otherwise the whole CTA runs every phase of a tile (allreduce).
template <class NeedFn>
inline bool makeParams(const CollArgs& a, const DeviceCtx& ctx, NeedFn need, Params& p,
                       bool teams) {
  if (!ctx.peerUsable() || ctx.size < 2 || ctx.size > kMaxRanks) return false;
  const PeerMem& pm = *ctx.peer;
  const size_t B = size_t(ctx.cfg.fp8BlockSize);
  if (B < size_t(fp8::kMinBlock) || B > size_t(fp8::kMaxBlock) || (B & (B - 1)) != 0) return false;
  p = Params{};
  p.send = static_cast<const char*>(a.send);
  p.recv = static_cast<char*>(a.recv);
  p.count = a.count;
  p.rank = ctx.rank;
  p.size = ctx.size;
  p.avg = a.op.kind == RedOpKind::AVG ? 1 : 0;
  p.ctaBytes = (pm.regionBytes(StagingRegion::kFp8) / kMaxCtas) & ~size_t(255);
  size_t tb = p.ctaBytes / (B + 2);
  while (tb > 0 && need(tb, B) > p.ctaBytes) tb = tb > 64 ? tb - tb / 64 : tb - 1;
  if (tb == 0) return false;
  // Balanced tiling: rounds of `cap` CTAs with tiles of equal size, so every CTA does the same
  // number of tiles (no last round run by a few CTAs) and small messages still spread over all
  // CTAs. Rounds: at least what the staging needs and at least cfg.fp8TilesPerCta (with
  // teams the producer runs ahead of the consumer; the allreduce overlaps a tile's decoding with
  // the next tile's pushes) while a tile keeps one round of the unit groups of the threads that
  // walk it (minTb blocks) where the staging allows. Results do not depend on the tiling
  // (fp8_codec.h).
  p.nbAll = (a.count + B - 1) / B;
  const size_t cap = size_t(ctaCap(ctx));
  const size_t minTb = size_t(teams ? kThreads / 2 : kThreads) * kEPT / B;
  const size_t depth = size_t(std::max(ctx.cfg.fp8TilesPerCta, 1));
  size_t rounds = (p.nbAll + tb * cap - 1) / (tb * cap);
  rounds = std::max(rounds, std::min(depth, p.nbAll / (minTb * cap)));
  if (rounds == 0) rounds = 1;
  size_t bal = (p.nbAll + rounds * cap - 1) / (rounds * cap);
  if (bal < minTb) bal = minTb;
  if (bal > tb) bal = tb;
  p.tileBlocks = bal;
  p.nTiles = (p.nbAll + bal - 1) / bal;
  for (int r = 0; r < ctx.size; ++r) {
    p.staging[r] = pm.region(r, StagingRegion::kFp8);
    p.flags[r] = reinterpret_cast<uint64_t*>(pm.signalRegion(r, SignalRegion::kFp8));
  }
  p.counters = ctx.counters + kCounterFp8;
  p.fail = failParams(a, ctx);
  p.outBytes = a.count * dtypeSize(a.dtype) *
               (a.type == CollType::AllGather || a.type == CollType::AllToAll ? size_t(ctx.size) : 1);
  p.producerThreads = teams ? producerThreads(ctx.cfg.fp8ProducerWarps > 0
                                                  ? ctx.cfg.fp8ProducerWarps
                                                  : defaultProducerWarps(a.type))
                             : kThreads;
  return true;
}

/// CTAs of a call: one per tile, at most kMaxCtas and at most one per SM (co-residency; both
/// ranks must compute the same number, i.e. have GPUs with the same SM count).
inline int gridFor(const Params& p, const DeviceCtx& ctx) {
  const size_t cap = size_t(ctaCap(ctx));
  return int(p.nTiles < cap ? p.nTiles : cap);
}

}  // namespace fp8dev
}  // namespace cclx
