// The fused allreduce + residual add + RMSNorm (+ FP8) on CPU comms (the host twins of the GPU
// kernels, src/host/algos/rmsnorm.cc): against float64 at world sizes 2..8 (a sample of hidden sizes
// 128..16384, one not a multiple of 8, and 1..4096 tokens; bf16, f16, f32; with and without FP8),
// bit for bit against the unfused host sequence (comm.allReduce, then core/elements/rmsnorm.h's row rules)
// for every algorithm; the canonical order of the sum of squares against an emulation of the GPU
// blocks; selection, settings, bad arguments and a missing rank.
#include <gtest/gtest.h>

#include <cclx/cclx.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/settings/config.h"
#include "core/select/select.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"
#include "helpers/rms_util.h"

using namespace cclx;
using namespace rmstest;
using cclx::test::makeCpuComm;
using cclx::test::runRanks;

namespace {

constexpr char kPoisonByte = char(0xA5);

// Host buffers of one call (each [tokens, hidden] buffer `offset` bytes into its allocation,
// poisoned outputs, a guard byte after each).
struct Bufs {
  std::vector<char> x, res, rOut, y, q, scales;
  size_t off, bytes;
  Bufs(const Case& c, const Data& d, int rank) : off(c.offset) {
    bytes = c.tokens * c.hidden * es(c.t);
    x.assign(off + bytes + 1, kPoisonByte);
    std::copy(d.x[size_t(rank)].begin(), d.x[size_t(rank)].end(), x.begin() + long(off));
    res.assign(off + bytes + 1, kPoisonByte);
    std::copy(d.res.begin(), d.res.end(), res.begin() + long(off));
    if (!c.inPlace) {
      rOut.assign(off + bytes + 1, kPoisonByte);
      if (c.y) y.assign(off + bytes + 1, kPoisonByte);
    }
    if (c.fp8) {
      q.assign(off + c.tokens * c.hidden + 1, kPoisonByte);
      scales.assign(c.tokens * 4 + 4, kPoisonByte);
    }
  }
  RmsNormArgs args(const Case& c, const Data& d) {
    RmsNormArgs a;
    a.x = x.data() + off;
    a.residual = res.data() + off;
    a.residualOut = c.inPlace ? res.data() + off : rOut.data() + off;
    a.weight = d.w.data();
    a.out = !c.y ? nullptr : c.inPlace ? x.data() + off : y.data() + off;
    a.fp8Out = c.fp8 ? q.data() + off : nullptr;
    a.scales = c.fp8 ? reinterpret_cast<float*>(scales.data()) : nullptr;
    a.staticScale = c.staticScale ? &d.scale : nullptr;
    a.tokens = c.tokens;
    a.hidden = c.hidden;
    a.dtype = c.t;
    a.eps = c.eps;
    return a;
  }
  Out out(const Case& c) const {
    Out o;
    const std::vector<char>& r = c.inPlace ? res : rOut;
    o.r.assign(r.begin() + long(off), r.begin() + long(off + bytes));
    MP_CHECK(r[off + bytes] == kPoisonByte, "%s: wrote past the residual output", describe(c).c_str());
    if (c.y) {
      const std::vector<char>& yy = c.inPlace ? x : y;
      o.y.assign(yy.begin() + long(off), yy.begin() + long(off + bytes));
      MP_CHECK(yy[off + bytes] == kPoisonByte, "%s: wrote past the output", describe(c).c_str());
    }
    if (c.fp8) {
      o.q.assign(q.begin() + long(off), q.begin() + long(off + c.tokens * c.hidden));
      MP_CHECK(q[off + c.tokens * c.hidden] == kPoisonByte, "%s: wrote past the FP8 output",
               describe(c).c_str());
      o.scales.resize(c.tokens);
      std::memcpy(o.scales.data(), scales.data(), c.tokens * 4);
      MP_CHECK(scales[c.tokens * 4] == kPoisonByte, "%s: wrote past the scales", describe(c).c_str());
    }
    return o;
  }
};

Out runFused(Comm& comm, const Case& c, const Data& d) {
  Bufs b(c, d, comm.rank());
  CollOptions o;
  o.hints = c.hints;
  if (c.expectAlgo) {
    const std::string algo = comm.selectAllReduceRmsNormAlgo(b.args(c, d), o);
    MP_CHECK(algo == c.expectAlgo, "%s: selection picked %s, expected %s", describe(c).c_str(),
             algo.c_str(), c.expectAlgo);
  }
  comm.allReduceRmsNorm(b.args(c, d), o);
  return b.out(c);
}

// The unfused host sequence: this comm's allreduce, then the row rules.
Out runUnfusedSequence(Comm& comm, const Case& c, const Data& d) {
  std::vector<char> ar(c.tokens * c.hidden * es(c.t));
  comm.allReduce(d.x[size_t(comm.rank())].data(), ar.data(), c.tokens * c.hidden, c.t, RedOpKind::SUM);
  MP_CHECK(ar == allreduceBits(c, d), "%s: the allreduce is not rank-ordered", describe(c).c_str());
  return unfused(c, d, ar);
}

// Every algorithm on one case: float64 check of the first, all equal to the unfused sequence.
void checkCase(Comm& comm, Case c, uint64_t seed) {
  const Data d = generate(c, comm.size(), seed);
  const Out want = runUnfusedSequence(comm, c, d);
  bool first = true;
  for (const char* algo : {"oneshot", "twoshot", "unfused", "auto"}) {
    c.hints["fused_algo"] = algo;
    const Out got = runFused(comm, c, d);
    if (first) {
      const std::string e = checkF64(c, d, got);
      MP_CHECK(e.empty(), "%s: %s", describe(c).c_str(), e.c_str());
      first = false;
    }
    const std::string e = sameBits(got, want);
    MP_CHECK(e.empty(), "%s: differs from the unfused sequence: %s", describe(c).c_str(), e.c_str());
  }
}

Case mk(DataType t, size_t tokens, size_t hidden, bool fp8 = false, bool stat = false,
        bool y = true, bool inPlace = false, size_t offset = 0) {
  Case c;
  c.t = t;
  c.tokens = tokens;
  c.hidden = hidden;
  c.fp8 = fp8;
  c.staticScale = stat;
  c.y = y;
  c.inPlace = inPlace;
  c.offset = offset;
  return c;
}

// A sample of the grid (hidden 128..16384, tokens 1..4096, every dtype, FP8 or not), rotated by
// world size so that 2..8 ranks together cover more of it.
std::vector<Case> sampleCases(int n) {
  const DataType types[] = {DataType::bf16, DataType::f16, DataType::f32};
  std::vector<Case> v = {
      mk(types[n % 3], 1, 128),
      mk(types[(n + 1) % 3], 5, 1000, true),                 // not a multiple of 8
      mk(types[(n + 2) % 3], 3, 16384, n % 2 == 0),
      mk(DataType::bf16, 64, 4096, true, true, false),       // static scale, FP8 only
      mk(types[n % 3], n % 2 ? 4096 : 2048, 128, n % 2 == 0),
      mk(DataType::f32, 17, 2056, false, false, true, true, 4),  // in place, 4-byte aligned
      mk(types[(n + 1) % 3], 33, 1003, true, false, true, false, 2),  // 2-byte aligned
      mk(DataType::f16, n + 1, 8192, n % 3 == 0, n % 3 == 0),
  };
  return v;
}

}  // namespace

