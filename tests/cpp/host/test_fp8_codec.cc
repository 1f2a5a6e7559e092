// Unit tests of the FP8 e4m3 block codec (src/algos/fp8_codec.h) against independent references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/elements/fp8_codec.h"

using namespace cclx;

namespace {

float bitsToF(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Independent e4m3 value table from the format definition (bias 7, 3 mantissa bits, no Inf).
double refValue(int code) {
  int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -v : v;
}

// Reference RNE + satfinite conversion: nearest of the 127 finite magnitudes, ties to the even
// code (even mantissa), everything >= 448 saturates.
uint8_t refConvert(double x) {
  if (std::isnan(x)) return 0x7f;
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  double a = std::fabs(x);
  if (a >= 448.0) return sign | 0x7e;
  int best = 0;
  double bestD = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    double d = std::fabs(refValue(c) - a);
    if (d < bestD || (d == bestD && (c & 1) == 0)) { best = c; bestD = d; }
  }
  return uint8_t(sign | best);
}

}  // namespace

TEST(Fp8Codec, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    float v = fp8::e4m3ToF32(uint8_t(c));
    if ((c & 0x7f) == 0x7f) { EXPECT_TRUE(std::isnan(v)) << c; continue; }
    EXPECT_EQ(double(v), refValue(c)) << c;
    EXPECT_EQ(fp8::f32ToE4m3(v), c) << c;
  }
  // A block holding every finite value (448 included, so the scale is 2^0) is exact.
  std::vector<float> x;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7f) != 0x7f) x.push_back(float(refValue(c)));
  x.resize(256, 0.f);
  uint8_t codes[256];
  float back[256];
  fp8::Meta meta = fp8::quantizeBlock(x.data(), 256, 256, codes);
  EXPECT_EQ(fp8::metaDequantMul(meta), 1.f);
  fp8::dequantizeBlock(codes, meta, 256, back);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(back[i], x[i]) << i;
}

TEST(Fp8Codec, ConversionMatchesReferenceOnManyFloats) {
  // Every midpoint between neighbouring codes and its two neighbouring floats (ties to even).
  std::vector<float> probes;
  for (int c = 0; c < 0x7e; ++c) {
    float mid = float((refValue(c) + refValue(c + 1)) / 2);  // exact in float
    probes.push_back(mid);
    probes.push_back(std::nextafter(mid, 0.f));
    probes.push_back(std::nextafter(mid, 1000.f));
  }
  for (float f : {0.f, 1e-30f, 1e-45f, 448.f, 449.f, 464.f, 465.f, 1e30f, 0.0009765625f})
    probes.push_back(f);
  for (uint32_t u = 0; u < 0x7f800000u; u += 65521u) probes.push_back(bitsToF(u));
  probes.push_back(std::numeric_limits<float>::infinity());
  for (float p : probes)
    for (float s : {1.f, -1.f}) {
      float v = p * s;
      EXPECT_EQ(fp8::f32ToE4m3(v), refConvert(double(v))) << v;
    }
  EXPECT_EQ(fp8::f32ToE4m3(std::nanf("")), 0x7f);
}

TEST(Fp8Codec, RoundToNearestEvenTies) {
  EXPECT_EQ(fp8::f32ToE4m3(1.0625f), 0x38);     // 1 + 1/16: tie -> 1.0 (mantissa 0)
  EXPECT_EQ(fp8::f32ToE4m3(1.1875f), 0x3a);     // tie between 1.125 and 1.25 -> 1.25
  EXPECT_EQ(fp8::f32ToE4m3(0.0029296875f), 0x02);  // 1.5 * 2^-9 -> 2 * 2^-9
  EXPECT_EQ(fp8::f32ToE4m3(0.0009765625f), 0x00);  // 2^-10 -> 0
  EXPECT_EQ(fp8::f32ToE4m3(464.f), 0x7e);          // tie 448/480 -> 448, never NaN
  EXPECT_EQ(fp8::f32ToE4m3(-1e9f), 0xfe);
}

