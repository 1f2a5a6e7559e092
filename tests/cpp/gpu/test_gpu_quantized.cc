// reduce_scatter_quantized on GPUs, several ranks per GPU (rank r on GPU r % count): the peer
// kernel "sr_bf16" and (one GPU per rank) the NCCL sequence, bit for bit against the rounding
// definition of core/elements/stochastic.h computed here on the host and against the host twin
// (a CPU comm of the same ranks), SUM and AVG, odd counts, in place; a CUDA graph replayed with
// fresh inputs and a changed seed value in device memory; a rank that never calls is named by
// the timeout and the output is all ones; the FP8 payload (hint low_precision=fp8) equals the
// twin's.
//
// World size: CCLX_TEST_RANKS (default 4).
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/elements/stochastic.h"
#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

// Rank r's send buffer (size * count floats) of data set `seed`: signed values over 2^-8..2^8.
std::vector<float> sendOf(int r, int size, size_t count, uint64_t seed) {
  std::vector<float> v(size_t(size) * count);
  uint64_t s = seed * 1000003 + uint64_t(r);
  for (float& x : v) {
    s = sr::mix64(s + 0x9e3779b97f4a7c15ull);
    const float m = float(s >> 40) / float(1 << 24) + 0.5f;  // [0.5, 1.5)
    x = std::ldexp((s & 1) ? -m : m, int((s >> 1) % 17) - 8);
  }
  return v;
}

int64_t seedOf(int r, uint64_t k) { return int64_t(k * 7919) - 100 + r; }

// What rank `rank` receives, from the definition: every rank's contribution rounded with its own
// seed, float sums in rank order, AVG divided once.
std::vector<float> expected(int rank, int size, size_t count, uint64_t data, uint64_t k, bool avg) {
  std::vector<float> acc(count);
  for (int s = 0; s < size; ++s) {
    const std::vector<float> x = sendOf(s, size, count, data);
    for (size_t i = 0; i < count; ++i) {
      const size_t idx = size_t(rank) * count + i;
      const float v = math::bf16ToF32(sr::srBf16(x[idx], uint64_t(seedOf(s, k)), idx, uint32_t(s)));
      acc[i] = s == 0 ? v : acc[i] + v;
    }
  }
  if (avg)
    for (float& a : acc) a = a / float(size);
  return acc;
}

