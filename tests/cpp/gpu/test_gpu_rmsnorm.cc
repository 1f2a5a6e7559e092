// The fused allreduce + residual add + RMSNorm (+ FP8) on GPUs, several ranks per GPU (rank r on
// GPU r % count; processes on one GPU time-slice, so this checks correctness, never speed): every
// kernel variant (fused one-shot, fused two-shot, the unfused sequence over the DDA flat / Lamport
// / tree allreduce and, with one GPU per rank, over NCCL) against the host twin (a CPU comm of the
// same ranks running the same call on the same inputs) bit for bit, FP8 codes and scales
// included, and the twin against float64; eager, back to back without a host sync, and replayed
// from a CUDA graph with fresh inputs; a rank that never calls is named by the timeout and the
// outputs are all ones; a rank killed between calls is named by every survivor.
//
// World size: CCLX_TEST_RANKS (default 4); scripts/gpu_shared.sh runs 2, 3, 4, 5 and 8.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"
#include "helpers/rms_util.h"

using namespace cclx;
using namespace gputest;
using rmstest::Case;
using rmstest::Data;
using rmstest::Out;

namespace {

// Device buffers of one case: every [tokens, hidden] buffer `offset` bytes into a poisoned
// allocation with a guard byte after it.
struct DevCase {
  Case c;
  Data d;
  size_t bytes = 0;
  char *x = nullptr, *res = nullptr, *rOut = nullptr, *y = nullptr, *q = nullptr, *w = nullptr;
  float *scales = nullptr, *sscale = nullptr;
  std::vector<char*> allocs;