TEST(Fp8Codec, SpecialValuesInBlocks) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  float x[64];
  for (int i = 0; i < 64; ++i) x[i] = 0.37f * float(i - 31);
  x[3] = nan; x[10] = inf; x[11] = -inf; x[12] = -0.f;
  uint8_t codes[64];
  float back[64];
  fp8::Meta meta = fp8::quantizeBlock(x, 64, 64, codes);
  EXPECT_TRUE(meta & fp8::kMetaInf);
  fp8::dequantizeBlock(codes, meta, 64, back);
  EXPECT_TRUE(std::isnan(back[3]));
  EXPECT_EQ(back[10], inf);
  EXPECT_EQ(back[11], -inf);
  EXPECT_EQ(back[12], 0.f);
  EXPECT_EQ(codes[10], fp8::kCodePosInf);
  EXPECT_EQ(codes[11], fp8::kCodeNegInf);
  EXPECT_EQ(codes[3], fp8::kCodeNaN);
  for (int i = 0; i < 64; ++i)
    if (i != 3 && i != 10 && i != 11) {
      EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) / 16 + 1e-6) << i;
      EXPECT_LE(codes[i] & 0x7f, 0x7d) << i;  // finite values stay below the Inf codes
    }
  // NaN without Inf: plain NaN code, scale from the finite values only.
  x[10] = 1.f; x[11] = 2.f;
  meta = fp8::quantizeBlock(x, 64, 64, codes);
  EXPECT_FALSE(meta & fp8::kMetaInf);
  EXPECT_EQ(codes[3], 0x7f);
  fp8::dequantizeBlock(codes, meta, 64, back);
  EXPECT_TRUE(std::isnan(back[3]));
  EXPECT_EQ(std::signbit(back[12]), true);  // -0 kept
  // All zeros, all NaN, all Inf.
  for (float fill : {0.f, nan, inf}) {
    std::fill(x, x + 64, fill);
    meta = fp8::quantizeBlock(x, 64, 64, codes);
    fp8::dequantizeBlock(codes, meta, 64, back);
    for (int i = 0; i < 64; ++i) {
      if (std::isnan(fill)) EXPECT_TRUE(std::isnan(back[i]));
      else EXPECT_EQ(back[i], fill);
    }
  }
}

TEST(Fp8Codec, ScaleRangeAndSubnormals) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(1.f, 2.f);
  for (int e = -149; e <= 127; ++e) {
    float amax = std::ldexp(e >= -126 ? u(rng) : 1.f, e);
    if (!std::isfinite(amax) || amax == 0.f) continue;
    uint32_t bits;
    std::memcpy(&bits, &amax, 4);
    fp8::Meta meta = fp8::makeMeta(bits, false);
    EXPECT_FALSE(meta & fp8::kMetaInf);
    float d = fp8::metaDequantMul(meta), s = fp8::metaQuantMul(meta);
    ASSERT_TRUE(std::isfinite(s) && d >= std::ldexp(1.f, -126)) << e;
    double scaled = double(amax) * double(s);
    ASSERT_LE(scaled, 448.0 * (1 + 1e-6)) << e;
    if (d > std::ldexp(1.f, -126)) {
      ASSERT_GE(scaled, 448.0 * (1 - 1e-6)) << e;  // the maximum maps onto 448
      ASSERT_EQ(fp8::f32ToE4m3(float(scaled)), 0x7e);
    }
  }
  EXPECT_TRUE(fp8::makeMeta(0x3f800000u, true) & fp8::kMetaInf);
  // f32 subnormal data and f16-subnormal-sized data survive with bounded absolute error.
  for (float base : {1e-40f, 6e-8f, 1e-6f, 3e20f, 3e38f}) {
    float x[32], back[32];
    uint8_t codes[32];
    for (int i = 0; i < 32; ++i) x[i] = base * (0.5f + 0.015f * float(i)) * (i % 2 ? -1.f : 1.f);
    fp8::Meta meta = fp8::quantizeBlock(x, 32, 32, codes);
    fp8::dequantizeBlock(codes, meta, 32, back);
    double half = std::ldexp(double(fp8::metaDequantMul(meta)), -10);  // half a subnormal step
    for (int i = 0; i < 32; ++i)
      EXPECT_LE(std::fabs(double(back[i]) - x[i]),
                std::max(std::fabs(double(x[i])) * (1.0 / 16 + 1e-6), half * (1 + 1e-6)) + 1e-45)
          << base << " " << i;
  }
}

TEST(Fp8Codec, ErrorBoundOnRandomBlocks) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  for (int B : {32, 64, 128, 256}) {
    for (int t = 0; t < 200; ++t) {
      float x[256], back[256];
      uint8_t codes[256];
      float mag = std::ldexp(1.f, int(rng() % 60) - 30);
      int n = t % 7 == 0 ? int(rng() % B) + 1 : B;  // partial tail blocks too
      for (int i = 0; i < n; ++i) x[i] = g(rng) * mag;
      fp8::Meta meta = fp8::quantizeBlock(x, n, B, codes);
      for (int i = n; i < B; ++i) ASSERT_EQ(codes[i], 0);
      fp8::dequantizeBlock(codes, meta, n, back);
      double half = std::ldexp(double(fp8::metaDequantMul(meta)), -10);
      float amax = 0;
      for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (int i = 0; i < n; ++i) {
        double err = std::fabs(double(back[i]) - x[i]);
        ASSERT_LE(err, std::max(std::fabs(double(x[i])) * (1.0 / 16 + 1e-6), half * (1 + 1e-6)))
            << B << " " << i;
        if (std::fabs(x[i]) == amax) {
          ASSERT_LE(err, amax * 1e-6) << "block maximum is ~exact";
        }
      }
    }
  }
}

