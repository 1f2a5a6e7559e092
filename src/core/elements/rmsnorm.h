// The element rules of the fused "allreduce + residual add + RMSNorm (+ FP8)" collective
// (Comm::allReduceRmsNorm), shared by the host twin (src/host/rmsnorm*.cc) and the GPU kernels
// (src/gpu/fused/*.cu), so that both give the same bits. docs/design/fused-rmsnorm.md
// has the contract.
//
// Per token row of H elements of type T (f32, bf16, f16), with ar the allreduce result:
//   ar[i]  = T(sum over ranks 0..N-1, in that order, of f32(x_r[i]))  (dtype_math.h; an ordinary
//            SUM allreduce: this is the value an unfused allreduce hands back)
//   r[i]   = T(f32(ar[i]) + f32(residual[i]))                 the residual output
//   ss     = sum of f32(r[i])^2 in the canonical order below (f32, every product and sum rounded
//            on its own, never fused)
//   inv    = 1 / sqrt(ss / H + eps)                           (f32 divide, sqrt, divide, add)
//   y[i]   = T((f32(r[i]) * inv) * f32(weight[i]))              the normalized output
// and with FP8 output, per row:
//   scale  = amax / 448 over the finite |f32(y[i])| (1 when amax is 0, at least 2^-126;
//            fp8::makeMeta), or the given static scale s
//   q[i]   = e4m3(f32(y[i]) * (1 / scale))                    round to nearest even, saturating
//            to +-448 (an Inf becomes +-448), NaN -> 0x7F; dequantized value q[i] * scale
// So the residual output is rounded to T before the norm reads it (y is a function of the
// outputs alone: y = rmsnorm(r)), and y is rounded once, from f32.
//
// Canonical order of ss. A row is cut into vectors of E = 16 / sizeof(T) elements (vector v holds
// elements [vE, vE + E); the last one may be partial). Partial sum j (j < kPartials = 1024)
// accumulates the vectors v = j, j + 1024, ... in increasing order, each vector's elements in
// order: p_j = p_j + e * e, starting from +0. Then each group of 32 partials [32w, 32w + 32) is
// reduced by the halving tree a[k] = a[k] + a[k + s] (s = 16, 8, 4, 2, 1; k < s) into g_w, and
// the 32 group values g_0..g_31 by the same tree into ss. Adding +0 is exact, so partials and
// groups without elements change nothing. On the GPU a block of T threads (T a power of two,
// 128..512) gives thread t the vectors v with v % T == t: its partials are t + kT, a warp's
// xor-butterfly is the halving tree of one group, and warp 0 reduces the groups (gpu/fused/row.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cmath>

#include "core/elements/dtype_math.h"
#include "core/elements/fp8_codec.h"