  char* alloc(size_t n) {
    char* p = poisoned(n + c.offset + 1);
    allocs.push_back(p);
    return p + c.offset;
  }
  DevCase(const Case& cs, int rank, int n, uint64_t seed) : c(cs) {
    bytes = c.tokens * c.hidden * rmstest::es(c.t);
    x = alloc(bytes);
    res = alloc(bytes);
    rOut = c.inPlace ? res : alloc(bytes);
    if (c.y) y = c.inPlace ? x : alloc(bytes);
    if (c.fp8) {
      q = alloc(c.tokens * c.hidden);
      scales = reinterpret_cast<float*>(poisoned(c.tokens * 4 + 4));
      allocs.push_back(reinterpret_cast<char*>(scales));
    }
    w = poisoned(c.hidden * rmstest::es(c.t));
    allocs.push_back(w);
    sscale = reinterpret_cast<float*>(poisoned(4));
    allocs.push_back(reinterpret_cast<char*>(sscale));
    refill(rank, n, seed, nullptr);
  }
  ~DevCase() {
    for (char* p : allocs) (void)cudaFree(p);
  }
  DevCase(const DevCase&) = delete;
  // New inputs (stream-ordered on s, or synchronous), outputs poisoned again.
  void refill(int rank, int n, uint64_t seed, cudaStream_t s) {
    d = rmstest::generate(c, n, seed);
    auto put = [&](void* dst, const void* src, size_t len) {
      if (s) CK(cudaMemcpyAsync(dst, src, len, cudaMemcpyHostToDevice, s));
      else CK(cudaMemcpy(dst, src, len, cudaMemcpyHostToDevice));
    };
    auto wipe = [&](void* dst, size_t len) {
      if (s) CK(cudaMemsetAsync(dst, 0xff, len, s));
      else CK(cudaMemset(dst, 0xff, len));
    };
    put(x, d.x[size_t(rank)].data(), bytes);
    put(res, d.res.data(), bytes);
    put(w, d.w.data(), d.w.size());
    put(sscale, &d.scale, 4);
    if (!c.inPlace) {
      wipe(rOut, bytes);
      if (c.y) wipe(y, bytes);
    }
    if (c.fp8) {
      wipe(q, c.tokens * c.hidden);
      wipe(scales, c.tokens * 4);
    }
    if (s) CK(cudaStreamSynchronize(s));  // the host data must outlive the copies
    else CK(cudaDeviceSynchronize());
  }
  RmsNormArgs args() const {
    RmsNormArgs a;
    a.x = x;
    a.residual = res;
    a.residualOut = rOut;
    a.weight = w;
    a.out = y;
    a.fp8Out = q;
    a.scales = scales;
    a.staticScale = c.staticScale ? sscale : nullptr;
    a.tokens = c.tokens;
    a.hidden = c.hidden;
    a.dtype = c.t;
    a.eps = c.eps;
    return a;
  }
  Out read() const {
    Out o;
    auto get = [](const char* p, size_t n, const char* what) {
      std::vector<char> v = d2h(p, n + 1);
      MP_CHECK(uint8_t(v.back()) == 0xff, "wrote past the end of %s", what);
      v.pop_back();
      return v;
    };
    o.r = get(rOut, bytes, "the residual output");
    if (c.y) o.y = get(y, bytes, "the output");
    if (c.fp8) {
      o.q = get(q, c.tokens * c.hidden, "the FP8 output");
      std::vector<char> s = get(reinterpret_cast<const char*>(scales), c.tokens * 4, "the scales");
      o.scales.resize(c.tokens);
      std::memcpy(o.scales.data(), s.data(), s.size());
    }
    return o;
  }
};

// The host twin's outputs for the same inputs (checked against float64 and the unfused rules).
Out twinResult(Comm& twin, const Case& c, const Data& d) {
  const size_t bytes = c.tokens * c.hidden * rmstest::es(c.t);
  std::vector<char> x = d.x[size_t(twin.rank())], res = d.res, rOut(bytes), y(bytes), q(c.tokens * c.hidden);
  std::vector<float> scales(c.tokens);
  RmsNormArgs a;
  a.x = x.data();
  a.residual = res.data();
  a.residualOut = rOut.data();
  a.weight = d.w.data();
  a.out = c.y ? y.data() : nullptr;
  a.fp8Out = c.fp8 ? q.data() : nullptr;
  a.scales = c.fp8 ? scales.data() : nullptr;
  a.staticScale = c.staticScale ? &d.scale : nullptr;
  a.tokens = c.tokens;
  a.hidden = c.hidden;
  a.dtype = c.t;
  a.eps = c.eps;
  twin.allReduceRmsNorm(a);
  Out o;
  o.r = rOut;
  if (c.y) o.y = y;
  if (c.fp8) {
    o.q = q;
    o.scales = scales;
  }
  const std::string e = rmstest::checkF64(c, d, o);
  MP_CHECK(e.empty(), "%s: host twin against float64: %s", rmstest::describe(c).c_str(), e.c_str());
  const std::string u = rmstest::sameBits(o, rmstest::unfused(c, d, rmstest::allreduceBits(c, d)));
  MP_CHECK(u.empty(), "%s: host twin against the unfused rules: %s", rmstest::describe(c).c_str(), u.c_str());
  return o;
}

void expectTwin(const DevCase& dc, Comm& twin, int rank, const char* when) {
  const Out got = dc.read();
  const std::string e = rmstest::sameBits(got, twinResult(twin, dc.c, dc.d));
  MP_CHECK(e.empty(), "%s (%s): rank %d differs from the host twin: %s",
           rmstest::describe(dc.c).c_str(), when, rank, e.c_str());
}

void runCase(Comm& gpu, Comm& twin, const Case& c, int rank, int n, uint64_t seed, cudaStream_t s) {
  DevCase dc(c, rank, n, seed);
  CollOptions co;
  co.stream = s;
  co.hints = c.hints;
  if (c.expectAlgo) {
    const std::string algo = gpu.selectAllReduceRmsNormAlgo(dc.args(), co);
    MP_CHECK(algo == c.expectAlgo, "%s: selection picked %s, expected %s",
             rmstest::describe(c).c_str(), algo.c_str(), c.expectAlgo);
  }
  gpu.allReduceRmsNorm(dc.args(), co);
  CK(cudaStreamSynchronize(s));
  expectTwin(dc, twin, rank, "single call");
}

Case mk(DataType t, size_t tokens, size_t hidden, const char* fused, const char* expect,
        bool fp8 = false, bool stat = false, bool y = true, bool inPlace = false, size_t offset = 0) {
  Case c;
  c.t = t;
  c.tokens = tokens;
  c.hidden = hidden;
  c.fp8 = fp8;
  c.staticScale = stat;
  c.y = y;
  c.inPlace = inPlace;
  c.offset = offset;
  if (fused) c.hints["fused_algo"] = fused;
  c.expectAlgo = expect;
  return c;
}

// The cases of one variant (tokens >= 8 so that the two-shot has rows on every rank).
std::vector<Case> variantCases(const char* fused, const char* algo, const char* expect) {
  std::vector<Case> v = {
      mk(DataType::bf16, 8, 4096, fused, expect),
      mk(DataType::f16, 13, 1000, fused, expect, true),                         // not a multiple of 8
      mk(DataType::f32, 9, 2056, fused, expect, true, true),                    // static scale
      mk(DataType::bf16, 64, 128, fused, expect, true, false, false),           // FP8 only
      mk(DataType::bf16, 11, 16384, fused, expect),                             // 4 vectors a thread
      mk(DataType::f32, 8, 16384, fused, expect, false, false, true, true),     // in place
      mk(DataType::f16, 10, 1003, fused, expect, true, false, true, false, 2),  // 2-byte aligned
      mk(DataType::bf16, 300, 512, fused, expect, true),                        // several rows a block
  };
  for (Case& c : v)
    if (algo) c.hints["algo"] = algo;
  return v;
}

void runSuite(const std::vector<Case>& cases, uint64_t seed0) {
  runTwinRanks(sharedWorldSize(), "rms", "rms_twin", [&](TwinRank& r) {
    uint64_t seed = seed0;
    for (const Case& c : cases) runCase(*r.gpu, *r.twin, c, r.rank, r.size, ++seed, r.st.s);
  });
}

}  // namespace