// The GPU's reduction of a row's squares (row.cuh: thread t of T holds partials t + kT, a warp's
// xor butterfly, warp 0 over the group values) gives rms::sumSquares' bits at every block size.
TEST(RmsNormRules, BlockReductionEmulationEqualsCanonicalOrder) {
  for (size_t esize : {size_t(2), size_t(4)}) {
    const size_t E = 16 / esize;
    for (size_t hidden : {size_t(1), size_t(7), size_t(128), size_t(1000), size_t(4096), size_t(16384),
                          size_t(20011)}) {
      std::vector<float> r(hidden);
      for (size_t i = 0; i < hidden; ++i)
        r[i] = float(std::ldexp(unit(5, hidden, i), int(i % 19) - 9));
      const float want = rms::sumSquares(r.data(), hidden, esize);
      const size_t V = (hidden + E - 1) / E;
      for (int T : {128, 256, 512}) {
        const int K = 1024 / T;
        std::vector<float> acc(size_t(T) * size_t(K), 0.f);  // [thread][k]
        for (int t = 0; t < T; ++t)
          for (size_t v = size_t(t), i = 0; v < V; v += size_t(T), ++i)
            for (size_t e = 0; e < E && v * E + e < hidden; ++e) {
              float& a = acc[size_t(t) * size_t(K) + i % size_t(K)];
              a = rms::sqAdd(a, r[v * E + e]);
            }
        auto butterfly = [](std::vector<float> lanes) {  // 32 lanes, xor masks 16..1; lane 0
          for (int m = 16; m >= 1; m >>= 1) {
            std::vector<float> next(32);
            for (int l = 0; l < 32; ++l) next[size_t(l)] = fp8::addRn(lanes[size_t(l)], lanes[size_t(l ^ m)]);
            lanes = next;
          }
          return lanes[0];
        };
        std::vector<float> group(32);
        for (int k = 0; k < K; ++k)
          for (int w = 0; w < T / 32; ++w) {
            std::vector<float> lanes(32);
            for (int l = 0; l < 32; ++l) lanes[size_t(l)] = acc[size_t(32 * w + l) * size_t(K) + size_t(k)];
            group[size_t(w + k * (T / 32))] = butterfly(lanes);
          }
        const float got = butterfly(group);
        EXPECT_EQ(math::f32Bits(got), math::f32Bits(want)) << "hidden " << hidden << " esize "
                                                           << esize << " threads " << T;
      }
    }
  }
}