namespace cclx {
namespace rms {

constexpr int kPartials = 1024;  // partial sums of squares per row (canonical order)
constexpr int kGroup = 32;       // partials per group (one warp)
constexpr int kVecBytes = 16;    // bytes of one row vector
constexpr float kFp8Max = 448.f;

/// Elements of one row vector for elements of `esize` bytes.
CCLX_HD int vecElems(size_t esize) { return int(kVecBytes / esize); }
/// Vectors of a row of `hidden` elements.
CCLX_HD size_t rowVecs(size_t hidden, size_t esize) {
  const size_t e = kVecBytes / esize;
  return (hidden + e - 1) / e;
}

/// sqrt rounded once (IEEE).
CCLX_HD float sqrtRn(float x) {
#if defined(CCLX_DEVICE_PASS)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

/// acc + x * x, the product rounded on its own.
CCLX_HD float sqAdd(float acc, float x) { return fp8::addRn(acc, fp8::mulRn(x, x)); }
/// r = ar + residual (in f32; the caller rounds to T).
CCLX_HD float residualAdd(float ar, float res) { return fp8::addRn(ar, res); }
/// 1 / sqrt(ss / hidden + eps).
CCLX_HD float invRms(float ss, size_t hidden, float eps) {
  return fp8::divRn(1.f, sqrtRn(fp8::addRn(fp8::divRn(ss, float(hidden)), eps)));
}
/// (r * inv) * w (in f32; the caller rounds to T).
CCLX_HD float normalize(float r, float inv, float w) {
  return fp8::mulRn(fp8::mulRn(r, inv), w);
}

/// Folds |y| into the running largest finite magnitude (as bits; order-free).
CCLX_HD uint32_t amaxFold(uint32_t amaxBits, float y) {
  const uint32_t a = math::f32Bits(y) & 0x7fffffffu;
  return a < 0x7f800000u && a > amaxBits ? a : amaxBits;
}
/// The dynamic per-token scale of a row whose largest finite |y| has bits `amaxBits`.
CCLX_HD float tokenScale(uint32_t amaxBits) {
  return fp8::metaDequantMul(fp8::makeMeta(amaxBits, false));
}
/// The multiplier applied before encoding.
CCLX_HD float quantMul(float scale) { return fp8::divRn(1.f, scale); }
/// e4m3 code of y (saturating; NaN -> 0x7F; never 0xFF).
CCLX_HD uint8_t quantize(float y, float qmul) { return fp8::f32ToE4m3(fp8::mulRn(y, qmul)); }

/// Halving tree of 32 values (a is overwritten): a[k] += a[k + s] for s = 16..1; returns a[0].
CCLX_HD float tree32(float* a) {
  for (int s = kGroup / 2; s >= 1; s /= 2)
    for (int k = 0; k < s; ++k) a[k] = fp8::addRn(a[k], a[k + s]);
  return a[0];
}

/// Host reference of the canonical sum of squares of f32 values r[0..hidden) of a row of
/// elements of `esize` bytes (the vector length E follows from it).
inline float sumSquares(const float* r, size_t hidden, size_t esize) {
  float p[kPartials] = {};
  const size_t E = kVecBytes / esize;
  for (size_t i = 0; i < hidden; ++i) {
    const size_t j = (i / E) % kPartials;
    p[j] = sqAdd(p[j], r[i]);
  }
  float g[kGroup];
  for (int w = 0; w < kGroup; ++w) g[w] = tree32(p + w * kGroup);
  return tree32(g);
}

/// One row's outputs on the host, from the allreduce result `ar` (T bits, as loaded by math::load)
/// with the element rules above. T is float, bf16_t or f16_t. Aliasing: rOut may equal res, y may
/// equal ar (elements are read before the same element is written). q / scaleOut may be null (no
/// FP8 output); staticScale null: dynamic scale.
template <class T>
void rowHost(const T* ar, const T* res, const T* w, size_t hidden, float eps, T* rOut, T* y,
             uint8_t* q, float* scaleOut, const float* staticScale, float* tmp) {
  for (size_t i = 0; i < hidden; ++i) {
    const T r = math::store<T>(residualAdd(math::load<T>(ar[i]), math::load<T>(res[i])));
    tmp[i] = math::load<T>(r);
    rOut[i] = r;
  }
  const float inv = invRms(sumSquares(tmp, hidden, sizeof(T)), hidden, eps);
  uint32_t amax = 0;
  for (size_t i = 0; i < hidden; ++i) {
    const T yi = math::store<T>(normalize(tmp[i], inv, math::load<T>(w[i])));
    if (y) y[i] = yi;
    tmp[i] = math::load<T>(yi);
    amax = amaxFold(amax, tmp[i]);
  }
  if (!q) return;
  const float scale = staticScale ? *staticScale : tokenScale(amax);
  const float qm = quantMul(scale);
  for (size_t i = 0; i < hidden; ++i) q[i] = quantize(tmp[i], qm);
  *scaleOut = scale;
}

}  // namespace rms
}  // namespace cclx