TEST(GpuRmsNorm, FusedOneShotEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(variantCases("oneshot", nullptr, "fused_oneshot"), 100);
}

TEST(GpuRmsNorm, FusedTwoShotEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(variantCases("twoshot", nullptr, "fused_twoshot"), 200);
}

TEST(GpuRmsNorm, UnfusedOverDdaEqualsHostTwin) {
  GPU_REQUIRE(1);
  std::vector<Case> cases;
  const char* expect[] = {"unfused(flat)", "unfused(lamport)", "unfused(tree)"};
  int k = 0;
  for (const char* algo : {"flat", "lamport", "tree"}) {
    std::vector<Case> v = variantCases("unfused", algo, nullptr);
    v[0].expectAlgo = expect[k++];  // the selection names the allreduce of the sequence
    cases.insert(cases.end(), v.begin(), v.end());
  }
  runSuite(cases, 300);
}

// One GPU per rank only (NCCL refuses ranks that share a GPU): NCCL's allreduce + the local kernel.
TEST(GpuRmsNorm, UnfusedOverNcclEqualsHostTwin) {
  GPU_REQUIRE(2);
  if (sharedWorldSize() > deviceCount()) GTEST_SKIP() << "ranks share a GPU: no NCCL";
  std::vector<Case> cases = variantCases("unfused", "nccl", "unfused(nccl)");
  runSuite(cases, 400);
}

// Auto: the selection (every size fits when ranks share a GPU) and small token counts (fewer rows
// than ranks: the two-shot cannot run there).
TEST(GpuRmsNorm, AutoAndFewTokens) {
  GPU_REQUIRE(1);
  std::vector<Case> cases = {
      mk(DataType::bf16, 1, 4096, nullptr, nullptr),
      mk(DataType::bf16, 3, 8192, "twoshot", nullptr, true),
      mk(DataType::f16, 2, 128, "oneshot", "fused_oneshot"),
      mk(DataType::f32, 1, 16384, nullptr, nullptr, true),
      mk(DataType::bf16, 2048, 4096, nullptr, nullptr),  // 16 MiB: the fused inboxes' limit
  };
  runSuite(cases, 500);
}

