// FP8 collectives on the CPU twin (host shared-memory transport), multi-process: bitwise equal to
// a single-process model built from the codec, identical on all ranks, accurate against a float64
// reference, NaN/Inf preserved, selection by hints and settings.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/select/select.h"
#include "helpers/fp8_util.h"
#include "helpers/mp.h"

using namespace cclx;
using namespace fp8test;

namespace {

const CollType kColls[] = {CollType::AllReduce, CollType::AllGather, CollType::ReduceScatter,
                           CollType::AllToAll};

std::shared_ptr<Comm> fp8Comm(int rank, int size, std::shared_ptr<Store> store,
                              const char* chunkBytes, const char* block) {
  setenv("CCLX_SHM_CHUNK_BYTES", chunkBytes, 1);
  setenv("CCLX_FP8_BLOCK_SIZE", block, 1);
  reloadConfig();
  Options o;
  o.hints["low_precision"] = "fp8";
  o.timeout = std::chrono::milliseconds(60000);
  return test::makeCpuComm(rank, size, std::move(store), o);
}

struct Outcome {
  double err = 0;  // normalized error against the float64 reference
  size_t wrong = 0;  // elements whose bits differ from the model
};

/// Runs one FP8 collective with every rank's data from makeData() and checks it.
/// `oneShot` picks the allreduce algorithm (hint fp8_algo) and its model.
Outcome runOne(Comm& c, Store& store, CollType t, DataType dt, RedOpKind op, size_t count, int B,
               Kind kind, uint32_t seed, bool inPlace, const std::string& tag,
               bool oneShot = false) {
  const int N = c.size(), me = c.rank();
  const bool avg = op == RedOpKind::AVG;
  const size_t inN = (t == CollType::AllReduce || t == CollType::AllGather) ? count : N * count;
  const size_t outN = t == CollType::AllReduce || t == CollType::ReduceScatter ? count : N * count;
  std::vector<Buf> X;
  for (int r = 0; r < N; ++r) X.push_back(makeData(dt, inN, kind, r, seed));
  Expect ex = expectFor(t, X, me, count, B, avg, dt, oneShot);
  const Buf& want = ex.want;
  const std::vector<double>& ref = ex.ref;
  // Run (poisoned output; in place: the input lives inside the output buffer).
  Buf out(dt, std::max(outN, inN));
  out.poison();
  const size_t es = dtypeSize(dt);
  const void* send = X[me].data();
  if (inPlace) {
    size_t at = t == CollType::AllGather ? me * count : 0;
    std::memcpy(out.bytes.data() + at * es, X[me].bytes.data(), inN * es);
    send = out.bytes.data() + at * es;
  }
  CollOptions co;
  co.hints["low_precision"] = "fp8";
  co.hints["fp8_algo"] = oneShot ? "oneshot" : "twoshot";
  const std::string algo = oneShot ? "fp8_oneshot" : "fp8";
  if (t == CollType::AllReduce)
    MP_CHECK(c.selectAllReduceAlgo(count, dt, op, co) == algo, "%s: %s not selected", tag.c_str(),
             algo.c_str());
  switch (t) {
    case CollType::AllReduce: c.allReduce(send, out.data(), count, dt, op, co); break;
    case CollType::AllGather: c.allGather(send, out.data(), count, dt, co); break;
    case CollType::ReduceScatter:
      if (inPlace) {
        // recv = send + rank * count (torch's in-place reduce_scatter_tensor layout).
        c.reduceScatter(send, static_cast<char*>(const_cast<void*>(send)) + me * count * es, count,
                        dt, op, co);
        std::memmove(out.bytes.data(), out.bytes.data() + me * count * es, count * es);
      } else {
        c.reduceScatter(send, out.data(), count, dt, op, co);
      }
      break;
    default: c.allToAll(send, out.data(), count, dt, co); break;
  }
  Outcome res;
  std::vector<double> got(outN);
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < outN; ++i) {
    if (!sameBits(out, want, i)) {
      if (res.wrong < 3)
        fprintf(stderr, "%s: element %zu got %a want %a\n", tag.c_str(), i, out.get(i), want.get(i));
      ++res.wrong;
    }
    got[i] = double(out.get(i));
    for (size_t k = 0; k < es; ++k) hash = (hash ^ out.bytes[i * es + k]) * 1099511628211ull;
  }
  res.err = normErr(ref, got);
  if (t == CollType::AllReduce || t == CollType::AllGather) {  // identical on every rank
    store.set(tag + "/" + std::to_string(me), std::to_string(hash));
    std::string h0 = store.get(tag + "/0", std::chrono::milliseconds(60000));
    MP_CHECK(h0 == std::to_string(hash), "%s: rank %d result differs from rank 0 (%s vs %s)",
             tag.c_str(), me, h0.c_str(), std::to_string(hash).c_str());
  }
  return res;
}

