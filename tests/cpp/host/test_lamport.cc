// The data-as-flag protocol's element rules (src/algos/lamport.h), used by the GPU kernel and the
// host twin alike.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/elements/lamport.h"

using namespace cclx;

namespace {
uint64_t next(uint64_t& s) {  // splitmix64
  uint64_t x = (s += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// A random piece whose S-byte elements are never all ones.
template <int S>
uint64_t full(uint64_t& s) {
  uint64_t w = next(s);
  for (int i = 0; i < 8 / S; ++i) {
    const uint64_t m = (S == 8 ? ~0ull : ((1ull << (8 * S)) - 1)) << (8 * S * i);
    if ((w & m) == m) w &= ~(1ull << (8 * S * i + 3));
  }
  return w;
}
}  // namespace

TEST(Lamport, EveryHalfWordInEveryLane) {
  uint64_t s = 1;
  for (int lane = 0; lane < 4; ++lane) {
    for (uint32_t x = 0; x <= 0xFFFF; ++x) {
      uint64_t w = full<2>(s);
      w = (w & ~(0xFFFFull << (16 * lane))) | (uint64_t(x) << (16 * lane));
      ASSERT_EQ(lamport::hasEmpty<2>(w), x == 0xFFFF) << lane << " " << x;
      uint64_t c = lamport::canon<2>(w);
      uint64_t want = x == 0xFFFF ? w & ~(1ull << (16 * lane)) : w;
      ASSERT_EQ(c, want) << lane << " " << x;
      ASSERT_FALSE(lamport::hasEmpty<2>(c));
    }
  }
}

TEST(Lamport, WordsAndDoubleWords) {
  uint64_t s = 2;
  for (int it = 0; it < 100000; ++it) {
    uint64_t w = full<4>(s);
    EXPECT_FALSE(lamport::hasEmpty<4>(w));
    EXPECT_EQ(lamport::canon<4>(w), w);
    uint64_t d = full<8>(s);
    EXPECT_FALSE(lamport::hasEmpty<8>(d));
    EXPECT_EQ(lamport::canon<8>(d), d);
  }
  // An all-ones half of a piece is empty for 4-byte elements but not for 8-byte ones.
  for (uint64_t other : {0ull, 1ull, 0x7FC00000ull, 0xFFFFFFFEull}) {
    for (int half = 0; half < 2; ++half) {
      uint64_t w = half ? (0xFFFFFFFFull << 32 | other) : (other << 32 | 0xFFFFFFFFull);
      EXPECT_TRUE(lamport::hasEmpty<4>(w));
      EXPECT_FALSE(lamport::hasEmpty<8>(w));
      EXPECT_EQ(lamport::canon<4>(w), w & ~(1ull << (32 * half)));
      EXPECT_EQ(lamport::canon<8>(w), w);
    }
  }
  EXPECT_TRUE(lamport::hasEmpty<8>(lamport::kEmpty));
  EXPECT_EQ(lamport::canon<8>(lamport::kEmpty), lamport::kEmpty - 1);
  EXPECT_EQ(lamport::canon<4>(lamport::kEmpty), lamport::kEmpty - 1 - (1ull << 32));
}

TEST(Lamport, ReplacementsAreNaNsOfTheSameSign) {
  float f;
  uint32_t u = 0xFFFFFFFEu;
  std::memcpy(&f, &u, 4);
  EXPECT_TRUE(std::isnan(f) && std::signbit(f));
  double d;
  uint64_t v = lamport::kEmpty - 1;
  std::memcpy(&d, &v, 8);
  EXPECT_TRUE(std::isnan(d) && std::signbit(d));
  // 0xFFFE: f16 (exponent 31, mantissa != 0) and bf16 (exponent 255, mantissa != 0) NaNs.
  EXPECT_EQ((0xFFFE >> 10) & 31, 31);
  EXPECT_NE(0xFFFE & 1023, 0);
  EXPECT_EQ((0xFFFE >> 7) & 255, 255);
  EXPECT_NE(0xFFFE & 127, 0);
  EXPECT_TRUE(lamport::typeSupported(DataType::bf16) && lamport::typeSupported(DataType::f64));
  EXPECT_FALSE(lamport::typeSupported(DataType::i32) || lamport::typeSupported(DataType::u8) ||
               lamport::typeSupported(DataType::fp8_e4m3));
}