// 30 calls of every variant back to back with fresh data and their own buffers, no host sync;
// then one CUDA graph of five calls (one-shot, two-shot, two unfused, FP8) replayed four times
// with new inputs before each replay.
TEST(GpuRmsNorm, BackToBackAndGraphReplay) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "rms_b2b", "rms_twin", [&](TwinRank& r) {
    const int rank = r.rank, size = r.size;
    Comm &gpu = *r.gpu, &twin = *r.twin;
    Stream& st = r.st;
    const char* fused[] = {"oneshot", "twoshot", "unfused"};
    const char* algos[] = {"lamport", "flat", "tree"};
    const DataType types[] = {DataType::bf16, DataType::f32, DataType::f16};
    std::vector<std::unique_ptr<DevCase>> dcs;
    for (int i = 0; i < 30; ++i) {
      Case c = mk(types[i % 3], 8 + size_t(i % 5), 256 + 72 * size_t(i), fused[i % 3], nullptr,
                  i % 4 == 0, i % 8 == 0, true, i % 7 == 3);
      c.hints["algo"] = algos[(i / 3) % 3];
      dcs.push_back(std::make_unique<DevCase>(c, rank, size, 600 + uint64_t(i)));
    }
    CollOptions co;
    co.stream = st.s;
    for (auto& dc : dcs) {
      co.hints = dc->c.hints;
      gpu.allReduceRmsNorm(dc->args(), co);
    }
    CK(cudaStreamSynchronize(st.s));
    for (auto& dc : dcs) expectTwin(*dc, twin, rank, "back to back");

    std::vector<std::unique_ptr<DevCase>> g;
    g.push_back(std::make_unique<DevCase>(mk(DataType::bf16, 8, 4096, "oneshot", nullptr), rank, size, 700));
    g.push_back(std::make_unique<DevCase>(mk(DataType::bf16, 40, 2048, "twoshot", nullptr, true), rank, size, 701));
    g.push_back(std::make_unique<DevCase>(mk(DataType::f16, 16, 1000, "unfused", nullptr), rank, size, 702));
    g.push_back(std::make_unique<DevCase>(mk(DataType::bf16, 9, 4096, "unfused", nullptr, true, false, false),
                                          rank, size, 703));  // FP8 only: a stream-ordered temporary
    g.push_back(std::make_unique<DevCase>(mk(DataType::f32, 12, 777, "oneshot", nullptr, true, true, true, true),
                                          rank, size, 704));
    g[2]->c.hints["algo"] = "lamport";
    g[3]->c.hints["algo"] = "tree";
    Graph graph(st.s, [&] {
      for (auto& dc : g) {
        co.hints = dc->c.hints;
        gpu.allReduceRmsNorm(dc->args(), co);
      }
    });
    graph.replay(4, [&](int rep) {
      for (size_t i = 0; i < g.size(); ++i) g[i]->refill(rank, size, 800 + 10 * uint64_t(rep) + i, st.s);
    }, [&](int) {
      for (auto& dc : g) expectTwin(*dc, twin, rank, "graph replay");
    });
  });
}

