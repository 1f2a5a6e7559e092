// FP8 on the GPU: the device codec equals the host codec bit for bit (exhaustively for the float ->
// e4m3 conversion and the 16-bit loads and stores), every FP8 collective on 2 GPUs equals the host
// model (= the CPU twin) bit for bit, CUDA-graph capture and replay, and a timing print. Skips
// visibly without 2 GPUs.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <vector>

#include "core/select/select.h"
#include "gpu/kernels/fp8_selftest.h"
#include "core/settings/config.h"
#include "helpers/fp8_util.h"
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace fp8test;
using gputest::DevBuf;
using gputest::Timer;

namespace {

Options fp8Opts() {
  Options o;
  o.hints["low_precision"] = "fp8";
  o.timeout = std::chrono::milliseconds(60000);
  return o;
}

/// Runs one collective on device buffers and compares with the host model; returns wrong count.
/// `oneShot` picks the allreduce algorithm (hint fp8_algo; checked) and its model.
size_t runGpu(Comm& c, CollType t, DataType dt, RedOpKind op, size_t count, bool inPlace,
              uint32_t seed, cudaStream_t s, const char* tag, bool oneShot = false) {
  const int N = c.size(), me = c.rank();
  const size_t es = dtypeSize(dt);
  const size_t inN = (t == CollType::AllReduce || t == CollType::AllGather) ? count : N * count;
  const size_t outN = (t == CollType::AllReduce || t == CollType::ReduceScatter) ? count : N * count;
  std::vector<Buf> X;
  for (int r = 0; r < N; ++r) X.push_back(makeData(dt, inN, Kind::Gaussian, r, seed));
  Expect ex = expectFor(t, X, me, count, 128, op == RedOpKind::AVG, dt, oneShot);
  DevBuf sendB(inN * es), recvB(std::max(inN, outN) * es);
  recvB.poison(0x5a);
  char* send = sendB.base;
  char* recv = recvB.base;
  if (inPlace) {
    send = recv + (t == CollType::AllGather ? me * count * es : 0);
    if (t == CollType::ReduceScatter) recv = send + me * count * es;
  }
  CK(cudaMemcpy(send, X[me].data(), inN * es, cudaMemcpyHostToDevice));
  CollOptions co;
  co.stream = s;
  co.hints["fp8_algo"] = oneShot ? "oneshot" : "twoshot";
  if (t == CollType::AllReduce) {
    const std::string want = oneShot ? "fp8_oneshot" : "fp8";
    MP_CHECK(c.selectAllReduceAlgo(count, dt, op, co) == want, "%s: %s not selected", tag,
             want.c_str());
  }
  switch (t) {
    case CollType::AllReduce: c.allReduce(send, recv, count, dt, op, co); break;
    case CollType::AllGather: c.allGather(send, recv, count, dt, co); break;
    case CollType::ReduceScatter: c.reduceScatter(send, recv, count, dt, op, co); break;
    default: c.allToAll(send, recv, count, dt, co); break;
  }
  CK(cudaStreamSynchronize(s));
  Buf got(dt, outN);
  CK(cudaMemcpy(got.data(), recv, outN * es, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < outN; ++i)
    if (!sameBits(got, ex.want, i)) {
      if (wrong < 3)
        printf("%s: element %zu got %a want %a\n", tag, i, double(got.get(i)), double(ex.want.get(i)));
      ++wrong;
    }
  return wrong;
}

/// Checks every collective against the host model: for each (collective, dtype, op) with
/// sizes(t, dt, op) non-empty, every size out of place and in place; `seed` advances per call.
template <class Sizes>
void checkCollectives(Comm& c, cudaStream_t s, std::initializer_list<DataType> dts,
                      std::initializer_list<RedOpKind> ops, Sizes sizes, uint32_t& seed,
                      const char* prefix) {
  for (CollType t : {CollType::AllReduce, CollType::AllGather, CollType::ReduceScatter,
                     CollType::AllToAll})
    for (DataType dt : dts)
      for (RedOpKind op : ops) {
        if (op == RedOpKind::AVG && t != CollType::AllReduce && t != CollType::ReduceScatter)
          continue;
        for (size_t n : sizes(t, dt, op))
          for (bool ip : {false, true})
            for (bool one : {false, true}) {
              if (one && t != CollType::AllReduce) continue;
              char tag[192];
              snprintf(tag, sizeof tag, "%s%s%s/%s/%s/%zu%s", prefix, collName(t),
                       one ? "(oneshot)" : "", dtypeName(dt), opName(op), n,
                       ip ? "/inplace" : "");
              size_t wrong = runGpu(c, t, dt, op, n, ip, seed++, s, tag, one);
              MP_CHECK(wrong == 0, "%s: %zu elements differ from the host model", tag, wrong);
            }
      }
}

}  // namespace

TEST(GpuFp8, DeviceCodecEqualsHostCodec) {
  GPU_REQUIRE(1);
  auto res = test::runRanks(1, [](int, int, std::shared_ptr<Store>) {
    CK(cudaSetDevice(0));
    uint32_t first = 0;
    uint64_t bad = fp8::deviceCvtMismatches(&first);
    MP_CHECK(bad == 0, "hardware cvt differs from the software conversion on %llu floats, first 0x%08x",
             (unsigned long long)bad, first);
    // The 16-bit loads and stores of the collectives (hardware cvt) == dtype_math.h, every input.
    uint64_t c16[3] = {};
    uint32_t f16[3] = {};
    fp8::deviceCvt16Mismatches(c16, f16);
    MP_CHECK(c16[0] == 0, "float -> bf16 differs on %llu floats, first 0x%08x",
             (unsigned long long)c16[0], f16[0]);
    MP_CHECK(c16[1] == 0, "float -> f16 differs on %llu floats, first 0x%08x",
             (unsigned long long)c16[1], f16[1]);
    MP_CHECK(c16[2] == 0, "f16 -> float differs on %llu halves, first 0x%04x",
             (unsigned long long)c16[2], f16[2]);
    // Host software conversion == device hardware conversion on specials and random values.
    std::vector<float> v = {0.f, -0.f, 448.f, 464.f, 465.f, -1e30f, 1e-45f, 0.0009765625f,
                            std::numeric_limits<float>::infinity()};
    std::mt19937 rng(3);
    for (int i = 0; i < 200000; ++i) {
      uint32_t u = rng();
      float f;
      std::memcpy(&f, &u, 4);
      if (!std::isnan(f)) v.push_back(f);
    }
    std::vector<uint8_t> hw(v.size());
    fp8::deviceCvt(v.data(), v.size(), hw.data());
    for (size_t i = 0; i < v.size(); ++i)
      MP_CHECK(hw[i] == fp8::f32ToE4m3(v[i]), "cvt %a: device 0x%02x host 0x%02x", double(v[i]), hw[i],
               fp8::f32ToE4m3(v[i]));
    // Block quantize/dequantize of the collectives' device path == host codec.
    for (int B : {32, 64, 128, 256}) {
      const size_t nb = 3000, n = nb * B;
      std::normal_distribution<float> g(0.f, 1.f);
      std::vector<float> in(n), out(n);
      for (size_t i = 0; i < n; ++i) in[i] = g(rng) * std::ldexp(1.f, int(i / B % 80) - 40);
      in[5] = std::nanf("");
      in[B + 3] = std::numeric_limits<float>::infinity();
      in[B + 4] = -std::numeric_limits<float>::infinity();
      in[2 * B + 1] = -0.f;
      for (int j = 0; j < B; ++j) in[3 * B + j] = 0.f;       // all-zero block
      for (int j = 0; j < B; ++j) in[4 * B + j] = 1e-40f * float(j + 1);  // f32 subnormals
      std::vector<uint8_t> codes(n);
      std::vector<fp8::Meta> metas(nb);
      fp8::deviceRoundTrip(in.data(), nb, B, codes.data(), metas.data(), out.data());
      for (size_t b = 0; b < nb; ++b) {
        uint8_t hc[256];
        float hb[256];
        fp8::Meta hm = fp8::quantizeBlock(&in[b * B], B, B, hc);
        fp8::dequantizeBlock(hc, hm, B, hb);
        MP_CHECK(hm == metas[b], "B=%d block %zu meta 0x%08x vs host 0x%08x", B, b, metas[b], hm);
        for (int j = 0; j < B; ++j) {
          MP_CHECK(hc[j] == codes[b * B + j], "B=%d block %zu elem %d code", B, b, j);
          bool same = (std::isnan(hb[j]) && std::isnan(out[b * B + j])) ||
                      std::memcmp(&hb[j], &out[b * B + j], 4) == 0;
          MP_CHECK(same, "B=%d block %zu elem %d: device %a host %a", B, b, j,
                   double(out[b * B + j]), double(hb[j]));
        }
      }
    }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuFp8, CollectivesEqualHostModel) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = gputest::makeGpuComm(rank, size, store, fp8Opts());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Odd sizes, one tile, several tiles; for bf16 SUM also more tiles than CTAs (several
    // rounds per CTA: with 32 MiB of FP8 staging a tile holds at most ~254K (allreduce on 2
    // ranks) / ~63K (others) elements, so 40M / 9M elements need two rounds of 128 CTAs).
    uint32_t seed = 100;
    checkCollectives(*c, s, {DataType::f32, DataType::bf16, DataType::f16},
                     {RedOpKind::SUM, RedOpKind::AVG},
                     [](CollType t, DataType dt, RedOpKind op) {
                       std::vector<size_t> sizes = {1, 1003, 70001, 1000003};
                       if (dt == DataType::bf16 && op == RedOpKind::SUM)
                         sizes.push_back(t == CollType::AllReduce ? 40000037 : 9000037);
                       return sizes;
                     },
                     seed, "");
    CK(cudaStreamDestroy(s));
    c->finalize();
  }, std::chrono::seconds(600));
  ASSERT_TRUE(res.ok()) << res.log;
}

// The producer/consumer split of a CTA and the pipeline depth are tuning knobs: results must not
// depend on them. Extreme splits (one producer warp, one consumer warp) and deep pipelines, on
// messages that give every CTA several tiles (so every buffer-reuse wait is taken).
TEST(GpuFp8, TeamSplitsAndPipelineDepths) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    CK(cudaSetDevice(rank));  // the comms below use device `rank`; the stream must live there
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const char* cases[][2] = {{"1", "16"}, {"15", "3"}, {"5", "64"}};
    uint32_t seed = 900;
    for (auto& cs : cases) {
      setenv("CCLX_FP8_PRODUCER_WARPS", cs[0], 1);
      setenv("CCLX_FP8_TILES_PER_CTA", cs[1], 1);
      reloadConfig();
      Options o = fp8Opts();
      o.name = std::string("split") + cs[0] + "x" + cs[1];
      auto c = gputest::makeGpuComm(rank, size, store, o);
      char prefix[64];
      snprintf(prefix, sizeof prefix, "warps=%s tiles=%s ", cs[0], cs[1]);
      checkCollectives(*c, s, {DataType::bf16}, {RedOpKind::SUM},
                       [](CollType t, DataType, RedOpKind) {
                         return std::vector<size_t>{70001, t == CollType::AllReduce ? 40000037u
                                                                                   : 9000037u};
                       },
                       seed, prefix);
      c->finalize();
    }
    unsetenv("CCLX_FP8_PRODUCER_WARPS");
    unsetenv("CCLX_FP8_TILES_PER_CTA");
    reloadConfig();
    CK(cudaStreamDestroy(s));
  }, std::chrono::seconds(600));
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuFp8, GraphCaptureAndReplay) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = gputest::makeGpuComm(rank, size, store, fp8Opts());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t n = (1u << 22) + 17;
    const DataType dt = DataType::bf16;
    DevBuf in(n * 2), out(n * 2 * size), out1(n * 2), ag(n * 2 * size);
    // Warm-up outside capture (lazy init), then capture allreduce (two-shot and one-shot, the
    // latter twice so that both inbox parities are replayed) + allgather.
    CollOptions co, one;
    co.stream = one.stream = s;
    co.hints["fp8_algo"] = "twoshot";
    one.hints["fp8_algo"] = "oneshot";
    c->allReduce(in.base, out.base, n, dt, RedOpKind::SUM, co);
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    c->allReduce(in.base, out.base, n, dt, RedOpKind::SUM, co);
    c->allReduce(in.base, out1.base, n, dt, RedOpKind::SUM, one);
    c->allReduce(in.base, out1.base, n, dt, RedOpKind::SUM, one);
    c->allGather(in.base, ag.base, n, dt, co);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<Buf> X;
      for (int r = 0; r < size; ++r) X.push_back(makeData(dt, n, Kind::Gaussian, r, 500 + rep));
      CK(cudaMemcpy(in.base, X[rank].data(), n * 2, cudaMemcpyHostToDevice));
      out.poison(0x5a);
      out1.poison(0x5a);
      ag.poison(0x5a);
      CK(cudaGraphLaunch(ge, s));
      CK(cudaStreamSynchronize(s));
      Expect ea = expectFor(CollType::AllReduce, X, rank, n, 128, false, dt);
      Expect e1 = expectFor(CollType::AllReduce, X, rank, n, 128, false, dt, true);
      Expect eg = expectFor(CollType::AllGather, X, rank, n, 128, false, dt);
      Buf ga(dt, n), g1(dt, n), gg(dt, n * size);
      CK(cudaMemcpy(ga.data(), out.base, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(g1.data(), out1.base, n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(gg.data(), ag.base, n * 2 * size, cudaMemcpyDeviceToHost));
      size_t wa = 0, w1 = 0, wg = 0;
      for (size_t i = 0; i < n; ++i) wa += !sameBits(ga, ea.want, i);
      for (size_t i = 0; i < n; ++i) w1 += !sameBits(g1, e1.want, i);
      for (size_t i = 0; i < n * size; ++i) wg += !sameBits(gg, eg.want, i);
      MP_CHECK(wa == 0 && w1 == 0 && wg == 0,
               "replay %d: allreduce %zu / one-shot %zu / allgather %zu wrong", rep, wa, w1, wg);
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// One-shot allreduce: its inboxes use all ones as "not yet written", so inputs full of specials
// (runs of -Inf, +Inf and NaN covering whole blocks, all-ones bit patterns) must still arrive
// and match the host model; and 24 calls back to back without host synchronization (fresh data
// per call, three sizes, out of place and in place, a DDA allreduce between them) must each be
// right, so an inbox parity that is refilled late or reused early would show.
TEST(GpuFp8, OneShotSpecialsAndBackToBack) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = gputest::makeGpuComm(rank, size, store, fp8Opts());
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CollOptions one;
    one.stream = s;
    one.hints["fp8_algo"] = "oneshot";
    const float inf = std::numeric_limits<float>::infinity();
    for (DataType dt : {DataType::f32, DataType::bf16, DataType::f16}) {
      const size_t n = 1000003, es = dtypeSize(dt);
      std::vector<Buf> X;
      for (int r = 0; r < size; ++r) {
        Buf x = makeData(dt, n, Kind::Gaussian, r, 4242);
        // Rank r: -Inf over [1000 r, + 600), NaN over [5000, 5300), +Inf at every 97th element
        // of [20000, 30000), and all-ones bit patterns over [40000 + 512 r, + 300).
        for (size_t i = 1000 * size_t(r); i < 1000 * size_t(r) + 600; ++i) x.set(i, -inf);
        for (size_t i = 5000; i < 5300; ++i) x.set(i, std::nanf(""));
        for (size_t i = 20000; i < 30000; i += 97) x.set(i, inf);
        std::memset(x.bytes.data() + (40000 + 512 * size_t(r)) * es, 0xff, 300 * es);
        X.push_back(std::move(x));
      }
      Expect ex = expectFor(CollType::AllReduce, X, rank, n, 128, false, dt, true);
      DevBuf in(n * es), out(n * es);
      out.poison(0x5a);
      CK(cudaMemcpy(in.base, X[rank].data(), n * es, cudaMemcpyHostToDevice));
      MP_CHECK(c->selectAllReduceAlgo(n, dt, RedOpKind::SUM, one) == "fp8_oneshot", "selection");
      c->allReduce(in.base, out.base, n, dt, RedOpKind::SUM, one);
      CK(cudaStreamSynchronize(s));
      Buf got(dt, n);
      CK(cudaMemcpy(got.data(), out.base, n * es, cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += !sameBits(got, ex.want, i);
      MP_CHECK(wrong == 0, "specials %s: %zu elements differ from the host model", dtypeName(dt),
               wrong);
      MP_CHECK(got.get(100) == -inf && std::isnan(got.get(5100)) && got.get(20000) == inf,
               "specials %s: -Inf / NaN / +Inf not kept", dtypeName(dt));
    }
    // Back to back.
    const DataType dt = DataType::bf16;
    const size_t sizes[] = {3000017, 777, 65536};
    const int calls = 24;
    std::vector<std::unique_ptr<DevBuf>> ins, outs;
    std::vector<Expect> want;
    std::vector<size_t> ns;
    for (int k = 0; k < calls; ++k) {
      const size_t n = sizes[k % 3];
      std::vector<Buf> X;
      for (int r = 0; r < size; ++r) X.push_back(makeData(dt, n, Kind::Gaussian, r, 7000 + k));
      want.push_back(expectFor(CollType::AllReduce, X, rank, n, 128, false, dt, true));
      ins.push_back(std::make_unique<DevBuf>(n * 2));
      outs.push_back(std::make_unique<DevBuf>(n * 2));
      outs.back()->poison(0x5a);
      CK(cudaMemcpy(ins.back()->base, X[rank].data(), n * 2, cudaMemcpyHostToDevice));
      ns.push_back(n);
    }
    DevBuf dda(4096 * 2);
    CK(cudaMemset(dda.base, 0, 4096 * 2));
    CK(cudaDeviceSynchronize());
    CollOptions plain;
    plain.stream = s;
    plain.hints["low_precision"] = "off";
    for (int k = 0; k < calls; ++k) {
      const bool inPlace = k % 4 == 3;
      if (inPlace) CK(cudaMemcpyAsync(outs[k]->base, ins[k]->base, ns[k] * 2, cudaMemcpyDeviceToDevice, s));
      c->allReduce(inPlace ? outs[k]->base : ins[k]->base, outs[k]->base, ns[k], dt, RedOpKind::SUM, one);
      if (k % 5 == 2) c->allReduce(dda.base, dda.base, 4096, dt, RedOpKind::SUM, plain);
    }
    CK(cudaStreamSynchronize(s));
    for (int k = 0; k < calls; ++k) {
      Buf got(dt, ns[k]);
      CK(cudaMemcpy(got.data(), outs[k]->base, ns[k] * 2, cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < ns[k]; ++i) wrong += !sameBits(got, want[k].want, i);
      MP_CHECK(wrong == 0, "back-to-back call %d (%zu elements): %zu wrong", k, ns[k], wrong);
    }
    CK(cudaStreamDestroy(s));
    c->finalize();
  }, std::chrono::seconds(600));
  ASSERT_TRUE(res.ok()) << res.log;
}

// Prints microseconds per call (no assertion): FP8 versus the same call with "low_precision"=off.
TEST(GpuFp8, TimingPrint) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = gputest::makeGpuComm(rank, size, store, fp8Opts());
    Timer tm;
    const size_t maxBytes = size_t(256) << 20;
    DevBuf a(maxBytes), b(maxBytes * size);
    CK(cudaMemset(a.base, 0x3c, maxBytes));
    for (CollType t : {CollType::AllReduce, CollType::AllGather, CollType::ReduceScatter,
                       CollType::AllToAll})
      for (size_t bytes : {size_t(16) << 20, size_t(64) << 20, size_t(256) << 20})
        for (const char* lp : {"fp8", "off"}) {
          CollOptions co;
          co.stream = tm.s;
          co.hints["low_precision"] = lp;
          // bytes = per-rank input (allreduce, allgather) or total input (reduce-scatter, alltoall).
          size_t count = bytes / 2;
          if (t == CollType::ReduceScatter || t == CollType::AllToAll) count /= size;
          auto call = [&] {
            switch (t) {
              case CollType::AllReduce: c->allReduce(a.base, a.base, count, DataType::bf16, RedOpKind::SUM, co); break;
              case CollType::AllGather: c->allGather(a.base, b.base, count, DataType::bf16, co); break;
              case CollType::ReduceScatter: c->reduceScatter(a.base, b.base, count, DataType::bf16, RedOpKind::SUM, co); break;
              default: c->allToAll(a.base, b.base, count, DataType::bf16, co); break;
            }
          };
          const double us = tm.eagerUs(call, 20);
          if (rank == 0)
            printf("[fp8 timing] %s bf16 %zu MiB low_precision=%s: %.1f us\n", collName(t),
                   bytes >> 20, lp, us);
        }
    c->finalize();
  }, std::chrono::seconds(600));
  test::echoTagged(res.log, "[fp8 timing]");
  ASSERT_TRUE(res.ok()) << res.log;
}