void sweep(int N, const char* chunk, const char* block, std::vector<size_t> counts) {
  auto res = test::runRanks(N, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto c = fp8Comm(rank, size, store, chunk, block);
    const int B = std::atoi(block);
    int k = 0;
    for (CollType t : kColls)
      for (DataType dt : {DataType::f32, DataType::bf16, DataType::f16})
        for (RedOpKind op : {RedOpKind::SUM, RedOpKind::AVG}) {
          if (op == RedOpKind::AVG && t != CollType::AllReduce && t != CollType::ReduceScatter)
            continue;
          for (size_t n : counts)
            for (bool inPlace : {false, true})
              for (bool one : {false, true}) {
              if (one && t != CollType::AllReduce) continue;
              std::string tag = std::string(collName(t)) + (one ? "1" : "") + "/" +
                                dtypeName(dt) + "/" + opName(op) + "/" + std::to_string(n) +
                                (inPlace ? "/ip" : "") + "/" + std::to_string(k++);
              Outcome o =
                  runOne(*c, *store, t, dt, op, n, B, Kind::Gaussian, 17 + k, inPlace, tag, one);
              MP_CHECK(o.wrong == 0, "%s: %zu elements differ from the model", tag.c_str(), o.wrong);
              // Sanity bound only (two roundings of at most 2^-4 each); AccuracyTargets below
              // holds the real targets on large data.
              MP_CHECK(o.err < (n < 1000 ? 0.13 : 0.05), "%s: error %.4f", tag.c_str(), o.err);
            }
        }
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace

TEST(Fp8Collectives, TwoRanksChunkedOddCounts) { sweep(2, "4096", "128", {1, 37, 1003, 20011}); }
TEST(Fp8Collectives, FourRanks) { sweep(4, "16384", "128", {5, 999, 6007}); }
TEST(Fp8Collectives, EightRanks) { sweep(8, "65536", "128", {3, 2049}); }
TEST(Fp8Collectives, BlockSizes32And256) {
  sweep(2, "8192", "32", {77, 5001});
  sweep(3, "8192", "256", {77, 5001});
}

TEST(Fp8Collectives, AccuracyTargets) {
  for (int N : {2, 8}) {
    auto res = test::runRanks(N, [&](int rank, int size, std::shared_ptr<Store> store) {
      auto c = fp8Comm(rank, size, store, "1048576", "128");
      int k = 0;
      for (CollType t : kColls)
        for (DataType dt : {DataType::f32, DataType::bf16})
          for (Kind kind : {Kind::Gaussian, Kind::Outliers, Kind::Small})
            for (bool one : {false, true}) {
            if (one && t != CollType::AllReduce) continue;
            size_t n = t == CollType::AllReduce ? (1u << 17) : (1u << 16);
            std::string tag = std::string("acc/") + collName(t) + (one ? "-oneshot" : "") + "/" +
                              dtypeName(dt) + "/" + kindName(kind) + "/" + std::to_string(k++);
            Outcome o =
                runOne(*c, *store, t, dt, RedOpKind::SUM, n, 128, kind, 99, false, tag, one);
            // One quantization (one-shot allreduce and the exchanges) against two.
            double limit = t == CollType::AllReduce && !one ? 0.040 : 0.028;
            if (rank == 0) printf("[fp8 accuracy] N=%d %s err=%.4f\n", size, tag.c_str(), o.err);
            MP_CHECK(o.wrong == 0, "%s: %zu elements differ from the model", tag.c_str(), o.wrong);
            MP_CHECK(o.err <= limit, "%s: error %.4f above %.3f", tag.c_str(), o.err, limit);
          }
      c->finalize();
    });
    for (size_t pos = 0, t; (t = res.log.find("[fp8 accuracy]", pos)) != std::string::npos;) {
      const size_t end = res.log.find('\n', t);
      printf("%s\n", res.log.substr(t, end - t).c_str());  // the numbers docs/PERF.md quotes
      pos = end == std::string::npos ? res.log.size() : end;
    }
    ASSERT_TRUE(res.ok()) << res.log;
  }
}

TEST(Fp8Collectives, NanAndInfPreserved) {
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = fp8Comm(rank, size, store, "1048576", "128");
    const float inf = std::numeric_limits<float>::infinity();
    const size_t n = 1000;
    Buf x = makeData(DataType::f32, n, Kind::Gaussian, rank, 5);
    if (rank == 0) { x.set(5, std::nanf("")); x.set(301, -inf); }
    if (rank == 1) { x.set(300, inf); x.set(301, inf); x.set(700, -inf); }
    for (const char* algo : {"twoshot", "oneshot"}) {
      Buf out(DataType::f32, n);
      out.poison();
      CollOptions co;
      co.hints["fp8_algo"] = algo;
      c->allReduce(x.data(), out.data(), n, DataType::f32, RedOpKind::SUM, co);
      MP_CHECK(std::isnan(out.get(5)), "%s", algo);
      MP_CHECK(out.get(300) == inf, "%s", algo);
      MP_CHECK(std::isnan(out.get(301)), "%s", algo);  // -Inf + Inf
      MP_CHECK(out.get(700) == -inf, "%s", algo);
      for (size_t i : {size_t(4), size_t(299), size_t(302), size_t(999)})
        MP_CHECK(std::isfinite(out.get(i)), "%s: element %zu", algo, i);
    }
    Buf g(DataType::bf16, 2 * n), xb(DataType::bf16, n);
    for (size_t i = 0; i < n; ++i) xb.set(i, x.get(i));
    g.poison();
    c->allGather(xb.data(), g.data(), n, DataType::bf16);
    MP_CHECK(std::isnan(g.get(5)) && g.get(n + 300) == inf && g.get(301) == -inf);
    MP_CHECK(std::isfinite(g.get(6)) && std::isfinite(g.get(n + 299)));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(Fp8Select, HintsAndSettings) {
  Config cfg;
  CollArgs a;
  a.type = CollType::AllReduce;
  a.dtype = DataType::bf16;
  a.op = RedOpKind::SUM;
  a.count = 1000;
  EXPECT_FALSE(lowPrecisionWanted(a, cfg));  // off by default
  a.opts.hints["low_precision"] = "fp8";
  EXPECT_TRUE(lowPrecisionWanted(a, cfg));  // forced, any size
  a.op = RedOpKind::MAX;
  EXPECT_FALSE(lowPrecisionWanted(a, cfg));
  a.op = RedOpKind::AVG;
  a.dtype = DataType::i32;
  EXPECT_FALSE(lowPrecisionWanted(a, cfg));
  a.dtype = DataType::f32;
  a.opts.hints["low_precision"] = "off";
  cfg.lpAllReduce = true;
  cfg.lpMinBytes = 1024;
  EXPECT_FALSE(lowPrecisionWanted(a, cfg));
  a.opts.hints.clear();
  EXPECT_TRUE(lowPrecisionWanted(a, cfg));  // 4000 bytes >= 1024
  a.count = 100;
  EXPECT_FALSE(lowPrecisionWanted(a, cfg));
  a.count = 1 << 20;
  a.type = CollType::AllGather;
  EXPECT_FALSE(lowPrecisionWanted(a, cfg));
  cfg.lpAllGather = true;
  EXPECT_TRUE(lowPrecisionWanted(a, cfg));
  a.type = CollType::Broadcast;
  EXPECT_FALSE(lowPrecisionWanted(a, cfg));
}

TEST(Fp8Select, CommPicksFp8ByHint) {
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = fp8Comm(rank, size, store, "1048576", "128");
    // 2 ranks: one-shot by default up to the table's size, two-shot by hint or above it.
    MP_CHECK(c->selectAllReduceAlgo(100, DataType::f32, RedOpKind::SUM) == "fp8_oneshot");
    const size_t table = autoMaxBytes(Algo::Fp8OneShot, Config{}, 2) / 4;  // f32 elements
    MP_CHECK(table > 0, "2 ranks: one-shot expected in the table");
    MP_CHECK(c->selectAllReduceAlgo(table, DataType::f32, RedOpKind::SUM) == "fp8_oneshot");
    MP_CHECK(c->selectAllReduceAlgo(table + 1, DataType::f32, RedOpKind::SUM) == "fp8");
    MP_CHECK(autoMaxBytes(Algo::Fp8OneShot, Config{}, 3) == 0 && autoMaxBytes(Algo::Fp8OneShot, Config{}, 8) == 0, "3-8 ranks: two-shot");
    CollOptions two, bad;
    two.hints["fp8_algo"] = "twoshot";
    MP_CHECK(c->selectAllReduceAlgo(100, DataType::f32, RedOpKind::SUM, two) == "fp8");
    bad.hints["fp8_algo"] = "threeshot";
    bool threw = false;
    try {
      c->selectAllReduceAlgo(100, DataType::f32, RedOpKind::SUM, bad);
    } catch (const Error& e) {
      threw = e.code() == cclxInvalidArgument;
    }
    MP_CHECK(threw, "an unknown fp8_algo must be refused");
    CollOptions off;
    off.hints["low_precision"] = "off";
    MP_CHECK(c->selectAllReduceAlgo(100, DataType::f32, RedOpKind::SUM, off) != "fp8");
    MP_CHECK(c->selectAllReduceAlgo(100, DataType::f32, RedOpKind::MAX) != "fp8");
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}
