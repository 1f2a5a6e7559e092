// Device side of the fused allreduce + residual add + RMSNorm (+ FP8): the row epilogue every
// kernel of src/gpu/fused shares, with core/elements/rmsnorm.h's element rules and its canonical order of
// the sum of squares, so that the GPU gives the host twin's bits.
//
// A token row is handled by one block of T threads (T a power of two, 128..512); thread t takes
// the row's 16-byte vectors v = t, t + T, ... (its i-th vector is v = t + iT). Pass 1 (the
// caller's loop) turns each reduced vector ar into r = T(ar + residual), stores it to the
// residual output and adds its squares to partial (v % 1024) / T = i % K of the thread (K =
// 1024 / T). finishRow() then reduces the partials in the canonical order (a warp's xor butterfly
// is the halving tree of one group of 32 partials; warp 0 reduces the 32 group values), computes
// y per vector from r read back from the residual output (the same thread stored it), and with
// FP8 output the per-token scale (block max of |y|) and the codes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/device/units.cuh"  // first: the GPU runtime headers (CUDA or HIP)

#include "core/elements/lamport.h"
#include "core/elements/rmsnorm.h"

namespace cclx {
namespace fused {

constexpr int kMaxAcc = rms::kPartials / 128;  // partials per thread at the smallest block (128)

/// The call's user buffers and shape (by value in every kernel's parameters).
struct RowArgs {
  const char* x;
  const char* res;
  char* rOut;
  const char* w;
  char* y;              // null: no normalized output (FP8 only)
  uint8_t* q;           // null: no FP8 output
  float* scales;
  const float* staticScale;  // null: dynamic per-token scale
  size_t tokens, hidden;
  float eps;
};

/// Shared memory of finishRow.
struct RowShared {
  float group[32];
  uint32_t amax[32];
  float total;
  uint32_t amaxAll;
};

using Words = uint32_t[4];

/// Token rows of rank `s` when `tokens` rows are split over `n` ranks (the first tokens % n ranks
/// get one more, as the host's splitRange).
__host__ __device__ __forceinline__ size_t firstRow(size_t tokens, int n, int s) {
  const size_t q = tokens / size_t(n), r = tokens % size_t(n);
  return size_t(s) * q + (size_t(s) < r ? size_t(s) : r);
}
__host__ __device__ __forceinline__ int ownerOf(size_t tokens, int n, size_t row) {
  const size_t q = tokens / size_t(n), r = tokens % size_t(n);
  const size_t big = r * (q + 1);
  return row < big ? int(row / (q + 1)) : int(r + (row - big) / q);
}

/// Poisons every output of the call (all-ones bytes: NaN in every float type and in e4m3) from
/// thread `t` of `threads`.
__device__ __forceinline__ void poisonOutputs(const RowArgs& a, size_t esize, size_t t,
                                              size_t threads) {
  const size_t n = a.tokens * a.hidden;
  dev::poison(a.rOut, n * esize, t, threads);
  dev::poison(a.y, n * esize, t, threads);
  dev::poison(reinterpret_cast<char*>(a.q), n, t, threads);
  if (a.q) dev::poison(reinterpret_cast<char*>(a.scales), a.tokens * sizeof(float), t, threads);
}
__device__ __forceinline__ void poisonShare(const RowArgs& a, size_t esize) {
  poisonOutputs(a, esize, size_t(blockIdx.x) * blockDim.x + threadIdx.x,
                size_t(gridDim.x) * blockDim.x);
}
__device__ __forceinline__ void poisonAll(const RowArgs& a, size_t esize) {
  poisonOutputs(a, esize, threadIdx.x, blockDim.x);
}

template <class T>
struct RowOps {
  static constexpr int S = int(sizeof(T));
  static constexpr int E = 16 / S;  // elements per vector
  using A = typename math::AccOf<T>::type;
  const RowArgs& a;
  size_t V;  // vectors per row
  int K;     // partials per thread

  __device__ explicit RowOps(const RowArgs& args)
      : a(args), V(rms::rowVecs(args.hidden, sizeof(T))), K(rms::kPartials / int(blockDim.x)) {}

  __device__ static T elem(const Words& w, int k) {
    T t;
    memcpy(&t, reinterpret_cast<const char*>(w) + k * S, S);
    return t;
  }
  __device__ static void set(Words& w, int k, T t) {
    memcpy(reinterpret_cast<char*>(w) + k * S, &t, S);
  }
  /// Elements of vector v that belong to the row (E except for a partial last vector).
  __device__ int valid(size_t v) const {
    const size_t left = a.hidden - v * E;
    return left < size_t(E) ? int(left) : E;
  }
  __device__ const char* at(const char* base, size_t row, size_t v) const {
    return base + (row * a.hidden + v * E) * S;
  }
  /// Vector v of `row` of a [tokens, hidden] buffer (zero beyond the row), any alignment.
  __device__ void load(const char* base, size_t row, size_t v, Words& w) const {
    dev::loadUnit<16>(at(base, row, v), valid(v) * S, w);
  }
  __device__ void store(char* base, size_t row, size_t v, const Words& w) const {
    dev::storeUnit<16>(const_cast<char*>(at(base, row, v)), valid(v) * S, w);
  }
  /// Vector v of x as it travels: zero-padded, every all-ones element replaced (lamport::canon).
  __device__ dev::V16 own(size_t row, size_t v) const {
    Words w;
    load(a.x, row, v, w);
    return {lamport::canon<S>(uint64_t(w[0]) | uint64_t(w[1]) << 32),
            lamport::canon<S>(uint64_t(w[2]) | uint64_t(w[3]) << 32)};
  }

