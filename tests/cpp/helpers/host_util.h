// Test data and independent references for the host collective tests.
//
// Inputs are a pure function of (seed, rank, index), so every rank can compute every other rank's
// input and the expected result on its own. Floats are decoded without project code and reduced
// in float64; integers are reduced exactly with the wrap-around of their width.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace hosttest {

/// Comm options for host tests: a failed check ends its rank, and the others then fail by
/// timeout after 20 s instead of waiting the default 10 minutes.
inline cclx::Options testOpts() {
  cclx::Options o;
  o.timeout = std::chrono::seconds(20);
  return o;
}

using cclx::DataType;
using cclx::RedOpKind;

inline uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t rnd(uint64_t seed, int rank, size_t i) {
  return mix(seed * 0x100000001b3ull ^ mix(uint64_t(rank) * 0x10001ull + 7) ^ mix(i + 0x1234567ull));
}

inline bool isFloat(DataType t) {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}
inline bool isSigned(DataType t) {
  return t == DataType::i8 || t == DataType::i32 || t == DataType::i64;
}
inline size_t esize(DataType t) {
  switch (t) {
    case DataType::f64: case DataType::i64: case DataType::u64: return 8;
    case DataType::f32: case DataType::i32: case DataType::u32: return 4;
    case DataType::f16: case DataType::bf16: return 2;
    default: return 1;
  }
}

inline const std::vector<DataType>& allDtypes() {
  static const std::vector<DataType> v = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                                          DataType::i8,  DataType::u8,  DataType::i32, DataType::i64,
                                          DataType::u32, DataType::u64, DataType::fp8_e4m3,
                                          DataType::fp8_e5m2};
  return v;
}
/// Ops with a reduction for `t` (none for fp8).
inline std::vector<cclx::ReduceOp> opsFor(DataType t) {
  std::vector<cclx::ReduceOp> v;
  if (t == DataType::fp8_e4m3 || t == DataType::fp8_e5m2) return v;
  v = {RedOpKind::SUM, RedOpKind::PRODUCT, RedOpKind::MIN, RedOpKind::MAX, RedOpKind::AVG,
       cclx::ReduceOp::premulSum(isFloat(t) ? 0.75 : 3.0)};
  if (!isFloat(t)) {
    v.push_back(RedOpKind::BAND);
    v.push_back(RedOpKind::BOR);
    v.push_back(RedOpKind::BXOR);
  }
  return v;
}

// ---- independent float codecs -------------------------------------------------------------
inline double decodeF16(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}
inline double decodeBf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
/// Encodes a value exactly representable in f16 (normal range).
inline uint16_t encodeF16Exact(double x) {
  if (x == 0) return 0;
  uint16_t s = x < 0 ? 0x8000 : 0;
  int e;
  double fr = std::frexp(std::fabs(x), &e);  // fr in [0.5, 1)
  int m = int(std::lround(fr * 2048)) - 1024;  // 10 mantissa bits
  return uint16_t(s | ((e - 1 + 15) << 10) | m);
}

