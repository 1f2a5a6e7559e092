// FP8 e4m3 codec with one float scale per block of B values, shared by host and device.
//
// Element format: OCP e4m3 "fn" (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; largest
// finite 448, smallest subnormal 2^-9, no Inf, NaN = S.1111.111). Conversion is round to nearest
// even with saturation to +-448 (a finite value never becomes NaN).
//
// Block scale ("meta", 32 bits): the float d = amax / 448 (416 in INF blocks) of the block's
// largest finite magnitude amax (d = 1 for a block without finite non-zero values, d >= 2^-126 so
// that 1/d is finite), with the sign bit used as the INF flag. A value x is stored as e4m3(x * s)
// with s = 1 / d and read back as e4m3value * d. Every step is one IEEE float operation rounded to
// nearest (division, multiply: the device uses __fdiv_rn/__fmul_rn, so no FMA contraction and no
// approximate division), so host and device produce the same bits. The block maximum lands on 448
// (within a rounding) and is nearly exact; measured against a power-of-two scale this halves the
// error of outlier-dominated data (docs/PERF.md).
//
// Specials: NaN is encoded as 0x7F. A block that contains +-Inf gets the INF flag and the scale
// d = amax / 416, so its finite values take codes up to +-416 (0x7D / 0xFD) and the codes of
// +-448 are free: 0x7E means +Inf and 0xFE means -Inf. NaN and Inf do not take part in the scale.
// No encoder output is ever 0xFF, so no 8-byte run of codes is all ones: the one-shot allreduce
// (fp8_oneshot.cu) uses all ones as its "not yet written" mark.
//
// Packed layout of a run of nb blocks in staging memory: nb * B code bytes (block i at i * B,
// element j of the block at i * B + j; tail elements of a partial last block are 0), then, at
// offset align16(nb * B), nb 32-bit metas; total packedBytes(nb, B). Blocks are always aligned
// to multiples of B of the element index in the caller's buffer (per rank segment for
// all-gather / reduce-scatter / all-to-all), so results do not depend on chunking or sharding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/elements/dtype_math.h"