  /// Pass 1 for this thread's i-th vector v of `row`: r = T(ar + residual) into `r` and the
  /// residual output, its squares into partial i % K.
  __device__ void residual(size_t row, size_t v, int i, const Words& ar, Words& r,
                           float (&acc)[kMaxAcc]) const {
    Words res;
    load(a.res, row, v, res);
    const int n = valid(v), k = i % K;
    float cur = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxAcc; ++j)
      if (j == k) cur = acc[j];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const T t = math::store<T>(rms::residualAdd(math::load<T>(elem(ar, e)), math::load<T>(elem(res, e))));
      set(r, e, e < n ? t : T{});
      if (e < n) cur = rms::sqAdd(cur, math::load<T>(t));
    }
#pragma unroll
    for (int j = 0; j < kMaxAcc; ++j)
      if (j == k) acc[j] = cur;
    store(a.rOut, row, v, r);
  }

  /// The canonical sum of the block's partials (every thread gets it; two block barriers).
  __device__ float blockSum(const float (&acc)[kMaxAcc], RowShared& sh) const {
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5), wpb = int(blockDim.x >> 5);
#pragma unroll
    for (int k = 0; k < kMaxAcc; ++k) {
      if (k < K) {  // block-uniform
        float s = acc[k];
#pragma unroll
        for (int m = 16; m >= 1; m >>= 1) s = fp8::addRn(s, dev::shflXor32(s, m));
        if (lane == 0) sh.group[warp + k * wpb] = s;
      }
    }
    __syncthreads();
    if (warp == 0) {
      float s = sh.group[lane];
#pragma unroll
      for (int m = 16; m >= 1; m >>= 1) s = fp8::addRn(s, dev::shflXor32(s, m));
      if (lane == 0) sh.total = s;
    }
    __syncthreads();
    return sh.total;
  }
  /// The largest of every thread's `m` (order-free; two block barriers).
  __device__ uint32_t blockMax(uint32_t m, RowShared& sh) const {
    const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
#pragma unroll
    for (int s = 16; s >= 1; s >>= 1) {
      const uint32_t o = dev::shflXor32(m, s);
      m = o > m ? o : m;
    }
    if (lane == 0) sh.amax[warp] = m;
    __syncthreads();
    if (warp == 0) {
      m = lane < int(blockDim.x >> 5) ? sh.amax[lane] : 0u;
#pragma unroll
      for (int s = 16; s >= 1; s >>= 1) {
        const uint32_t o = dev::shflXor32(m, s);
        m = o > m ? o : m;
      }
      if (lane == 0) sh.amaxAll = m;
    }
    __syncthreads();
    return sh.amaxAll;
  }

  /// y of vector v from r (read back from the residual output) and the weight.
  __device__ void normalized(size_t row, size_t v, float inv, Words& y) const {
    Words r, w;
    load(a.rOut, row, v, r);
    dev::loadUnit<16>(a.w + v * E * S, valid(v) * S, w);
    const int n = valid(v);
#pragma unroll
    for (int e = 0; e < E; ++e)
      set(y, e, e < n ? math::store<T>(rms::normalize(math::load<T>(elem(r, e)), inv,
                                                      math::load<T>(elem(w, e))))
                      : T{});
  }

  /// After pass 1 of `row` (every thread of the block, uniformly): the norm and the FP8 output.
  /// onY(v, y) sees every y vector (zero-padded), onQ(v, codes) every vector's E codes (low bytes
  /// first, zero beyond the row), onScale(scale) the scale (thread 0).
  template <class OnY, class OnQ, class OnScale>
  __device__ void finishRow(size_t row, const float (&acc)[kMaxAcc], RowShared& sh, OnY&& onY,
                            OnQ&& onQ, OnScale&& onScale) const {
    const float inv = rms::invRms(blockSum(acc, sh), a.hidden, a.eps);
    uint32_t amax = 0;
    for (size_t v = threadIdx.x; v < V; v += blockDim.x) {
      Words y;
      normalized(row, v, inv, y);
      if (a.y) store(a.y, row, v, y);
      const int n = valid(v);
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (e < n) amax = rms::amaxFold(amax, math::load<T>(elem(y, e)));
      onY(v, y);
    }
    if (!a.q) return;
    const float scale = a.staticScale ? *a.staticScale : rms::tokenScale(blockMax(amax, sh));
    if (threadIdx.x == 0) {
      a.scales[row] = scale;
      onScale(scale);
    }
    const float qm = rms::quantMul(scale);
    for (size_t v = threadIdx.x; v < V; v += blockDim.x) {
      Words y;
      normalized(row, v, inv, y);
      const int n = valid(v);
      uint32_t c[2] = {0, 0};
#pragma unroll
      for (int e = 0; e < E; e += 2) {
        const uint32_t two = dev::cvtE4m3x2(fp8::mulRn(math::load<T>(elem(y, e)), qm),
                                            fp8::mulRn(math::load<T>(elem(y, e + 1)), qm));
        const uint32_t lo = e < n ? (two & 0xffu) : 0u, hi = e + 1 < n ? (two >> 8) & 0xffu : 0u;
        c[e / 4] |= (lo | hi << 8) << (8 * (e % 4));
      }
      dev::storeUnit<8>(reinterpret_cast<char*>(a.q) + row * a.hidden + v * E, n, c);
      onQ(v, c);
    }
  }
};

/// Block threads for rows of `vecs` vectors: a power of two in 128..512.
inline int rowThreads(size_t vecs) {
  int t = 128;
  while (t < 512 && size_t(t) < vecs) t *= 2;
  return t;
}

}  // namespace fused
}  // namespace cclx