// World sizes 2..8: every algorithm against float64 and bit for bit against the unfused sequence.
TEST(HostRmsNorm, AgainstFloat64AndUnfusedAtWorldSizes2To8) {
  for (int n = 2; n <= 8; ++n) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      auto comm = makeCpuComm(rank, size, store, hosttest::testOpts());
      uint64_t seed = 1000 + uint64_t(size) * 100;
      for (const Case& c : sampleCases(size)) checkCase(*comm, c, ++seed);
      comm->finalize();
    }, std::chrono::seconds(600));
    ASSERT_TRUE(res.ok()) << "world size " << n << "\n" << res.log;
  }
}

// Small step slots: the one-shot and two-shot walk several chunks of rows; a row larger than a
// slot runs the unfused sequence, whatever is asked. 60 calls back to back with fresh data.
TEST(HostRmsNorm, ChunksFallbackAndBackToBack) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    setenv("CCLX_SHM_CHUNK_BYTES", "8192", 1);
    reloadConfig();
    auto comm = makeCpuComm(rank, size, store, hosttest::testOpts());
    checkCase(*comm, mk(DataType::bf16, 41, 1000, true), 1);   // 2000-byte rows: 4 per slot
    checkCase(*comm, mk(DataType::f32, 9, 1500), 2);           // 6000-byte rows: 1 per slot
    Case big = mk(DataType::f32, 3, 4096);                     // 16 KiB rows: no fused twin
    big.hints["fused_algo"] = "oneshot";
    const Data d = generate(big, size, 3);
    Bufs b(big, d, rank);
    CollOptions o;
    o.hints = big.hints;
    MP_CHECK(comm->selectAllReduceRmsNormAlgo(b.args(big, d), o) == "unfused(flat)",
             "picked %s", comm->selectAllReduceRmsNormAlgo(b.args(big, d), o).c_str());
    checkCase(*comm, big, 4);
    const char* algos[] = {"oneshot", "twoshot", "unfused"};
    for (int i = 0; i < 60; ++i) {
      Case c = mk(i % 2 ? DataType::bf16 : DataType::f16, size_t(1 + i % 7), 96 + size_t(i) * 8, i % 3 == 0);
      c.hints["fused_algo"] = algos[i % 3];
      const Data di = generate(c, size, 500 + uint64_t(i));
      const Out got = runFused(*comm, c, di);
      const std::string e = sameBits(got, unfused(c, di, allreduceBits(c, di)));
      MP_CHECK(e.empty(), "call %d (%s): %s", i, describe(c).c_str(), e.c_str());
    }
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostRmsNorm, SelectionHintsAndSettings) {
  auto res = runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = makeCpuComm(rank, size, store, hosttest::testOpts());
    RmsNormArgs a;
    a.tokens = 4;
    a.hidden = 1024;
    a.dtype = DataType::bf16;  // 8 KiB: one-shot (CCLX_SHM_FLAT_MAX_BYTES 64K)
    MP_CHECK(comm->selectAllReduceRmsNormAlgo(a) == "fused_oneshot");
    a.tokens = 512;            // 1 MiB: two-shot
    MP_CHECK(comm->selectAllReduceRmsNormAlgo(a) == "fused_twoshot");
    CollOptions o;
    o.hints["fused_algo"] = "oneshot";
    MP_CHECK(comm->selectAllReduceRmsNormAlgo(a, o) == "fused_oneshot");
    o.hints["fused_algo"] = "unfused";
    MP_CHECK(comm->selectAllReduceRmsNormAlgo(a, o) == "unfused(tree)");
    o.hints["algo"] = "flat";
    MP_CHECK(comm->selectAllReduceRmsNormAlgo(a, o) == "unfused(flat)");
    o.hints["fused_algo"] = "fastest";
    try {
      comm->selectAllReduceRmsNormAlgo(a, o);
      MP_CHECK(false, "an unknown fused_algo was accepted");
    } catch (const Error& e) {
      MP_CHECK(e.code() == cclxInvalidArgument && std::string(e.what()).find("fastest") != std::string::npos,
               "%s", e.what());
    }
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(RmsNormSelect, GpuTableAndRules) {
  Config cfg;
  auto call = [](size_t tokens, size_t hidden) {
    CollArgs a;
    a.type = CollType::AllReduceRmsNorm;
    a.dtype = DataType::bf16;
    a.rms.tokens = tokens;
    a.rms.hidden = hidden;
    a.count = tokens * hidden;
    return a;
  };
  auto gpu = [](int n) {
    Caps c;
    c.worldSize = n;
    c.nccl = c.peer = true;
    c.allow(Algo::FusedOneShot, true);
    c.allow(Algo::FusedTwoShot, true);
    return c;
  };
  // TP 8, hidden 4096 bf16: one-shot to 32 tokens (256 KiB), two-shot to 512 (4 MiB), unfused above.
  EXPECT_EQ(select(call(32, 4096), cfg, gpu(8)), Algo::FusedOneShot);
  EXPECT_EQ(select(call(33, 4096), cfg, gpu(8)), Algo::FusedTwoShot);
  EXPECT_EQ(select(call(512, 4096), cfg, gpu(8)), Algo::FusedTwoShot);
  EXPECT_EQ(select(call(513, 4096), cfg, gpu(8)), Algo::Unfused);
  EXPECT_EQ(select(call(64, 4096), cfg, gpu(4)), Algo::FusedOneShot);   // 512 KiB
  EXPECT_EQ(select(call(65, 4096), cfg, gpu(4)), Algo::FusedTwoShot);
  EXPECT_EQ(select(call(1024, 4096), cfg, gpu(2)), Algo::FusedOneShot);  // 8 MiB
  EXPECT_EQ(select(call(1025, 4096), cfg, gpu(2)), Algo::Unfused);  // no two-shot at 2 ranks
  Caps c = gpu(8);
  c.allow(Algo::FusedOneShot, false);  // does not fit the inboxes
  EXPECT_EQ(select(call(8, 4096), cfg, c), Algo::FusedTwoShot);
  c.allow(Algo::FusedTwoShot, false);
  EXPECT_EQ(select(call(8, 4096), cfg, c), Algo::Unfused);
  c = gpu(8);
  c.timed = false;  // ranks share a GPU: every size that fits
  EXPECT_EQ(select(call(4096, 8192), cfg, c), Algo::FusedOneShot);
  c.dataAsFlag = false;
  EXPECT_EQ(select(call(1, 4096), cfg, c), Algo::Unfused);
  c = gpu(8);
  c.peer = false;  // no peer memory (across hosts): NCCL + the local kernel
  EXPECT_EQ(select(call(1, 4096), cfg, c), Algo::Base);
  c = gpu(8);
  c.plainNccl = true;
  EXPECT_EQ(select(call(1, 4096), cfg, c), Algo::Base);
  Config over;
  over.fusedOneShotMaxBytes = 1 << 20;
  over.fusedTwoShotMaxBytes = 64 << 20;
  EXPECT_EQ(select(call(128, 4096), over, gpu(8)), Algo::FusedOneShot);
  EXPECT_EQ(select(call(4096, 4096), over, gpu(8)), Algo::FusedTwoShot);
  over.fusedAlgo = "unfused";
  EXPECT_EQ(select(call(1, 4096), over, gpu(8)), Algo::Unfused);
  over.fusedAlgo = "twoshot";
  EXPECT_EQ(select(call(1, 4096), over, gpu(8)), Algo::FusedTwoShot);
  CollArgs h = call(1, 4096);
  h.opts.hints["fused_algo"] = "oneshot";  // the hint beats the setting
  EXPECT_EQ(select(h, over, gpu(8)), Algo::FusedOneShot);
  h.opts.hints["fused_algo"] = "bogus";
  EXPECT_THROW(select(h, over, gpu(8)), Error);
}

TEST(RmsNormSelect, Settings) {
  const char* vars[] = {"CCLX_FUSED_ALGO", "CCLX_FUSED_ONESHOT_MAX_BYTES",
                        "CCLX_FUSED_TWOSHOT_MAX_BYTES", "CCLX_FUSED_STAGING_BYTES"};
  for (const char* v : vars) unsetenv(v);
  Config d = Config::fromEnv();
  EXPECT_EQ(d.fusedAlgo, "auto");
  EXPECT_EQ(d.fusedOneShotMaxBytes, 0u);
  EXPECT_EQ(d.fusedStagingBytes, size_t(32) << 20);
  setenv("CCLX_FUSED_ALGO", "TwoShot", 1);
  setenv("CCLX_FUSED_ONESHOT_MAX_BYTES", "1M", 1);
  setenv("CCLX_FUSED_TWOSHOT_MAX_BYTES", "16M", 1);
  setenv("CCLX_FUSED_STAGING_BYTES", "64M", 1);
  Config c = Config::fromEnv();
  EXPECT_EQ(c.fusedAlgo, "twoshot");
  EXPECT_EQ(c.fusedOneShotMaxBytes, size_t(1) << 20);
  EXPECT_EQ(c.fusedTwoShotMaxBytes, size_t(16) << 20);
  EXPECT_EQ(c.fusedStagingBytes, size_t(64) << 20);
  setenv("CCLX_FUSED_ALGO", "fast", 1);
  try {
    Config::fromEnv();
    ADD_FAILURE() << "CCLX_FUSED_ALGO=fast was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("CCLX_FUSED_ALGO"), std::string::npos) << e.what();
  }
  setenv("CCLX_FUSED_ALGO", "auto", 1);
  setenv("CCLX_FUSED_STAGING_BYTES", "12Q", 1);
  EXPECT_THROW(Config::fromEnv(), Error);
  for (const char* v : vars) unsetenv(v);
}

// Rejected arguments: cclxInvalidArgument naming the problem, and nothing written.
TEST(HostRmsNorm, BadArgumentsChangeNothing) {
  auto res = runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = makeCpuComm(rank, size, store, hosttest::testOpts());
    const Case c = mk(DataType::bf16, 4, 256, true);
    const Data d = generate(c, size, 9);
    auto expectBad = [&](const char* what, const char* needle, auto&& edit) {
      Bufs b(c, d, rank);
      RmsNormArgs a = b.args(c, d);
      edit(a, b);
      const auto before = std::make_tuple(b.rOut, b.y, b.q, b.scales, b.x, b.res);
      try {
        comm->allReduceRmsNorm(a);
        MP_CHECK(false, "%s was accepted", what);
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxInvalidArgument, "%s: code %d: %s", what, int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find(needle) != std::string::npos, "%s: unclear message: %s",
                 what, e.what());
      }
      MP_CHECK(before == std::make_tuple(b.rOut, b.y, b.q, b.scales, b.x, b.res), "%s: wrote", what);
    };
    expectBad("f64", "dtype", [](RmsNormArgs& a, Bufs&) { a.dtype = DataType::f64; });
    expectBad("hidden 0", "hidden", [](RmsNormArgs& a, Bufs&) { a.hidden = 0; });
    expectBad("hidden 2^24", "hidden", [](RmsNormArgs& a, Bufs&) { a.hidden = size_t(1) << 24; });
    expectBad("eps NaN", "eps", [](RmsNormArgs& a, Bufs&) { a.eps = std::nanf(""); });
    expectBad("eps < 0", "eps", [](RmsNormArgs& a, Bufs&) { a.eps = -1e-6f; });
    expectBad("null weight", "null", [](RmsNormArgs& a, Bufs&) { a.weight = nullptr; });
    expectBad("no output", "output", [](RmsNormArgs& a, Bufs&) { a.out = a.fp8Out = nullptr; });
    expectBad("no scales", "scales", [](RmsNormArgs& a, Bufs&) { a.scales = nullptr; });
    expectBad("static without fp8", "static", [](RmsNormArgs& a, Bufs&) {
      a.fp8Out = nullptr;
      a.staticScale = &a.eps;
    });
    expectBad("out over residual", "overlaps", [](RmsNormArgs& a, Bufs& b) {
      a.out = b.res.data() + 2;
    });
    expectBad("residualOut == x", "overlaps", [](RmsNormArgs& a, Bufs& b) {
      a.residualOut = b.x.data();
    });
    expectBad("out overlaps residualOut", "overlap", [](RmsNormArgs& a, Bufs& b) {
      a.out = b.rOut.data() + 64;
    });
    expectBad("fp8 over the weight", "overlaps", [&](RmsNormArgs& a, Bufs&) {
      a.fp8Out = const_cast<char*>(d.w.data());
    });
    // The ranks are still in step: a valid call works.
    checkCase(*comm, c, 10);
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// The last rank never calls: the others fail with a timeout naming it, outputs all ones.
TEST(HostRmsNorm, MissingRankIsNamedAndOutputsPoisoned) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    Options o = hosttest::testOpts();
    o.timeout = std::chrono::seconds(2);
    auto comm = makeCpuComm(rank, size, store, o);
    if (rank == size - 1) {  // stays away until the others have checked their failure
      for (int r = 0; r < size - 1; ++r)
        store->get("checked" + std::to_string(r), std::chrono::seconds(120));
      return;
    }
    for (const char* algo : {"oneshot"}) {
      const Case c = mk(DataType::bf16, 3, 512, true);
      const Data d = generate(c, size, 11);
      Bufs b(c, d, rank);
      CollOptions co;
      co.hints["fused_algo"] = algo;
      try {
        comm->allReduceRmsNorm(b.args(c, d), co);
        MP_CHECK(false, "completed without rank %d", size - 1);
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxTimeout, "code %d: %s", int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find(std::to_string(size - 1)) != std::string::npos,
                 "does not name rank %d: %s", size - 1, e.what());
      }
      const Out got = b.out(c);
      for (char ch : got.r) MP_CHECK(uint8_t(ch) == 0xff, "residual output not poisoned");
      for (char ch : got.y) MP_CHECK(uint8_t(ch) == 0xff, "output not poisoned");
      for (char ch : got.q) MP_CHECK(uint8_t(ch) == 0xff, "FP8 output not poisoned");
    }
    store->set("checked" + std::to_string(rank), "1");
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// The C API: cclxAllReduceRmsNorm gives the C++ call's bits; bad arguments fail with a message.
TEST(HostRmsNorm, CApi) {
  auto res = runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    cclxUniqueId id;
    if (rank == 0) {
      MP_CHECK(cclxGetUniqueId(&id) == cclxSuccess);
      store->set("uid", std::string(id.internal, sizeof(id.internal)));
    } else {
      const std::string s = store->get("uid", std::chrono::seconds(30));
      std::memcpy(id.internal, s.data(), sizeof(id.internal));
    }
    cclxComm_t comm = nullptr;
    MP_CHECK(cclxCommInitRank(&comm, size, id, rank, -1) == cclxSuccess, "%s", cclxGetLastError(nullptr));
    const Case c = mk(DataType::bf16, 6, 1000, true);
    const Data d = generate(c, size, 77);
    Bufs b(c, d, rank);
    const RmsNormArgs a = b.args(c, d);
    const cclxResult_t rc = cclxAllReduceRmsNorm(a.x, a.residual, a.residualOut, a.weight, a.out,
                                                 a.fp8Out, a.scales, nullptr, c.tokens, c.hidden,
                                                 cclxBfloat16, c.eps, comm, nullptr);
    MP_CHECK(rc == cclxSuccess, "%s", cclxGetLastError(comm));
    const std::string e = sameBits(b.out(c), unfused(c, d, allreduceBits(c, d)));
    MP_CHECK(e.empty(), "C API: %s", e.c_str());
    MP_CHECK(cclxAllReduceRmsNorm(a.x, a.residual, a.residualOut, a.weight, a.out, a.fp8Out,
                                  nullptr, nullptr, c.tokens, c.hidden, cclxBfloat16, c.eps, comm,
                                  nullptr) == cclxInvalidArgument);
    MP_CHECK(std::string(cclxGetLastError(comm)).find("scales") != std::string::npos, "%s",
             cclxGetLastError(comm));
    MP_CHECK(cclxCommFinalize(comm) == cclxSuccess);
    MP_CHECK(cclxCommDestroy(comm) == cclxSuccess);
  });
  ASSERT_TRUE(res.ok()) << res.log;
}
