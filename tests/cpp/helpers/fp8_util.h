// Shared by the FP8 tests: typed buffers, deterministic test data, a single-process model of the
// FP8 collectives (block by block, straight from the codec) and float64 error measures.
#pragma once

#include <cclx/cclx.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/elements/fp8_codec.h"
#include "core/comm/backend.h"

namespace fp8test {

using cclx::DataType;

struct Buf {
  DataType dt = DataType::f32;
  size_t n = 0;
  std::vector<uint8_t> bytes;
  Buf() = default;
  Buf(DataType t, size_t count) : dt(t), n(count), bytes(count * cclx::dtypeSize(t)) {}
  void* data() { return bytes.data(); }
  float get(size_t i) const {
    if (dt == DataType::f32) {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    return dt == DataType::bf16 ? cclx::math::bf16ToF32(h) : cclx::math::f16ToF32(h);
  }
  void set(size_t i, float v) {
    if (dt == DataType::f32) {
      std::memcpy(&bytes[4 * i], &v, 4);
      return;
    }
    uint16_t h = dt == DataType::bf16 ? cclx::math::f32ToBf16(v) : cclx::math::f32ToF16(v);
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  void poison() { std::fill(bytes.begin(), bytes.end(), uint8_t(0x5a)); }
};

enum class Kind { Gaussian, Outliers, Small };
inline const char* kindName(Kind k) {
  return k == Kind::Gaussian ? "gaussian" : k == Kind::Outliers ? "outliers" : "small";
}

/// Deterministic data of rank `r` (never all zeros): gaussian; gaussian with 0.1% of values 1e4x
/// larger; gaussian scaled by 1e-6.
inline Buf makeData(DataType dt, size_t n, Kind kind, int r, uint32_t seed) {
  Buf b(dt, n);
  std::mt19937_64 rng(seed * 1000003ull + uint64_t(r) * 7919ull + uint64_t(kind) * 31ull + 1);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    double v = g(rng);
    if (kind == Kind::Outliers && u(rng) < 0.001) v *= 1e4;
    if (kind == Kind::Small) v *= 1e-6;
    b.set(i, float(v));
  }
  return b;
}

/// deq(q(x)) block by block over elements [off, off + n) of x (blocks aligned to off).
inline std::vector<float> roundTrip(const Buf& x, size_t off, size_t n, int B) {
  std::vector<float> out(n);
  float tmp[256];
  uint8_t codes[256];
  for (size_t e0 = 0; e0 < n; e0 += size_t(B)) {
    int len = int(std::min<size_t>(size_t(B), n - e0));
    for (int j = 0; j < len; ++j) tmp[j] = x.get(off + e0 + j);
    cclx::fp8::Meta m = cclx::fp8::quantizeBlock(tmp, len, B, codes);
    cclx::fp8::dequantizeBlock(codes, m, len, &out[e0]);
  }
  return out;
}
inline std::vector<float> roundTripF(const std::vector<float>& x, int B) {
  Buf b(DataType::f32, x.size());
  for (size_t i = 0; i < x.size(); ++i) b.set(i, x[i]);
  return roundTrip(b, 0, x.size(), B);
}

/// Reduces per-rank vectors in rank order (float), AVG divides.
inline std::vector<float> reduceModel(const std::vector<std::vector<float>>& v, bool avg) {
  std::vector<float> acc = v[0];
  for (size_t r = 1; r < v.size(); ++r)
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = cclx::fp8::addRn(acc[i], v[r][i]);
  if (avg)
    for (float& a : acc) a = cclx::fp8::divRn(a, float(v.size()));
  return acc;
}

/// FP8 allreduce of inputs x (one per rank), as floats before the output rounding: two-shot
/// requantizes the reduced values (deq(q(sum_r deq(q(x_r))))), one-shot does not.
inline std::vector<float> modelAllReduce(const std::vector<Buf>& x, int B, bool avg,
                                         bool oneShot = false) {
  std::vector<std::vector<float>> v;
  for (const Buf& b : x) v.push_back(roundTrip(b, 0, b.n, B));
  return oneShot ? reduceModel(v, avg) : roundTripF(reduceModel(v, avg), B);
}

/// Expected FP8 output of rank `me` (bits, from the model) and its float64 reference, given every
/// rank's input X[r] (count elements for AllReduce/AllGather, N * count otherwise).
struct Expect {
  Buf want;
  std::vector<double> ref;
};
inline Expect expectFor(cclx::CollType t, const std::vector<Buf>& X, int me, size_t count, int B,
                        bool avg, DataType dt, bool oneShot = false) {
  using cclx::CollType;
  const int N = int(X.size());
  const size_t outN = (t == CollType::AllReduce || t == CollType::ReduceScatter) ? count : N * count;
  std::vector<float> model(outN);
  Expect e;
  e.ref.assign(outN, 0.0);
  if (t == CollType::AllReduce) {
    model = modelAllReduce(X, B, avg, oneShot);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < N; ++r) e.ref[i] += double(X[r].get(i));
      if (avg) e.ref[i] /= N;
    }
  } else if (t == CollType::ReduceScatter) {
    std::vector<std::vector<float>> v;
    for (int r = 0; r < N; ++r) v.push_back(roundTrip(X[r], me * count, count, B));
    model = reduceModel(v, avg);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < N; ++r) e.ref[i] += double(X[r].get(me * count + i));
      if (avg) e.ref[i] /= N;
    }
  } else {
    size_t off = t == CollType::AllGather ? 0 : me * count;
    for (int s = 0; s < N; ++s) {
      std::vector<float> v = roundTrip(X[s], off, count, B);
      for (size_t i = 0; i < count; ++i) {
        model[s * count + i] = v[i];
        e.ref[s * count + i] = double(X[s].get(off + i));
      }
    }
  }
  e.want = Buf(dt, outN);
  for (size_t i = 0; i < outN; ++i) e.want.set(i, model[i]);
  return e;
}

/// True when element i of a and b has the same bits, or both are NaN.
inline bool sameBits(const Buf& a, const Buf& b, size_t i) {
  float x = a.get(i), y = b.get(i);
  if (std::isnan(x) && std::isnan(y)) return true;
  size_t es = cclx::dtypeSize(a.dt);
  return std::memcmp(&a.bytes[i * es], &b.bytes[i * es], es) == 0;
}

/// ||out - ref|| / ||ref|| in float64.
inline double normErr(const std::vector<double>& ref, const std::vector<double>& out) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

}  // namespace fp8test