// Where the time of a bf16 FP8 allreduce goes (no assertion; lines "[fp8 phase]"): the whole
// allreduce (eager and CUDA-graph replayed), a quantize-only and a dequantize-only pass over the
// message with the collectives' code and grid, and plain SM peer writes of one FP8 shard (what
// each link direction carries in each of the allreduce's two exchange phases on 2 ranks).
TEST(GpuFp8, PhaseTiming) {
  GPU_REQUIRE(2);
  const size_t kSizes[] = {size_t(16) << 20, size_t(64) << 20, size_t(256) << 20};
  const int B = 128, iters = 20;
  auto res1 = test::runRanks(1, [&](int, int, std::shared_ptr<Store>) {
    CK(cudaSetDevice(0));
    for (size_t bytes : kSizes) {
      const size_t count = bytes / 2;
      const double q = fp8::timeQuantizePass(count, B, iters);
      const double d = fp8::timeDequantizePass(count, B, iters);
      const size_t shard = fp8::packedBytes((count + B - 1) / B / 2, B);
      const double w2 = fp8::timePeerWrite(shard, iters, true);
      const double w1 = fp8::timePeerWrite(shard, iters, false);
      printf("[fp8 phase] bf16 %zu MiB: quantize-only %.1f us (%.0f GB/s in+out), "
             "dequantize-only %.1f us (%.0f GB/s in+out)\n",
             bytes >> 20, q, double(bytes + count + count / B * 4) / (q * 1e3), d,
             double(bytes + count + count / B * 4) / (d * 1e3));
      printf("[fp8 phase] bf16 %zu MiB: peer write of one shard (%zu B): both ways %.1f us "
             "(%.0f GB/s per direction), one way %.1f us (%.0f GB/s)\n",
             bytes >> 20, shard, w2, double(shard) / (w2 * 1e3), w1, double(shard) / (w1 * 1e3));
    }
  });
  test::echoTagged(res1.log, "[fp8 phase]");
  ASSERT_TRUE(res1.ok()) << res1.log;
  auto res2 = test::runRanks(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto c = gputest::makeGpuComm(rank, size, store, fp8Opts());
    Timer tm;
    DevBuf a(kSizes[2]);
    CK(cudaMemset(a.base, 0x3c, kSizes[2]));
    CollOptions co;
    co.stream = tm.s;
    for (size_t bytes : kSizes) {
      const size_t count = bytes / 2;
      auto call = [&] { c->allReduce(a.base, a.base, count, DataType::bf16, RedOpKind::SUM, co); };
      const double eager = tm.eagerUs(call, iters);
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(tm.s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < iters; ++i) call();
      CK(cudaStreamEndCapture(tm.s, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      CK(cudaGraphLaunch(ge, tm.s));  // warm-up replay
      CK(cudaStreamSynchronize(tm.s));
      const double graph = tm.timeUs([&] { CK(cudaGraphLaunch(ge, tm.s)); }, iters);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
      if (rank == 0)
        printf("[fp8 phase] bf16 %zu MiB: full fp8 allreduce eager %.1f us, graph %.1f us "
               "(algbw %.0f GB/s)\n",
               bytes >> 20, eager, graph, double(bytes) / (graph * 1e3));
    }
    c->finalize();
  }, std::chrono::seconds(600));
  test::echoTagged(res2.log, "[fp8 phase]");
  ASSERT_TRUE(res2.ok()) << res2.log;
}

#else

TEST(GpuFp8, DeviceCodecEqualsHostCodec) { GTEST_SKIP() << "built without CUDA"; }

#endif
