// FP8 accuracy table (single process, host codec = bit-identical to the GPU codec): normalized
// error ||out - ref|| / ||ref|| against float64 for the blocked codec at block sizes 32..256, a
// power-of-two-scale variant, and the unscaled e4m3 cast that RCCLX's low-precision collectives use.
// Prints markdown rows (docs/PERF.md "FP8 accuracy" is copied from this output) and checks the
// targets for the default block size 128.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "helpers/fp8_util.h"

using namespace cclx;
using namespace fp8test;

namespace {

enum class Codec { Blocked, Pow2Scale, Unscaled };

/// deq(q(x)) of a whole vector with the chosen codec.
std::vector<float> rt(const std::vector<float>& x, Codec c, int B) {
  if (c == Codec::Blocked) return roundTripF(x, B);
  std::vector<float> out(x.size());
  for (size_t e0 = 0; e0 < x.size(); e0 += size_t(B)) {
    size_t len = std::min<size_t>(size_t(B), x.size() - e0);
    float s = 1.f;
    if (c == Codec::Pow2Scale) {  // largest value into (224, 448] by a power of two
      float amax = 0;
      for (size_t j = 0; j < len; ++j) amax = std::max(amax, std::fabs(x[e0 + j]));
      int e;
      float m = std::frexp(amax, &e);  // amax = m * 2^e, m in [0.5, 1)
      s = amax > 0 ? std::ldexp(1.f, (m * 2 > 1.75f ? 7 : 8) - (e - 1)) : 1.f;
    }
    for (size_t j = 0; j < len; ++j)
      out[e0 + j] = fp8::e4m3ToF32(fp8::f32ToE4m3(x[e0 + j] * s)) / s;
  }
  return out;
}

struct Row {
  double ar, rs, ag;  // allreduce, reduce-scatter, all-gather / all-to-all
};

Row measure(int N, Kind kind, Codec c, int B, size_t n) {
  std::vector<std::vector<float>> x(N), q(N);
  std::vector<double> ref(n, 0.0), refAg, outAg;
  for (int r = 0; r < N; ++r) {
    Buf b = makeData(DataType::f32, n, kind, r, 1234);
    x[r].resize(n);
    for (size_t i = 0; i < n; ++i) {
      x[r][i] = b.get(i);
      ref[i] += double(x[r][i]);
    }
    q[r] = rt(x[r], c, B);
    for (size_t i = 0; i < n; ++i) {
      refAg.push_back(x[r][i]);
      outAg.push_back(q[r][i]);
    }
  }
  std::vector<float> red = reduceModel(q, false), ar = rt(red, c, B);
  std::vector<double> dr(red.begin(), red.end()), da(ar.begin(), ar.end());
  return {normErr(ref, da), normErr(ref, dr), normErr(refAg, outAg)};
}

}  // namespace

TEST(Fp8Accuracy, TableAndTargets) {
  const size_t n = 1u << 18;
  printf("| ranks | data | codec | allreduce | reduce-scatter | all-gather / all-to-all |\n");
  printf("|---|---|---|---|---|---|\n");
  for (int N : {2, 8})
    for (Kind kind : {Kind::Gaussian, Kind::Outliers, Kind::Small}) {
      for (int B : {32, 64, 128, 256}) {
        Row r = measure(N, kind, Codec::Blocked, B, n);
        printf("| %d | %s | e4m3, f32 scale per %d | %.2f%% | %.2f%% | %.2f%% |\n", N,
               kindName(kind), B, 100 * r.ar, 100 * r.rs, 100 * r.ag);
        if (B == 128) {
          EXPECT_LE(r.ar, 0.040) << N << " " << kindName(kind);
          EXPECT_LE(r.rs, 0.028) << N << " " << kindName(kind);
          EXPECT_LE(r.ag, 0.028) << N << " " << kindName(kind);
        }
      }
      Row f = measure(N, kind, Codec::Pow2Scale, 128, n);
      printf("| %d | %s | e4m3, 2^k scale per 128 | %.2f%% | %.2f%% | %.2f%% |\n", N,
             kindName(kind), 100 * f.ar, 100 * f.rs, 100 * f.ag);
      Row u = measure(N, kind, Codec::Unscaled, 128, n);
      printf("| %d | %s | e4m3 unscaled (RCCLX) | %.2f%% | %.2f%% | %.2f%% |\n", N, kindName(kind),
             100 * u.ar, 100 * u.rs, 100 * u.ag);
    }
  for (int B : {32, 64, 128, 256})
    printf("block %d: scale bytes per value %.4f (%.2f%% over 1 byte per value)\n", B, 4.0 / B,
           400.0 / B);
}
