// Unit tests of the stochastic f32 -> bf16 rounding of reduce_scatter_quantized
// (src/core/elements/stochastic.h) against references computed from the format itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/elements/stochastic.h"

using namespace cclx;

namespace {

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double bf16Value(uint16_t h) { return double(fromBits(uint32_t(h) << 16)); }

// The two bf16 neighbours of a finite x, from the values alone: lo the largest bf16 of magnitude
// <= |x| (toward zero), hi the next bf16 away from zero (may be Inf).
void neighbours(float x, double& lo, double& hi) {
  const double a = std::fabs(double(x));
  // bf16 magnitudes are monotone in their bit patterns: binary search over 0..0x7f80.
  int l = 0, h = 0x7f80;
  while (l < h) {
    const int m = (l + h + 1) / 2;
    if (bf16Value(uint16_t(m)) <= a) l = m;
    else h = m - 1;
  }
  const double best = bf16Value(uint16_t(l));
  const double up = bf16Value(uint16_t(l + 1));
  lo = std::signbit(x) ? -best : best;
  hi = std::signbit(x) ? -up : up;
}

}  // namespace

TEST(StochasticRounding, ExactValuesNeverChange) {
  // Every bf16 (NaN excluded) as a float is exact for every random draw.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t b = h << 16;
    if ((b & 0x7fffffffu) > 0x7f800000u) continue;
    for (uint32_t r : {0u, 1u, 0x7fffu, 0x8000u, 0xffffu})
      ASSERT_EQ(sr::roundBf16(fromBits(b), r), uint16_t(h)) << std::hex << h << " r=" << r;
  }
}

TEST(StochasticRounding, NanStaysNanInfStaysInf) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t r : {0u, 0xffffu}) {
    EXPECT_EQ(sr::roundBf16(inf, r), 0x7f80);
    EXPECT_EQ(sr::roundBf16(-inf, r), 0xff80);
    for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fbfffffu}) {
      const uint16_t q = sr::roundBf16(fromBits(nan), r);
      EXPECT_TRUE(std::isnan(bf16Value(q))) << std::hex << nan;
      EXPECT_EQ(q >> 15, nan >> 31);
    }
  }
}

TEST(StochasticRounding, ResultIsOneOfTheTwoNeighbours) {
  std::mt19937_64 g(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = uint32_t(g());
    if ((b & 0x7fffffffu) >= 0x7f800000u) continue;  // NaN, Inf: tested above
    const float x = fromBits(b);
    double lo, hi;
    neighbours(x, lo, hi);
    const double q = bf16Value(sr::roundBf16(x, uint32_t(g()) & 0xffffu));
    ASSERT_TRUE(q == lo || q == hi) << x << " -> " << q << " (" << lo << ", " << hi << ")";
  }
}

TEST(StochasticRounding, ProbabilityIsTheFractionalDistance) {
  // Over every draw r the result is the upper neighbour exactly as often as the fractional
  // distance says: (|x| - |lo|) / (|hi| - |lo|) * 2^16 times.
  std::mt19937_64 g(11);
  for (int i = 0; i < 300; ++i) {
    uint32_t b = uint32_t(g());
    if ((b & 0x7fffffffu) >= 0x7f7f0000u) continue;  // keep hi finite
    const float x = fromBits(b);
    double lo, hi;
    neighbours(x, lo, hi);
    const double frac = (std::fabs(double(x)) - std::fabs(lo)) / (std::fabs(hi) - std::fabs(lo));
    int ups = 0;
    for (uint32_t r = 0; r < 0x10000; ++r) ups += bf16Value(sr::roundBf16(x, r)) == hi;
    EXPECT_EQ(double(ups), frac * 65536.0) << x;
  }
}

TEST(StochasticRounding, DeterministicForOneSeedAndDifferentAcrossSeeds) {
  const float x = 1.0f + 3.0f / 1024.0f;  // 0.375 of a bf16 step above 1.0078125
  int differ = 0, n = 4096;
  for (int i = 0; i < n; ++i) {
    const uint16_t a = sr::srBf16(x, 42, uint64_t(i), 3);
    EXPECT_EQ(a, sr::srBf16(x, 42, uint64_t(i), 3));
    differ += a != sr::srBf16(x, 43, uint64_t(i), 3);
  }
  // Two independent draws differ with probability 2 p (1 - p) = 0.46875 (p = 0.375).
  EXPECT_NEAR(double(differ) / n, 0.46875, 0.04);
  // The rank and the index are part of the draw too.
  int byRank = 0, byIndex = 0;
  for (int i = 0; i < n; ++i) {
    byRank += sr::draw16(5, uint64_t(i), 0) != sr::draw16(5, uint64_t(i), 1);
    byIndex += sr::draw16(5, uint64_t(i), 0) != sr::draw16(5, uint64_t(i) + 1, 0);
  }
  EXPECT_GT(byRank, n * 99 / 100);
  EXPECT_GT(byIndex, n * 99 / 100);
}

TEST(StochasticRounding, DrawsAreUniform) {
  // 16 buckets of the draw's top 4 bits over 2^16 draws: each within 6 standard deviations.
  int hist[16] = {};
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) ++hist[sr::draw16(123456789, uint64_t(i), 2) >> 12];
  const double mean = n / 16.0, sd = std::sqrt(mean * 15.0 / 16.0);
  for (int k = 0; k < 16; ++k) EXPECT_NEAR(hist[k], mean, 6 * sd) << k;
  // The low bits too (what decides small fractions).
  int odd = 0;
  for (int i = 0; i < n; ++i) odd += sr::draw16(99, uint64_t(i), 0) & 1;
  EXPECT_NEAR(odd, n / 2.0, 6 * std::sqrt(n / 4.0));
}

TEST(StochasticRounding, MeanOverSeedsIsTheValue) {
  std::mt19937_64 g(3);
  std::uniform_real_distribution<float> d(-100.f, 100.f);
  const int seeds = 20000;
  for (int t = 0; t < 20; ++t) {
    const float x = d(g);
    double lo, hi;
    neighbours(x, lo, hi);
    const double step = std::fabs(hi - lo);
    double sum = 0;
    for (int s = 0; s < seeds; ++s) sum += bf16Value(sr::srBf16(x, uint64_t(s), 17, 1));
    // Standard error of the mean <= step / 2 / sqrt(seeds).
    EXPECT_NEAR(sum / seeds, double(x), 6 * step / 2 / std::sqrt(double(seeds))) << x;
  }
}

TEST(StochasticRounding, NegativeValuesMirrorPositive) {
  std::mt19937_64 g(5);
  for (int i = 0; i < 10000; ++i) {
    const uint32_t b = uint32_t(g()) & 0x7f7fffffu;
    const uint32_t r = uint32_t(g()) & 0xffffu;
    EXPECT_EQ(sr::roundBf16(fromBits(b | 0x80000000u), r),
              uint16_t(sr::roundBf16(fromBits(b), r) | 0x8000u));
  }
}
