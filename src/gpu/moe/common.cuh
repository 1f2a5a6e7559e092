// Device pieces the MoE kernels share (dispatch.cu, combine.cu): 16-byte units of a row in the
// tokens' dtype as floats, a block-wide prefix sum, bit-mask positions, the poison of a call's
// outputs. Internal to the including file.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/moe/layout.h"
#include "gpu/device/launch.cuh"
#include "gpu/device/peer_kernel.cuh"
#include "gpu/device/slots.cuh"
#include "gpu/device/units.cuh"
#include "gpu/fp8/device.cuh"
#include "gpu/moe/moe.h"

namespace cclx {
namespace moegpu {
namespace {

/// Elements of T in a 16-byte unit.
template <class T>
constexpr int kPerUnit = 16 / int(sizeof(T));

/// A 16-byte unit of T values as floats (exact widening).
template <class T>
__device__ __forceinline__ void unpackUnit(uint4 u, float (&v)[kPerUnit<T>]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (sizeof(T) == 4) {
      v[k] = __uint_as_float(w[k]);
    } else {
      v[2 * k] = fp8dev::toF32<T>(uint16_t(w[k] & 0xffffu));
      v[2 * k + 1] = fp8dev::toF32<T>(uint16_t(w[k] >> 16));
    }
  }
}

/// Rows of floats for units of T, set to zero.
template <class T, int U>
__device__ __forceinline__ void zeroUnits(float (&acc)[U][kPerUnit<T>]) {
#pragma unroll
  for (int i = 0; i < U; ++i)
#pragma unroll
    for (int c = 0; c < kPerUnit<T>; ++c) acc[i][c] = 0.f;
}

/// Floats rounded once to T (round to nearest even), as a 16-byte unit.
template <class T>
__device__ __forceinline__ uint4 packUnit(const float (&v)[kPerUnit<T>]) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (sizeof(T) == 4) w[k] = __float_as_uint(v[k]);
    else w[k] = fp8dev::pack2<T>(v[2 * k], v[2 * k + 1]);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// Unit u (16 bytes; `valid` of them real, the rest read as 0) of a user row at `row`, which may
/// be unaligned.
__device__ __forceinline__ uint4 loadUserUnit(const char* row, size_t u, int valid) {
  uint32_t w[4];
  dev::loadUnit<16>(row + u * 16, valid, w);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void storeUserUnit(char* row, size_t u, int valid, uint4 x) {
  const uint32_t w[4] = {x.x, x.y, x.z, x.w};
  dev::storeUnit<16>(row + u * 16, valid, w);
}
/// Whether every row base + i * bytes starts on 16 bytes and holds whole 16-byte units (the
/// copy loops' fast path: plain vector loads, several in flight per lane).
__device__ __forceinline__ bool rowsAligned(const void* base, size_t bytes) {
  return ((reinterpret_cast<uintptr_t>(base) | bytes) & 15u) == 0;
}
/// 16-byte units a lane loads before it uses the first of them (the copy loops' memory-level
/// parallelism: one round trip to memory per kCopyBatch units instead of per unit).
constexpr int kCopyBatch = 8;

/// Bytes of unit u in a row of `bytes` bytes.
__device__ __forceinline__ int unitValid(size_t bytes, size_t u) {
  const size_t left = bytes - u * 16;
  return left < 16 ? int(left) : 16;
}

/// Block-wide exclusive prefix sum of a[0..n) in shared memory, in place (all threads call it);
/// returns the total in every thread.
__device__ inline int blockScan(int* a, int n) {
  __shared__ int warpSum[kWarps];
  const int t = int(threadIdx.x), lane = t & 31, warp = t >> 5;
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, t * per), hi = min(n, lo + per);
  int s = 0;
  for (int i = lo; i < hi; ++i) s += a[i];
  int x = s;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int y = dev::shfl32(x, lane >= off ? lane - off : lane);
    if (lane >= off) x += y;
  }
  if (lane == 31) warpSum[warp] = x;
  __syncthreads();
  int before = 0, total = 0;
  for (int i = 0; i < kWarps; ++i) {
    if (i < warp) before += warpSum[i];
    total += warpSum[i];
  }
  int run = before + x - s;
  for (int i = lo; i < hi; ++i) {
    const int v = a[i];
    a[i] = run;
    run += v;
  }
  __syncthreads();
  return total;
}

/// Column r of a word-major mask table ([W][R], core/moe/tables.h): bit t (token t chose r), and
/// the set bits below bit t (the tokens before t that chose r) or in the first W words.
__device__ __forceinline__ bool colBit(const uint32_t* mask, int R, int r, int t) {
  return (mask[size_t(t >> 5) * size_t(R) + size_t(r)] >> (t & 31)) & 1u;
}
__device__ __forceinline__ int colBitsAll(const uint32_t* mask, int R, int r, int W) {
  const uint32_t* c = mask + r;
  int n = 0;
#pragma unroll 8
  for (int i = 0; i < W; ++i) n += __popc(c[size_t(i) * size_t(R)]);
  return n;
}
__device__ __forceinline__ int colBitsBelow(const uint32_t* mask, int R, int r, int t) {
  const uint32_t low = (1u << (t & 31)) - 1u;
  const uint32_t word = mask[size_t(t >> 5) * size_t(R) + size_t(r)];
  return colBitsAll(mask, R, r, t >> 5) + __popc(word & low);
}

/// This rank's buffer base.
__device__ __forceinline__ char* mine(const Params& p) { return p.peer[p.lay.rank]; }

template <class V>
__device__ __forceinline__ V* localAt(const Params& p, size_t off) {
  return reinterpret_cast<V*>(mine(p) + off);
}

}  // namespace
}  // namespace moegpu
}  // namespace cclx
