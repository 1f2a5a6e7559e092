// What the C API and drop-in harnesses (fuzz_capi.cc, fuzz_dropin.cc) share: the buffer arenas'
// size and contents, the failure report, and the comparison of results element by element.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace fuzzutil {

constexpr size_t kCap = 2048;  // bytes in each buffer arena

/// Ends the run (libFuzzer keeps the input) with "<harness>: <what> <detail>" unless ok.
inline void check(const char* harness, bool ok, const char* what, const char* detail) {
  if (!ok) {
    std::fprintf(stderr, "%s: %s %s\n", harness, what, detail);
    std::abort();
  }
}

/// An element type as the comparison sees it: its size and, for floats, its format.
enum class Fp { none, f32, f64, f16, bf16 };
struct Type {
  size_t size;
  Fp fp = Fp::none;
};

inline bool isNaN(Fp fp, const uint8_t* p) {
  uint16_t h = 0;
  if (fp == Fp::f16 || fp == Fp::bf16) std::memcpy(&h, p, 2);
  switch (fp) {
    case Fp::f32: { float f; std::memcpy(&f, p, 4); return std::isnan(f); }
    case Fp::f64: { double d; std::memcpy(&d, p, 8); return std::isnan(d); }
    case Fp::f16: return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    case Fp::bf16: return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    default: return false;
  }
}

/// Equal element by element (two NaNs of any payload are equal: a reduction may quiet them).
inline bool sameElements(Type t, const uint8_t* a, const uint8_t* b, size_t count) {
  for (size_t i = 0; i < count; ++i, a += t.size, b += t.size)
    if (std::memcmp(a, b, t.size) != 0 && !(isNaN(t.fp, a) && isNaN(t.fp, b))) return false;
  return true;
}

/// The send data: kCap bytes from a seed (every bit pattern of every type, NaNs included).
inline std::vector<uint8_t> fill(uint32_t seed) {
  std::vector<uint8_t> v(kCap);
  uint64_t x = seed;
  for (auto& b : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = uint8_t(x >> 56);
  }
  return v;
}

/// The settings both harnesses' comms start with: no log output, errors returned (not aborted
/// on), 4 KiB staging chunks (counts span several).
inline void setQuietEnv() {
  setenv("CCLX_DEBUG", "NONE", 1);
  setenv("CCLX_ABORT_ON_ERROR", "0", 1);
  setenv("CCLX_SHM_CHUNK_BYTES", "4096", 1);
}

}  // namespace fuzzutil