struct Dev {
  float* send = nullptr;
  float* recv = nullptr;
  int64_t* seed = nullptr;
  size_t n = 0, count = 0;
  Dev(int size, size_t c) : n(size_t(size) * c), count(c) {
    CK(cudaMalloc(&send, n * 4));
    CK(cudaMalloc(&recv, count * 4 + 4));
    CK(cudaMalloc(&seed, 8));
  }
  ~Dev() {
    (void)cudaFree(send);
    (void)cudaFree(recv);
    (void)cudaFree(seed);
  }
  void fill(const std::vector<float>& x, int64_t s, cudaStream_t st) {
    CK(cudaMemcpyAsync(send, x.data(), n * 4, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(seed, &s, 8, cudaMemcpyHostToDevice, st));
    CK(cudaMemsetAsync(recv, 0xff, count * 4 + 4, st));
    CK(cudaStreamSynchronize(st));  // the host sources are locals
  }
  std::vector<float> out() const {  // the output and the guard element after it
    std::vector<float> h(count + 1);
    CK(cudaMemcpy(h.data(), recv, (count + 1) * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

void expectBits(const std::vector<float>& got, const std::vector<float>& want, size_t count,
                const std::string& what) {
  const int bad = std::memcmp(got.data(), want.data(), count * 4);
  if (bad == 0) return;
  size_t i = 0;
  while (i < count && std::memcmp(&got[i], &want[i], 4) == 0) ++i;
  MP_CHECK(false, "%s: element %zu: %.9g vs %.9g", what.c_str(), i, double(got[i]), double(want[i]));
}

// Eager calls of every count and op (with `hints`), against the definition, the twin, and the
// guard element after the output.
void eagerSuite(const std::map<std::string, std::string>& hints, const char* name) {
  runTwinRanks(sharedWorldSize(), name, std::string(name) + "_twin", [&](TwinRank& r) {
    CollOptions co;
    co.stream = r.st.s;
    co.hints = hints;
    uint64_t k = 1;
    for (size_t count : {size_t(1), size_t(7), size_t(4099), (size_t(1) << 20) + 3}) {
      for (bool avg : {false, true}) {
        const uint64_t data = count + (avg ? 1 : 0);
        const std::vector<float> x = sendOf(r.rank, r.size, count, data);
        const std::string what = std::string(name) + (avg ? " AVG " : " SUM ") + std::to_string(count);
        Dev d(r.size, count);
        d.fill(x, seedOf(r.rank, k), r.st.s);
        const ReduceOp op = avg ? RedOpKind::AVG : RedOpKind::SUM;
        r.gpu->reduceScatterQuantized(d.send, d.recv, count, op, d.seed, co);
        CK(cudaStreamSynchronize(r.st.s));
        const std::vector<float> got = d.out();
        uint32_t guard;
        std::memcpy(&guard, &got[count], 4);
        MP_CHECK(guard == 0xffffffffu, "%s: wrote past the output", what.c_str());
        expectBits(got, expected(r.rank, r.size, count, data, k, avg), count, what + " (definition)");
        std::vector<float> tw(count);
        const int64_t s = seedOf(r.rank, k);
        r.twin->reduceScatterQuantized(x.data(), tw.data(), count, op, &s)->wait();
        expectBits(got, tw, count, what + " (host twin)");
        // In place: the output is the own block of the input.
        d.fill(x, s, r.st.s);
        float* own = d.send + size_t(r.rank) * count;
        r.gpu->reduceScatterQuantized(d.send, own, count, op, d.seed, co);
        CK(cudaStreamSynchronize(r.st.s));
        std::vector<float> ip(count);
        CK(cudaMemcpy(ip.data(), own, count * 4, cudaMemcpyDeviceToHost));
        expectBits(ip, tw, count, what + " in place");
        ++k;
      }
    }
  });
}

}  // namespace

TEST(GpuQuantized, PeerKernelEqualsDefinitionAndTwin) {
  GPU_REQUIRE(1);
  eagerSuite({}, "rsq_peer");
}

// One GPU per rank only (NCCL refuses ranks that share a GPU): round, NCCL all-to-all, local sum.
TEST(GpuQuantized, NcclSequenceEqualsDefinitionAndTwin) {
  GPU_REQUIRE(2);
  if (sharedWorldSize() > deviceCount()) GTEST_SKIP() << "ranks share a GPU: no NCCL";
  eagerSuite({{"algo", "nccl"}}, "rsq_nccl");
}

// One capture, replays with new inputs and a new seed value written into the seed's device
// memory before each: every replay equals the definition for that seed (the kernel reads it).
TEST(GpuQuantized, GraphReplayReadsTheSeed) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "rsq_graph", "rsq_graph_twin", [&](TwinRank& r) {
    const size_t count = 40961;
    Dev d(r.size, count);
    d.fill(sendOf(r.rank, r.size, count, 1), seedOf(r.rank, 1), r.st.s);
    CollOptions co;
    co.stream = r.st.s;
    r.gpu->reduceScatterQuantized(d.send, d.recv, count, RedOpKind::SUM, d.seed, co);  // warm-up
    CK(cudaStreamSynchronize(r.st.s));
    Graph g(r.st.s, [&] {
      r.gpu->reduceScatterQuantized(d.send, d.recv, count, RedOpKind::SUM, d.seed, co);
    });
    const uint64_t data[] = {2, 2, 3, 2}, ks[] = {10, 11, 10, 10};
    std::vector<std::vector<float>> outs;
    g.replay(4, [&](int rep) {
      d.fill(sendOf(r.rank, r.size, count, data[rep]), seedOf(r.rank, ks[rep]), r.st.s);
    }, [&](int rep) {
      outs.push_back(d.out());
      expectBits(outs.back(), expected(r.rank, r.size, count, data[rep], ks[rep], false), count,
                 "graph replay " + std::to_string(rep));
    });
    MP_CHECK(std::memcmp(outs[0].data(), outs[1].data(), count * 4) != 0,
             "a new seed value did not change the result");
  });
}

// Hint low_precision=fp8: the FP8 reduce-scatter on both (bit for bit, the FP8 kernels and their
// CPU twin agree), whatever the seeds.
TEST(GpuQuantized, Fp8PayloadEqualsTwin) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "rsq_fp8", "rsq_fp8_twin", [&](TwinRank& r) {
    CollOptions co;
    co.stream = r.st.s;
    co.hints["low_precision"] = "fp8";
    CollOptions ho;
    ho.hints = co.hints;
    for (size_t count : {size_t(5), size_t(4099), (size_t(1) << 18) + 1}) {
      for (bool avg : {false, true}) {
        const std::vector<float> x = sendOf(r.rank, r.size, count, 50 + count);
        Dev d(r.size, count);
        d.fill(x, 1, r.st.s);
        const ReduceOp op = avg ? RedOpKind::AVG : RedOpKind::SUM;
        r.gpu->reduceScatterQuantized(d.send, d.recv, count, op, d.seed, co);
        CK(cudaStreamSynchronize(r.st.s));
        std::vector<float> tw(count);
        const int64_t other = 2;
        r.twin->reduceScatterQuantized(x.data(), tw.data(), count, op, &other, ho)->wait();
        expectBits(d.out(), tw, count, std::string("fp8 ") + (avg ? "AVG " : "SUM ") + std::to_string(count));
      }
    }
  });
}