namespace cclx {
namespace fp8 {

using Meta = uint32_t;
constexpr Meta kMetaInf = 0x80000000u;
constexpr uint8_t kCodePosInf = 0x7e, kCodeNegInf = 0xfe, kCodeNaN = 0x7f;  // INF blocks: +-Inf
constexpr int kMinBlock = 32;
constexpr int kMaxBlock = 256;

CCLX_HD size_t align16(size_t x) { return (x + 15) & ~size_t(15); }
/// Bytes of a packed run of nb blocks of B values.
CCLX_HD size_t packedBytes(size_t nb, size_t B) { return align16(nb * B) + align16(nb * 4); }
/// Offset of the metas in a packed run of nb blocks.
CCLX_HD size_t metaOffset(size_t nb, size_t B) { return align16(nb * B); }
/// The collectives' lane mapping of a codec block (coalesced accesses, fp8_device.cuh): the B =
/// 16 G values are cut into 16-byte pieces of E = 16 / elemBytes values and lane `lane` (< G) of
/// the block's group holds pieces lane, lane + G, ...: its value j (< 16) is element
/// (j / E) G E + lane E + j % E of the block.
CCLX_HD size_t blockLaneElem(int j, int lane, int B, int elemBytes) {
  const int E = 16 / elemBytes, G = B / 16;
  return size_t(j / E) * size_t(G * E) + size_t(lane) * size_t(E) + size_t(j % E);
}

/// a * b rounded once; never fused with a later add (the device intrinsic is never contracted;
/// on the host an empty asm hides the product from the optimizer, so builds with FMA enabled,
/// e.g. -march=native, still round the product on its own like the device).
CCLX_HD float mulRn(float a, float b) {
#if defined(CCLX_DEVICE_PASS)
  return __fmul_rn(a, b);
#else
  float r = a * b;
#if defined(__x86_64__)
  asm("" : "+x"(r));
#elif defined(__aarch64__)
  asm("" : "+w"(r));
#endif
  return r;
#endif
}
CCLX_HD float addRn(float a, float b) {
#if defined(CCLX_DEVICE_PASS)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CCLX_HD float divRn(float a, float b) {
#if defined(CCLX_DEVICE_PASS)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// Folds |x| into a running maximum of finite magnitudes (as bits: positive floats order like
/// their bit patterns) and notes Inf.
CCLX_HD void amaxUpdate(float x, uint32_t& amaxBits, bool& hasInf) {
  uint32_t a = math::f32Bits(x) & 0x7fffffffu;
  if (a < 0x7f800000u) amaxBits = a > amaxBits ? a : amaxBits;
  hasInf = hasInf || a == 0x7f800000u;
}

/// The block meta for largest finite magnitude bits `amaxBits`.
CCLX_HD Meta makeMeta(uint32_t amaxBits, bool hasInf) {
  float d = 1.f;
  if (amaxBits != 0) {
    d = divRn(math::bitsF32(amaxBits), hasInf ? 416.f : 448.f);
    if (!(d >= 1.17549435e-38f)) d = 1.17549435e-38f;  // 2^-126
  }
  return math::f32Bits(d) | (hasInf ? kMetaInf : 0u);
}
/// Multiplier applied after decoding (d) and before encoding (1 / d).
CCLX_HD float metaDequantMul(Meta meta) { return math::bitsF32(meta & 0x7fffffffu); }
CCLX_HD float metaQuantMul(Meta meta) { return divRn(1.f, metaDequantMul(meta)); }

/// |v| (bits a, finite, non-negative) to e4m3 magnitude code, RNE, saturating at 448 (0x7E).
CCLX_HD uint32_t satE4m3Mag(uint32_t a) {
  if (a >= 0x43e00000u) return 0x7eu;  // >= 448
  if (a < 0x3c800000u) {               // below 2^-6: e4m3 subnormal
    if (a <= 0x3a800000u) return 0;    // <= 2^-10 (the tie at 2^-10 goes to even 0)
    uint32_t shift = 14u - (int(a >> 23) - 127);  // 21..24
    uint32_t M = (a & 0x7fffffu) | 0x800000u;
    uint32_t r = M >> shift, rem = M & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return r;  // 0..8 (8 = 2^-6, the smallest normal)
  }
  uint32_t r = a >> 20, rem = a & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (r & 1u))) r++;
  return r - 960u;  // rebias exponent 127 -> 7
}

/// Software float -> e4m3 (RNE, satfinite; NaN -> 0x7F). Same bits as cvt.rn.satfinite.
CCLX_HD uint8_t f32ToE4m3(float v) {
  uint32_t b = math::f32Bits(v), a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  return uint8_t(((b >> 24) & 0x80u) | satE4m3Mag(a));  // Inf saturates
}

/// e4m3 code -> float (exact). NaN codes give a quiet NaN.
CCLX_HD float e4m3ToF32(uint8_t c) {
  uint32_t e = (c >> 3) & 0xfu, m = c & 7u;
  uint32_t sign = uint32_t(c & 0x80u) << 24;
  if ((c & 0x7fu) == 0x7fu) return math::bitsF32(0x7fc00000u);
  if (e == 0) {
    float v = float(m) * 0.001953125f;  // m * 2^-9, exact
    return sign ? -v : v;
  }
  return math::bitsF32(sign | ((e + 120u) << 23) | (m << 20));
}

/// Encodes x with the block's multiplier qmul = metaQuantMul(meta) and INF flag.
CCLX_HD uint8_t encode(float x, float qmul, bool infBlock) {
  uint32_t b = math::f32Bits(x), a = b & 0x7fffffffu;
  (void)infBlock;  // finite values of an INF block stay below 432 after scaling: no 0x7E/0xFE
  if (a > 0x7f800000u) return kCodeNaN;
  if (a == 0x7f800000u) return (b >> 31) ? kCodeNegInf : kCodePosInf;  // Inf (INF block)
  return f32ToE4m3(mulRn(x, qmul));
}

/// Decodes code c of a block with dmul = metaDequantMul(meta) and INF flag.
CCLX_HD float decode(uint8_t c, float dmul, bool infBlock) {
  if (infBlock) {
    if (c == kCodePosInf) return math::bitsF32(0x7f800000u);
    if (c == kCodeNegInf) return math::bitsF32(0xff800000u);
  }
  return mulRn(e4m3ToF32(c), dmul);  // NaN codes stay NaN
}

/// Quantizes n <= B floats into B codes (tail zero-filled); returns the block meta.
CCLX_HD Meta quantizeBlock(const float* x, int n, int B, uint8_t* codes) {
  uint32_t amax = 0;
  bool inf = false;
  for (int i = 0; i < n; ++i) amaxUpdate(x[i], amax, inf);
  Meta meta = makeMeta(amax, inf);
  float q = metaQuantMul(meta);
  for (int i = 0; i < n; ++i) codes[i] = encode(x[i], q, inf);
  for (int i = n; i < B; ++i) codes[i] = 0;
  return meta;
}

/// Decodes n values of one block.
CCLX_HD void dequantizeBlock(const uint8_t* codes, Meta meta, int n, float* out) {
  float d = metaDequantMul(meta);
  bool inf = (meta & kMetaInf) != 0;
  for (int i = 0; i < n; ++i) out[i] = decode(codes[i], d, inf);
}

/// Block range [b0, b1) of shard i when nb blocks are split over n shards (first nb % n shards
/// get one more block). Identical on host and device.
CCLX_HD void shardBlocks(size_t nb, int n, int i, size_t& b0, size_t& b1) {
  size_t q = nb / size_t(n), r = nb % size_t(n), ii = size_t(i);
  b0 = ii * q + (ii < r ? ii : r);
  b1 = b0 + q + (ii < r ? 1 : 0);
}

}  // namespace fp8
}  // namespace cclx
