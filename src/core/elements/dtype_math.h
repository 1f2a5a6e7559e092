// src/core/elements: the element rules host and device code share, so that a CPU twin computes
// the GPU kernel's bits: this file (element types and reduction arithmetic), fp8_codec.h (the FP8
// codec), lamport.h (data-as-flag element rules), rmsnorm.h (the fused allreduce + RMSNorm's row
// rules), outputs.h (what a failed call leaves in its outputs).
//
// Element types and reduction arithmetic shared by host and device code.
//
// The host transport and the CUDA kernels both include this header so that one element is reduced
// with exactly the same operations on both: 16-bit floats are widened to float, accumulated in
// float over ranks 0..N-1 in that order, and rounded once (round-to-nearest-even) at the end.
// This is what makes the CPU twin tests meaningful for the GPU algorithms.
#pragma once

#include <cclx/cclx.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // __host__, __device__, __forceinline__ (nvcc predefines them)
#endif
#if defined(__CUDACC__) || defined(__HIPCC__)
#define CCLX_HD __host__ __device__ __forceinline__
#else
#define CCLX_HD inline
#endif
// The device pass of the CUDA or the HIP compiler: device intrinsics instead of the host forms.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define CCLX_DEVICE_PASS 1
#endif

namespace cclx {

struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };
struct fp8e4m3_t { uint8_t bits; };
struct fp8e5m2_t { uint8_t bits; };

namespace math {

CCLX_HD uint32_t f32Bits(float f) {
#if defined(CCLX_DEVICE_PASS)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
CCLX_HD float bitsF32(uint32_t u) {
#if defined(CCLX_DEVICE_PASS)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

CCLX_HD float bf16ToF32(uint16_t h) { return bitsF32(uint32_t(h) << 16); }
/// Round-to-nearest-even; NaN stays NaN (quiet), Inf stays Inf.
CCLX_HD uint16_t f32ToBf16(float f) {
  uint32_t x = f32Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

CCLX_HD float f16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bitsF32(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = float(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return bitsF32(sign | ((e + 112u) << 23) | (m << 13));
}
/// Round-to-nearest-even, subnormals included; overflow gives Inf; NaN stays NaN.
CCLX_HD uint16_t f32ToF16(float f) {
  uint32_t x = f32Bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return uint16_t(sign);
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return uint16_t(sign | r);
  }
  uint32_t r = (a - 0x38000000u) >> 13, rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
  return uint16_t(sign | r);
}

// Accumulator type per element type: 16-bit floats accumulate in float, others in themselves.
template <class T> struct AccOf { using type = T; };
template <> struct AccOf<bf16_t> { using type = float; };
template <> struct AccOf<f16_t> { using type = float; };

template <class T> CCLX_HD typename AccOf<T>::type load(T v) { return v; }
template <> CCLX_HD float load<bf16_t>(bf16_t v) { return bf16ToF32(v.bits); }
template <> CCLX_HD float load<f16_t>(f16_t v) { return f16ToF32(v.bits); }

template <class T> CCLX_HD T store(typename AccOf<T>::type a) { return a; }
template <> CCLX_HD bf16_t store<bf16_t>(float a) { return bf16_t{f32ToBf16(a)}; }
template <> CCLX_HD f16_t store<f16_t>(float a) { return f16_t{f32ToF16(a)}; }

/// Integer sums and products wrap around (two's complement, as NCCL's): signed integers add and
/// multiply as their unsigned counterparts, where overflow is defined.
template <class A> CCLX_HD A add(A a, A b) {
  if constexpr (std::is_integral_v<A> && std::is_signed_v<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(a) + U(b));
  } else {
    return a + b;
  }
}
template <class A> CCLX_HD A mul(A a, A b) {
  if constexpr (std::is_integral_v<A> && std::is_signed_v<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(a) * U(b));
  } else {
    return a * b;
  }
}

/// Reduction of accumulators. PREMUL_SUM's factor is applied in prepare(), AVG's division in
/// finish(); both combine as SUM.
template <RedOpKind Op, class A> CCLX_HD A combine(A a, A b) {
  if constexpr (Op == RedOpKind::SUM || Op == RedOpKind::AVG || Op == RedOpKind::PREMUL_SUM) {
    return add(a, b);
  } else if constexpr (Op == RedOpKind::PRODUCT) {
    return mul(a, b);
  } else if constexpr (Op == RedOpKind::MIN) {
    return (b < a) ? b : a;
  } else if constexpr (Op == RedOpKind::MAX) {
    return (b > a) ? b : a;
  } else if constexpr (Op == RedOpKind::BAND) {
    return a & b;
  } else if constexpr (Op == RedOpKind::BOR) {
    return a | b;
  } else {
    return a ^ b;
  }
}
/// Applied to each rank's value as it is loaded.
template <RedOpKind Op, class A> CCLX_HD A prepare(A v, A factor) {
  if constexpr (Op == RedOpKind::PREMUL_SUM) return mul(v, factor); else return v;
}
/// Applied once to the reduced value.
template <RedOpKind Op, class A> CCLX_HD A finish(A v, int nranks) {
  if constexpr (Op == RedOpKind::AVG) return v / A(nranks); else return v;
}

}  // namespace math
}  // namespace cclx