// The last rank never calls: every other rank's fused call times out naming it, its outputs are
// all ones (NaN), and the comm refuses further work. The timeout (5 s) follows
// CCLX_TEST_TIME_SCALE (helpers/scale.h).
TEST(GpuRmsNorm, MissingRankIsNamed) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  const auto timeout = test::expiring(std::chrono::seconds(5));
  for (const char* fused : {"oneshot", "twoshot"}) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      auto gpu = sharedGpuComm(rank, size, store, "rms_missing", timeout);
      if (rank == size - 1) {  // alive (never calling) until the others have their timeout
        test::waitForOthers(*store, fused, rank, size,
                            timeout + test::guard(std::chrono::seconds(30)));
        return;  // never calls; leaves without finalize
      }
      DevCase dc(mk(DataType::bf16, 16, 2048, fused, nullptr, true), rank, size, 900);
      CK(cudaMemset(dc.rOut, 0, dc.bytes));  // not all ones before the call
      CK(cudaMemset(dc.y, 0, dc.bytes));
      CK(cudaMemset(dc.q, 0, dc.c.tokens * dc.c.hidden));
      CollOptions co;
      co.hints = dc.c.hints;
      try {
        auto w = gpu->allReduceRmsNorm(dc.args(), co);
        w->waitBlocking(std::chrono::seconds(60));
        MP_CHECK(false, "%s without rank %d completed", fused, size - 1);
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxTimeout, "%s: code %d: %s", fused, int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find("rank(s) " + std::to_string(size - 1)) != std::string::npos,
                 "%s: the message does not name rank %d: %s", fused, size - 1, e.what());
      }
      CK(cudaDeviceSynchronize());
      const Out o = dc.read();
      for (const std::vector<char>* v : {&o.r, &o.y, &o.q})
        for (char ch : *v) MP_CHECK(uint8_t(ch) == 0xff, "%s: an output is not poisoned", fused);
      try {
        gpu->allReduceRmsNorm(dc.args(), co);
        MP_CHECK(false, "%s: the failed comm accepted another call", fused);
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxTimeout, "%s: later call: code %d: %s", fused, int(e.code()), e.what());
      }
      gpu->finalize();
      test::othersDone(*store, fused, rank);
    }, std::chrono::seconds(300));
    ASSERT_TRUE(res.ok()) << fused << "\n" << res.log;
  }
}


// A rank SIGKILLed between fused calls: every survivor's next calls fail naming it (within the
// timeout, never a hang), and the comm refuses further calls.
TEST(GpuRmsNorm, KilledRankIsNamed) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  const int victim = n - 1;
  const auto timeout = test::expiring(std::chrono::seconds(6));  // CCLX_TEST_TIME_SCALE
  for (const char* fused : {"oneshot", "twoshot"}) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      auto gpu =
          sharedGpuComm(rank, size, store, fused[0] == 'o' ? "rms_kill_one" : "rms_kill_two", timeout);
      DevCase dc(mk(DataType::bf16, 16, 2048, fused, nullptr, true), rank, size, 901);
      CollOptions co;
      co.hints = dc.c.hints;
      bool failed = false;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 400 && !failed; ++i) {
        if (rank == victim && i == 25) raise(SIGKILL);
        try {
          auto w = gpu->allReduceRmsNorm(dc.args(), co);
          if (i % 4 == 3) w->waitBlocking(std::chrono::seconds(60));
        } catch (const Error& e) {
          failed = true;
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          MP_CHECK(e.code() == cclxTimeout || e.code() == cclxRemoteError, "%s: code %d: %s",
                   fused, int(e.code()), e.what());
          MP_CHECK(std::string(e.what()).find(std::to_string(victim)) != std::string::npos,
                   "%s: the error does not name rank %d: %s", fused, victim, e.what());
          std::printf("[rms_kill] %s rank %d: error after %.1f s\n", fused, rank, secs);
        }
      }
      MP_CHECK(failed, "%s: rank %d never noticed that rank %d died", fused, rank, victim);
      try {
        gpu->allReduceRmsNorm(dc.args(), co);
        MP_CHECK(false, "%s: the failed comm accepted another call", fused);
      } catch (const Error&) {
      }
      gpu->finalize();
    }, std::chrono::seconds(300));
    test::echoTagged(res.log, "[rms_kill]");
    for (int r = 0; r < n; ++r)
      if (r != victim) EXPECT_EQ(res.exitCodes[size_t(r)], 0) << fused << " rank " << r << "\n" << res.log;
  }
}

#else

TEST(GpuRmsNorm, FusedOneShotEqualsHostTwin) { GTEST_SKIP() << "built without CUDA"; }

#endif