TEST(Fp8Codec, ShardsCoverBlocks) {
  for (size_t nb : {0, 1, 5, 7, 64, 1001})
    for (int n : {1, 2, 3, 8}) {
      size_t next = 0;
      for (int i = 0; i < n; ++i) {
        size_t b0, b1;
        fp8::shardBlocks(nb, n, i, b0, b1);
        EXPECT_EQ(b0, next);
        EXPECT_GE(b1, b0);
        next = b1;
      }
      EXPECT_EQ(next, nb);
    }
  EXPECT_EQ(fp8::packedBytes(3, 32), 96u + 16u);
  EXPECT_EQ(fp8::packedBytes(5, 32), 160u + 32u);
  EXPECT_EQ(fp8::metaOffset(3, 32), 96u);
}

// The collectives' lane mapping of a block: every element of the block belongs to exactly one
// (lane, value) pair, and the lanes' 16-byte piece p together cover G * 16 contiguous bytes in
// lane order (what makes one access instruction of a group coalesced).
TEST(Fp8Codec, BlockLaneMappingIsCoalescedPermutation) {
  for (int B : {32, 64, 128, 256})
    for (int elemBytes : {2, 4}) {
      const int G = B / 16, E = 16 / elemBytes;
      std::vector<int> seen(size_t(B), 0);
      for (int lane = 0; lane < G; ++lane)
        for (int j = 0; j < 16; ++j) {
          const size_t e = fp8::blockLaneElem(j, lane, B, elemBytes);
          ASSERT_LT(e, size_t(B)) << "B=" << B << " lane " << lane << " value " << j;
          ++seen[e];
        }
      for (int e = 0; e < B; ++e) EXPECT_EQ(seen[size_t(e)], 1) << "B=" << B << " element " << e;
      // Piece p of all lanes: the block's bytes [p * G * 16, (p + 1) * G * 16), lane after lane.
      for (int p = 0; p < 16 / E; ++p) {
        const size_t base = fp8::blockLaneElem(p * E, 0, B, elemBytes);
        EXPECT_EQ(base * size_t(elemBytes), size_t(p) * G * 16) << "B=" << B << " piece " << p;
        for (int lane = 0; lane < G; ++lane)
          for (int k = 0; k < E; ++k)
            EXPECT_EQ(fp8::blockLaneElem(p * E + k, lane, B, elemBytes), base + size_t(lane * E + k))
                << "B=" << B << " piece " << p << " lane " << lane;
      }
    }
}

// The one-shot allreduce marks unwritten inbox bytes with all ones: no block, special values
// included, may encode to code 0xFF, and the block maximum of an INF block maps onto 416.
TEST(Fp8Codec, NoCodeIsAllOnes) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 9);
  const float specials[] = {inf, -inf, nan, -nan, -0.f, 0.f, 448.f, -448.f, 1e30f, -1e30f};
  for (int trial = 0; trial < 20000; ++trial) {
    float x[128];
    uint8_t codes[128];
    const float scale = std::ldexp(1.f, int(rng() % 200) - 100);
    for (int i = 0; i < 128; ++i)
      x[i] = (rng() % 8 == 0) ? specials[pick(rng)] : g(rng) * scale;
    fp8::Meta meta = fp8::quantizeBlock(x, 128, 128, codes);
    ASSERT_NE(meta, 0xffffffffu);
    for (int i = 0; i < 128; ++i) ASSERT_NE(codes[i], 0xff) << trial << " " << i;
  }
  for (float fill : {-inf, inf, nan, -nan, -448.f, -1e30f}) {
    float x[32];
    uint8_t codes[32];
    std::fill(x, x + 32, fill);
    fp8::quantizeBlock(x, 32, 32, codes);
    for (int i = 0; i < 32; ++i) ASSERT_NE(codes[i], 0xff) << fill;
  }
  uint32_t bits = 0x42c80000u;  // 100
  fp8::Meta meta = fp8::makeMeta(bits, true);
  const double scaled = 100.0 * double(fp8::metaQuantMul(meta));
  EXPECT_NEAR(scaled, 416.0, 416.0 * 1e-6);
  EXPECT_EQ(fp8::f32ToE4m3(float(scaled)), 0x7d);
}
