// Test data and references of the fused allreduce + residual add + RMSNorm (+ FP8), shared by the
// host tests (tests/cpp/host/test_host_rmsnorm.cc) and the GPU tests (tests/cpp/gpu/test_gpu_rmsnorm.cc).
//
// Inputs are a pure function of (seed, rank, index), so every rank computes every rank's input.
// Two references: float64 (independent arithmetic; tolerances from the roundings of the element
// rules) and the unfused sequence's bits (the allreduce result, then core/elements/rmsnorm.h's row rules).
#pragma once

#include <cclx/cclx.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/elements/dtype_math.h"
#include "base/error.h"
#include "core/elements/fp8_codec.h"
#include "core/elements/rmsnorm.h"
#include "helpers/host_util.h"

namespace rmstest {

using cclx::DataType;

using hosttest::mix;  // splitmix64
/// Uniform in [-1, 1) from (seed, stream, index).
inline double unit(uint64_t seed, uint64_t stream, size_t i) {
  const uint64_t r = mix(seed * 0x100000001b3ull ^ mix(stream * 0x10001ull + 11) ^ mix(i + 0x9876543ull));
  return double(r >> 11) * 0x1.0p-52 - 1.0;
}

struct Case {
  DataType t = DataType::bf16;
  size_t tokens = 7, hidden = 1000;
  bool y = true;            // the normalized output in dtype
  bool fp8 = false;         // the FP8 output (+ scales)
  bool staticScale = false;
  bool inPlace = false;     // out == x, residualOut == residual
  size_t offset = 0;        // bytes added to every [tokens, hidden] buffer (unaligned when odd)
  float eps = 1e-5f;
  std::map<std::string, std::string> hints;
  const char* expectAlgo = nullptr;
};

inline std::string describe(const Case& c) {
  std::string s = cclx::strFormat("%s tokens=%zu hidden=%zu%s%s%s%s%s", cclx::dtypeName(c.t),
                                  c.tokens, c.hidden, c.y ? "" : " no-y", c.fp8 ? " fp8" : "",
                                  c.staticScale ? " static" : "", c.inPlace ? " in-place" : "",
                                  c.offset ? " unaligned" : "");
  for (const auto& [k, v] : c.hints) s += " " + k + "=" + v;
  return s;
}

inline size_t es(DataType t) { return cclx::dtypeSize(t); }

inline float decode(DataType t, const char* p) {
  uint16_t h;
  switch (t) {
    case DataType::f32: { float f; std::memcpy(&f, p, 4); return f; }
    case DataType::bf16: std::memcpy(&h, p, 2); return cclx::math::bf16ToF32(h);
    default: std::memcpy(&h, p, 2); return cclx::math::f16ToF32(h);
  }
}
inline void encode(DataType t, float v, char* p) {
  uint16_t h;
  switch (t) {
    case DataType::f32: std::memcpy(p, &v, 4); return;
    case DataType::bf16: h = cclx::math::f32ToBf16(v); std::memcpy(p, &h, 2); return;
    default: h = cclx::math::f32ToF16(v); std::memcpy(p, &h, 2); return;
  }
}

/// The inputs of a case on every rank (all ranks' x, so that any rank can build a reference).
struct Data {
  std::vector<std::vector<char>> x;  // [rank] tokens x hidden
  std::vector<char> res, w;
  float scale = 0;  // the static scale
};

/// Row i of x is scaled by 2^(i % 7 - 3), so per-token scales differ between rows.
inline Data generate(const Case& c, int n, uint64_t seed) {
  Data d;
  const size_t e = es(c.t), count = c.tokens * c.hidden;
  d.x.assign(size_t(n), std::vector<char>(count * e));
  d.res.resize(count * e);
  d.w.resize(c.hidden * e);
  for (size_t i = 0; i < count; ++i) {
    const double rowScale = std::ldexp(1.0, int((i / c.hidden) % 7) - 3);
    for (int r = 0; r < n; ++r)
      encode(c.t, float(2.0 * rowScale * unit(seed, uint64_t(r) + 1, i)), d.x[size_t(r)].data() + i * e);
    encode(c.t, float(3.0 * rowScale * unit(seed, 100, i)), d.res.data() + i * e);
  }
  for (size_t i = 0; i < c.hidden; ++i) encode(c.t, float(1.0 + 0.5 * unit(seed, 200, i)), d.w.data() + i * e);
  d.scale = float(0.01 + 0.002 * (unit(seed, 300, 0) + 1.0));
  return d;
}

/// Outputs of one call, as bytes (y / q / scales empty when not produced).
struct Out {
  std::vector<char> r, y, q;
  std::vector<float> scales;
};

/// The allreduce result the unfused sequence starts from: ranks 0..N-1 in order (dtype_math.h).
inline std::vector<char> allreduceBits(const Case& c, const Data& d) {
  const size_t e = es(c.t), count = c.tokens * c.hidden;
  std::vector<char> ar(count * e);
  for (size_t i = 0; i < count; ++i) {
    float acc = 0;
    for (size_t r = 0; r < d.x.size(); ++r) {
      const float v = decode(c.t, d.x[r].data() + i * e);
      acc = r == 0 ? v : cclx::fp8::addRn(acc, v);
    }
    encode(c.t, acc, ar.data() + i * e);
  }
  return ar;
}

/// The unfused sequence's outputs (bits) from the allreduce result `ar`: core/elements/rmsnorm.h's rules.
inline Out unfused(const Case& c, const Data& d, const std::vector<char>& ar) {
  Out o;
  const size_t e = es(c.t), H = c.hidden, count = c.tokens * H;
  o.r.resize(count * e);
  if (c.y) o.y.resize(count * e);
  if (c.fp8) {
    o.q.resize(count);
    o.scales.resize(c.tokens);
  }
  std::vector<float> tmp(H);
  auto rows = [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < c.tokens; ++i) {
      const size_t off = i * H;
      cclx::rms::rowHost<T>(reinterpret_cast<const T*>(ar.data()) + off,
                            reinterpret_cast<const T*>(d.res.data()) + off,
                            reinterpret_cast<const T*>(d.w.data()), H, c.eps,
                            reinterpret_cast<T*>(o.r.data()) + off,
                            c.y ? reinterpret_cast<T*>(o.y.data()) + off : nullptr,
                            c.fp8 ? reinterpret_cast<uint8_t*>(o.q.data()) + off : nullptr,
                            c.fp8 ? o.scales.data() + i : nullptr,
                            c.staticScale ? &d.scale : nullptr, tmp.data());
    }
  };
  switch (c.t) {
    case DataType::f32: rows(float{}); break;
    case DataType::bf16: rows(cclx::bf16_t{}); break;
    default: rows(cclx::f16_t{}); break;
  }
  return o;
}

