// Stochastic rounding f32 -> bf16 and the element rules of reduce_scatter_quantized, shared by
// host and device code (the CPU twin host/algos/quantized.cc and the CUDA kernels of
// src/gpu/quantized compute the same bits from this one definition).
//
// Rounding: a float lies between two neighbouring bf16 values lo <= x <= hi (same sign, |lo| <=
// |x|); the result is hi with probability (|x| - |lo|) / (|hi| - |lo|), else lo, so the expected
// result is x (unbiased). The draw is a counter-based hash of (seed, element index, source rank):
// 16 random bits r are added to the 16 bits bf16 drops and the sum truncated, i.e. the magnitude
// rounds away from zero iff low16(x) + r >= 2^16. Values that bf16 holds exactly (low 16 bits
// zero: 0, +-Inf, every bf16) never change; NaN stays NaN (quiet); the largest finite floats may
// round up to Inf (their upper neighbour), as round-to-nearest may.
//
// Reduction (reduceScatterQuantized): element i of destination rank d travels from source rank s
// as srBf16(send_s[d * count + i], seed_s, d * count + i, s); rank d sums the widened bf16 values
// in float over s = 0..N-1 in that order (the first term is the value itself), AVG divides the
// float sum by N once (round to nearest).
#pragma once

#include <cstdint>

#include "core/elements/dtype_math.h"

namespace cclx {
namespace sr {

/// splitmix64's finalizer: a bijection of 64-bit words with full avalanche.
CCLX_HD uint64_t mix64(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z;
}

/// The 16 random bits of element `index` sent by rank `rank` under `seed` (a pure function).
CCLX_HD uint32_t draw16(uint64_t seed, uint64_t index, uint32_t rank) {
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * (index + 1));
  h = mix64(h ^ (0xd1b54a32d192ed03ull * (uint64_t(rank) + 1)));
  return uint32_t(h >> 48);
}

/// x rounded stochastically to bf16 bits with random bits r16 (< 2^16): up in magnitude iff the
/// dropped bits plus r16 carry. NaN gives a quiet NaN of x's sign and upper payload.
CCLX_HD uint16_t roundBf16(float x, uint32_t r16) {
  const uint32_t b = math::f32Bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40u);
  return uint16_t((b + (r16 & 0xffffu)) >> 16);
}

/// The contribution of rank `rank` for element `index` (of its whole send buffer) under `seed`.
CCLX_HD uint16_t srBf16(float x, uint64_t seed, uint64_t index, uint32_t rank) {
  return roundBf16(x, draw16(seed, index, rank));
}

}  // namespace sr
}  // namespace cclx