// The FP8 payload's staging fails to grow on every rank (CCLX_TEST_GROW_FAIL): the call, and the
// one after it, run as the quantized op chosen again from the call (bits of the rounding
// definition), or fail cleanly where nothing else can run it (ranks sharing a GPU: no NCCL), and
// never hand back the exact reduce-scatter the lowered call would fall to.
TEST(GpuQuantized, Fp8StagingThatFailsKeepsTheQuantizedRounding) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "rsq_fp8_grow", "rsq_fp8_grow_twin", [&](TwinRank& r) {
    // Ranks sharing a GPU grew the exchange's staging at creation (growth 1).
    const bool shares = r.size > deviceCount();
    setenv("CCLX_TEST_GROW_FAIL", shares ? "all:2" : "all:1", 1);
    CollOptions co;
    co.stream = r.st.s;
    co.hints["low_precision"] = "fp8";
    const size_t count = 4099;
    for (uint64_t k = 1; k <= 2; ++k) {
      const std::vector<float> x = sendOf(r.rank, r.size, count, 70 + k);
      Dev d(r.size, count);
      d.fill(x, seedOf(r.rank, k), r.st.s);
      std::string outcome = "ok";
      try {
        r.gpu->reduceScatterQuantized(d.send, d.recv, count, RedOpKind::SUM, d.seed, co);
        CK(cudaStreamSynchronize(r.st.s));
      } catch (const Error& e) {
        MP_CHECK(e.code() != cclxInternalError, "rank %d: internal error: %s", r.rank, e.what());
        outcome = e.what();
      }
      if (outcome != "ok") {
        MP_CHECK(shares, "rank %d: failed although NCCL could run it: %s", r.rank, outcome.c_str());
        std::vector<float> got = d.out();
        for (size_t i = 0; i < count; ++i)
          MP_CHECK(std::isnan(got[i]) || std::memcmp(&got[i], "\xff\xff\xff\xff", 4) == 0,
                   "rank %d: a failed call left element %zu = %g", r.rank, i, double(got[i]));
        continue;
      }
      const std::vector<float> got = d.out();
      expectBits(got, expected(r.rank, r.size, count, 70 + k, k, false), count,
                 "after the failed FP8 growth, call " + std::to_string(k));
      std::vector<float> exact(count, 0.f);
      for (int s = 0; s < r.size; ++s) {
        const std::vector<float> xs = sendOf(s, r.size, count, 70 + k);
        for (size_t i = 0; i < count; ++i) exact[i] += xs[size_t(r.rank) * count + i];
      }
      MP_CHECK(std::memcmp(got.data(), exact.data(), count * 4) != 0,
               "rank %d: call %llu gave the exact reduce-scatter, not the quantized op", r.rank,
               (unsigned long long)k);
    }
    unsetenv("CCLX_TEST_GROW_FAIL");
  });
}

// The last rank never calls: the others time out naming it, their outputs are all ones. The
// timeout (5 s) follows CCLX_TEST_TIME_SCALE (helpers/scale.h).
TEST(GpuQuantized, MissingRankIsNamed) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  const auto timeout = test::expiring(std::chrono::seconds(5));
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = sharedGpuComm(rank, size, store, "rsq_missing", timeout);
    if (rank == size - 1) {  // alive (never calling) until the others have their timeout
      test::waitForOthers(*store, "rsq_missing", rank, size,
                          timeout + test::guard(std::chrono::seconds(30)));
      return;  // never calls; leaves without finalize
    }
    const size_t count = 100003;
    Dev d(size, count);
    d.fill(sendOf(rank, size, count, 5), 1, nullptr);
    CK(cudaMemset(d.recv, 0, count * 4));
    try {
      auto w = gpu->reduceScatterQuantized(d.send, d.recv, count, RedOpKind::SUM, d.seed);
      w->waitBlocking(std::chrono::seconds(60));
      MP_CHECK(false, "the call without rank %d completed", size - 1);
    } catch (const Error& e) {
      MP_CHECK(e.code() == cclxTimeout, "code %d: %s", int(e.code()), e.what());
      MP_CHECK(std::string(e.what()).find("rank(s) " + std::to_string(size - 1)) != std::string::npos,
               "the message does not name rank %d: %s", size - 1, e.what());
    }
    CK(cudaDeviceSynchronize());
    std::vector<uint32_t> h(count);
    CK(cudaMemcpy(h.data(), d.recv, count * 4, cudaMemcpyDeviceToHost));
    for (uint32_t v : h) MP_CHECK(v == 0xffffffffu, "the output is not poisoned");
    gpu->finalize();
    test::othersDone(*store, "rsq_missing", rank);
  }, std::chrono::seconds(300));
  ASSERT_TRUE(res.ok()) << res.log;
}

#else

TEST(GpuQuantized, PeerKernelEqualsDefinitionAndTwin) { GTEST_SKIP() << "built without CUDA"; }

#endif