/// Unit roundoff of the element type.
inline double roundoff(DataType t) {
  return t == DataType::bf16 ? 0x1.0p-8 : t == DataType::f16 ? 0x1.0p-11 : 0x1.0p-24;
}
/// Spacing of e4m3 values around magnitude m (subnormal spacing 2^-9 below 2^-6).
inline double e4m3Step(double m) {
  if (m < 0x1.0p-6) return 0x1.0p-9;
  return std::ldexp(1.0, int(std::floor(std::log2(m))) - 3);
}

/// Checks `o` against float64 arithmetic: r and y within the roundings the element rules allow
/// (bounds derived per element below), the scale (dynamic: exactly amax(|y|) / 448 of the
/// returned y, and amax / 448 of float64 within y's bound; static: the given one) and each code
/// within one e4m3 step of y. "" or the first failure.
inline std::string checkF64(const Case& c, const Data& d, const Out& o) {
  const size_t e = es(c.t), H = c.hidden;
  const int n = int(d.x.size());
  const double u = roundoff(c.t), f = 0x1.0p-24;
  std::vector<double> r64(H), a64(H), ygot(H), ytol(H);
  for (size_t i = 0; i < c.tokens; ++i) {
    // r: the f32 sum over ranks, its rounding to T, the add's rounding to T.
    double ss = 0, ssErr = 0;
    for (size_t j = 0; j < H; ++j) {
      const size_t k = i * H + j;
      double s = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        const double v = decode(c.t, d.x[size_t(r)].data() + k * e);
        s += v;
        mag += std::fabs(v);
      }
      const double res = decode(c.t, d.res.data() + k * e);
      r64[j] = s + res;
      a64[j] = mag + std::fabs(res);
      const double rtol = (n + 2) * u * a64[j];
      ss += r64[j] * r64[j];
      ssErr += 2 * std::fabs(r64[j]) * rtol + rtol * rtol;
      const double got = decode(c.t, o.r.data() + k * e);
      if (!(std::fabs(got - r64[j]) <= rtol))
        return cclx::strFormat("row %zu col %zu: r = %.9g, float64 %.9g (tolerance %.3g)", i, j, got,
                               r64[j], rtol);
    }
    // inv: r's errors through the sum of squares, the f32 sum (at most ~1034 additions deep:
    // 2 + H / 1024 per partial, 10 tree levels), mean, sqrt and division.
    ssErr += (16.0 + double(H) / 1024) * f * ss;
    const double inv = 1.0 / std::sqrt(ss / double(H) + double(c.eps));
    const double invRel = 0.5 * ssErr / (ss + double(c.eps) * double(H)) + 4 * f;
    double amax = 0, amaxTol = 0;
    for (size_t j = 0; j < H; ++j) {
      const size_t k = i * H + j;
      const double w = decode(c.t, d.w.data() + j * e);
      const double y64 = r64[j] * inv * w;
      // r's error scaled by the norm, inv's, two f32 products, y's rounding to T.
      ytol[j] = (n + 2) * u * a64[j] * inv * std::fabs(w) + std::fabs(y64) * (invRel + 2 * f + u) + 1e-30;
      const double y = c.y ? decode(c.t, o.y.data() + k * e) : y64;
      if (c.y && !(std::fabs(y - y64) <= ytol[j]))
        return cclx::strFormat("row %zu col %zu: y = %.9g, float64 %.9g (tolerance %.3g)", i, j, y,
                               y64, ytol[j]);
      ygot[j] = y;
      amax = std::max(amax, std::fabs(y));
      amaxTol = std::max(amaxTol, ytol[j]);
    }
    if (!c.fp8) continue;
    const double scale = o.scales[i];
    if (c.staticScale) {
      if (scale != double(d.scale))
        return cclx::strFormat("row %zu: scale %.9g, the static scale is %.9g", i, scale, double(d.scale));
    } else {
      if (c.y && scale != double(cclx::fp8::divRn(float(amax), 448.f)))
        return cclx::strFormat("row %zu: scale %.9g is not amax(|y|) / 448 = %.9g / 448", i, scale, amax);
      if (!(std::fabs(scale * 448.0 - amax) <= amaxTol + 448.0 * scale * f))
        return cclx::strFormat("row %zu: scale %.9g, float64 amax / 448 = %.9g", i, scale, amax / 448);
    }
    for (size_t j = 0; j < H; ++j) {
      const double deq = double(cclx::fp8::e4m3ToF32(uint8_t(o.q[i * H + j]))) * scale;
      const double m = std::fabs(ygot[j]) / scale;
      if (c.staticScale && m > 448) continue;  // saturated
      const double tol = e4m3Step(std::min(m, 448.0)) * scale + (c.y ? 0.0 : ytol[j]);
      if (!(std::fabs(deq - ygot[j]) <= tol))
        return cclx::strFormat("row %zu col %zu: code 0x%02x x scale = %.9g, y %.9g (one e4m3 step %.3g)",
                               i, j, unsigned(uint8_t(o.q[i * H + j])), deq, ygot[j], tol);
    }
  }
  return "";
}

/// "" when `got` equals `want` bit for bit, else the first difference.
inline std::string sameBits(const Out& got, const Out& want) {
  auto cmp = [](const std::vector<char>& a, const std::vector<char>& b, const char* what) -> std::string {
    if (a.size() != b.size()) return cclx::strFormat("%s: %zu bytes, expected %zu", what, a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i])
        return cclx::strFormat("%s byte %zu: 0x%02x, expected 0x%02x", what, i, unsigned(uint8_t(a[i])),
                               unsigned(uint8_t(b[i])));
    return "";
  };
  std::string s = cmp(got.r, want.r, "residual");
  if (s.empty()) s = cmp(got.y, want.y, "y");
  if (s.empty()) s = cmp(got.q, want.q, "fp8");
  if (s.empty()) {
    std::vector<char> a(got.scales.size() * 4), b(want.scales.size() * 4);
    if (!a.empty()) std::memcpy(a.data(), got.scales.data(), a.size());  // data() may be null
    if (!b.empty()) std::memcpy(b.data(), want.scales.data(), b.size());
    s = cmp(a, b, "scales");
  }
  return s;
}

}  // namespace rmstest