/// Element i of rank `rank`'s input, as raw bits (little-endian, esize(t) bytes) and as a double
/// (floats) or wrapped integer (ints). Values avoid zero and keep sums/products in range where
/// the op needs it (AVG on integers must not overflow for the division to be meaningful).
struct Elem {
  uint64_t bits = 0;
  double f = 0;
};
inline Elem genElem(DataType t, RedOpKind op, uint64_t seed, int rank, size_t i) {
  uint64_t r = rnd(seed, rank, i);
  Elem e;
  double u = double(r >> 11) * 0x1.0p-53;  // [0, 1)
  bool prod = op == RedOpKind::PRODUCT;
  switch (t) {
    case DataType::f32: {
      float v = prod ? float(0.5 + u) : float(u * 8 - 4);
      if (v == 0) v = 0.25f;
      e.f = v;
      uint32_t b;
      std::memcpy(&b, &v, 4);
      e.bits = b;
      return e;
    }
    case DataType::f64: {
      double v = prod ? 0.5 + u : u * 8 - 4;
      if (v == 0) v = 0.25;
      e.f = v;
      std::memcpy(&e.bits, &v, 8);
      return e;
    }
    case DataType::f16:
    case DataType::bf16: {
      int k = int(r % 129) - 64;  // k / 16 in [-4, 4], exact in both formats
      if (k == 0) k = 3;
      double v = prod ? 0.5 + (std::abs(k) % 17) / 16.0 : k / 16.0;
      e.f = v;
      if (t == DataType::f16) {
        e.bits = encodeF16Exact(v);
      } else {
        float fv = float(v);
        uint32_t b;
        std::memcpy(&b, &fv, 4);
        e.bits = b >> 16;
      }
      return e;
    }
    default: break;
  }
  // Integers: small values for arithmetic ops, full-width bits for bitwise and min/max.
  bool arith = op == RedOpKind::SUM || op == RedOpKind::AVG || op == RedOpKind::PREMUL_SUM || prod;
  int64_t v;
  if (!arith) {
    e.bits = r;
  } else {
    v = prod ? int64_t(r % 5) - 2 : int64_t(r % 41) - 20;
    if (v == 0) v = 1;
    if (!isSigned(t)) v = std::abs(v);
    e.bits = uint64_t(v);
  }
  size_t bits = esize(t) * 8;
  if (bits < 64) e.bits &= (1ull << bits) - 1;
  return e;
}

inline int64_t signExtend(uint64_t b, size_t bytes) {
  if (bytes == 8) return int64_t(b);
  int shift = int(64 - bytes * 8);
  return int64_t(b << shift) >> shift;
}

/// Expected result of reducing element i over `n` ranks: exact bits for integers and MIN/MAX,
/// float64 value for the others (with .f).
inline Elem refReduce(DataType t, cclx::ReduceOp op, uint64_t seed, int n, size_t i) {
  const size_t bytes = esize(t);
  const uint64_t mask = bytes == 8 ? ~0ull : (1ull << (bytes * 8)) - 1;
  Elem out;
  if (isFloat(t)) {
    double acc = 0;
    for (int r = 0; r < n; ++r) {
      double x = genElem(t, op.kind, seed, r, i).f;
      if (op.kind == RedOpKind::PREMUL_SUM) x *= op.factor;
      if (r == 0) { acc = x; continue; }
      switch (op.kind) {
        case RedOpKind::PRODUCT: acc *= x; break;
        case RedOpKind::MIN: acc = std::min(acc, x); break;
        case RedOpKind::MAX: acc = std::max(acc, x); break;
        default: acc += x;
      }
    }
    if (op.kind == RedOpKind::AVG) acc /= n;
    out.f = acc;
    return out;
  }
  uint64_t acc = 0;
  const int64_t factor = int64_t(op.factor);
  for (int r = 0; r < n; ++r) {
    uint64_t x = genElem(t, op.kind, seed, r, i).bits;
    if (op.kind == RedOpKind::PREMUL_SUM) x = uint64_t(signExtend(x, bytes) * factor) & mask;
    if (r == 0) { acc = x; continue; }
    bool sgn = isSigned(t);
    switch (op.kind) {
      case RedOpKind::PRODUCT: acc = (acc * x) & mask; break;
      case RedOpKind::MIN:
        acc = sgn ? (signExtend(x, bytes) < signExtend(acc, bytes) ? x : acc) : std::min(acc, x);
        break;
      case RedOpKind::MAX:
        acc = sgn ? (signExtend(x, bytes) > signExtend(acc, bytes) ? x : acc) : std::max(acc, x);
        break;
      case RedOpKind::BAND: acc &= x; break;
      case RedOpKind::BOR: acc |= x; break;
      case RedOpKind::BXOR: acc ^= x; break;
      default: acc = (acc + x) & mask;
    }
  }
  if (op.kind == RedOpKind::AVG)
    acc = isSigned(t) ? uint64_t(signExtend(acc, bytes) / n) & mask : acc / uint64_t(n);
  out.bits = acc;
  return out;
}

inline uint64_t loadBits(const void* p, size_t bytes) {
  uint64_t v = 0;
  std::memcpy(&v, p, bytes);
  return v;
}
inline double decodeFloat(DataType t, uint64_t bits) {
  switch (t) {
    case DataType::f32: { float f; uint32_t b = uint32_t(bits); std::memcpy(&f, &b, 4); return f; }
    case DataType::f64: { double d; std::memcpy(&d, &bits, 8); return d; }
    case DataType::f16: return decodeF16(uint16_t(bits));
    default: return decodeBf16(uint16_t(bits));
  }
}

/// Checks `count` reduced elements at `got` (element i of the reduction is element i + first of
/// the reference). Returns "" or a description of the first mismatch. Tolerance for floats:
/// n * accumulation epsilon * (sum of |inputs| or n * |result| for products) + one rounding of
/// the output type * |result|.
inline std::string checkReduced(DataType t, cclx::ReduceOp op, uint64_t seed, int n, const void* got,
                                size_t count, size_t first = 0) {
  const size_t bytes = esize(t);
  for (size_t i = 0; i < count; ++i) {
    uint64_t g = loadBits(static_cast<const char*>(got) + i * bytes, bytes);
    Elem ref = refReduce(t, op, seed, n, first + i);
    if (!isFloat(t)) {
      if (g != ref.bits)
        return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " +
               std::to_string(ref.bits);
      continue;
    }
    double gv = decodeFloat(t, g);
    double accEps = t == DataType::f64 ? 0x1.0p-52 : 0x1.0p-23;
    double outEps = t == DataType::f16 ? 0x1.0p-11 : t == DataType::bf16 ? 0x1.0p-8 : accEps;
    double mag = 0;
    if (op.kind == RedOpKind::PRODUCT) {
      mag = n * std::fabs(ref.f);
    } else {
      for (int r = 0; r < n; ++r) mag += std::fabs(genElem(t, op.kind, seed, r, first + i).f);
      if (op.kind == RedOpKind::PREMUL_SUM) mag *= std::fabs(op.factor);
    }
    double tol = 2 * n * accEps * mag + outEps * std::fabs(ref.f);
    bool exact = op.kind == RedOpKind::MIN || op.kind == RedOpKind::MAX;
    if (exact ? gv != ref.f : !(std::fabs(gv - ref.f) <= tol))
      return "element " + std::to_string(i) + ": got " + std::to_string(gv) + ", expected " +
             std::to_string(ref.f) + " (tolerance " + std::to_string(exact ? 0.0 : tol) + ")";
  }
  return "";
}

/// Fills `count` elements of rank `rank`'s input.
inline void fillInput(void* dst, DataType t, RedOpKind op, uint64_t seed, int rank, size_t count,
                      size_t first = 0) {
  const size_t bytes = esize(t);
  for (size_t i = 0; i < count; ++i) {
    uint64_t b = genElem(t, op, seed, rank, first + i).bits;
    std::memcpy(static_cast<char*>(dst) + i * bytes, &b, bytes);
  }
}
/// Random bytes (any bit pattern) for data-movement tests.
inline void fillBytes(void* dst, size_t bytes, uint64_t seed, int rank, size_t first = 0) {
  for (size_t i = 0; i < bytes; ++i)
    static_cast<unsigned char*>(dst)[i] = uint8_t(rnd(seed, rank, first + i) >> 17);
}
inline bool bytesMatch(const void* got, size_t bytes, uint64_t seed, int rank, size_t first = 0) {
  for (size_t i = 0; i < bytes; ++i)
    if (static_cast<const unsigned char*>(got)[i] != uint8_t(rnd(seed, rank, first + i) >> 17)) return false;
  return true;
}
constexpr unsigned char kPoison = 0xA5;

}  // namespace hosttest
