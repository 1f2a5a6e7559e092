// DDA flat, Lamport and tree allreduce on real GPUs: every dtype and op, sizes from 1 element to 64 MiB,
// odd counts, unaligned pointers, in-place and out-of-place. Each rank must produce exactly the
// bits of the fixed-order reference (ranks 0..N-1 combined with dtype_math), hence identical bits
// on all ranks; float results are also checked against a float64 reference.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

struct Case {
  DataType t;
  ReduceOp op;
  std::string algo;  // "flat", "lamport", "tree", "auto"
  size_t count;
  bool inPlace;
  bool unaligned;    // pointers offset by one element
  uint64_t seed;
};

// Runs one allreduce and checks it; returns false if the algorithm could not be forced.
void runCase(Comm& c, int rank, int n, const Case& k, DevBuf& a, DevBuf& b, cudaStream_t s) {
  const size_t es = dtypeSize(k.t), bytes = k.count * es, off = k.unaligned ? es : 0;
  std::vector<std::vector<char>> in(n);
  for (int r = 0; r < n; ++r) in[r] = genBuf(k.t, k.op.kind, k.seed, r, k.count);
  std::vector<char> want = fixedOrder(k.t, k.op, in, k.count);
  char* send = a.base + off;
  char* recv = k.inPlace ? send : b.base + off;
  a.poison();
  b.poison();
  CK(cudaMemcpy(send, in[rank].data(), bytes, cudaMemcpyHostToDevice));
  CollOptions o;
  o.stream = s;
  if (k.algo != "auto") o.hints["algo"] = k.algo;
  std::string chosen = c.selectAllReduceAlgo(k.count, k.t, k.op, o);
  if (k.algo != "auto")
    MP_CHECK(chosen == k.algo, "forced %s but %s was selected (peer memory missing?)", k.algo.c_str(),
             chosen.c_str());
  c.allReduce(send, recv, k.count, k.t, k.op, o);
  CK(cudaStreamSynchronize(s));
  DevBuf& rb = k.inPlace ? a : b;
  std::vector<char> got(rb.total);
  CK(cudaMemcpy(got.data(), rb.base, rb.total, cudaMemcpyDeviceToHost));
  const char* res = got.data() + off;
  std::string what = strFormat("%s %s %s count=%zu %s%s n=%d", chosen.c_str(), dtypeName(k.t),
                               opName(k.op.kind), k.count, k.inPlace ? "in-place" : "out-of-place",
                               k.unaligned ? " unaligned" : "", n);
  for (size_t i = 0; i < off; ++i)
    MP_CHECK(uint8_t(got[i]) == 0xff, "%s: byte %zu before the buffer was written", what.c_str(), i);
  for (size_t i = off + bytes; i < rb.total; ++i)
    MP_CHECK(uint8_t(got[i]) == 0xff, "%s: byte %zu past the end was written", what.c_str(), i - off);
  const bool exact = chosen != "nccl";
  for (size_t i = 0; i < k.count; ++i) {
    if (exact && std::memcmp(res + i * es, want.data() + i * es, es) != 0)
      MP_CHECK(false, "%s: element %zu got %.9g want %.9g (fixed-order bits differ)", what.c_str(), i,
               toDouble(k.t, res + i * es), toDouble(k.t, want.data() + i * es));
    if (isFloat(k.t)) {
      double ref = refF64(k.t, k.op, in, i), g = toDouble(k.t, res + i * es);
      MP_CHECK(std::fabs(g - ref) <= tolerance(k.t) * (1 + std::fabs(ref)),
               "%s: element %zu got %.9g, float64 reference %.9g", what.c_str(), i, g, ref);
    }
  }
}

std::vector<ReduceOp> opsFor(DataType t) {
  std::vector<ReduceOp> ops = {RedOpKind::SUM, RedOpKind::AVG, RedOpKind::PRODUCT, RedOpKind::MIN,
                               RedOpKind::MAX};
  if (isFloat(t)) {
    ops.push_back(ReduceOp::premulSum(0.5));
  } else {
    // Integer PREMUL_SUM scales by the truncated factor; a signed type's negative one wraps.
    const bool isSigned = t == DataType::i8 || t == DataType::i32 || t == DataType::i64;
    ops.push_back(ReduceOp::premulSum(isSigned ? -3.0 : 3.0));
    ops.insert(ops.end(), {RedOpKind::BAND, RedOpKind::BOR, RedOpKind::BXOR});
  }
  return ops;
}

}  // namespace

TEST(GpuDda, EveryTypeOpSizeLayout) {
  GPU_REQUIRE(2);
  const int n = gpuWorldSize();
  auto res = test::runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DevBuf a(1 << 20), b(1 << 20);
    const DataType types[] = {DataType::f32, DataType::bf16, DataType::f16, DataType::f64,
                              DataType::i32, DataType::i64, DataType::u32, DataType::u64,
                              DataType::i8, DataType::u8};
    uint64_t seed = 1;
    for (DataType t : types)
      for (ReduceOp op : opsFor(t))
        for (std::string algo : {"flat", "tree", "lamport"})
          for (size_t count : {size_t(1), size_t(3), size_t(33), size_t(4097)})
            for (int layout = 0; layout < 4; ++layout)
              if (algo != "lamport" || isFloat(t))  // Lamport carries the float types only
                runCase(*c, rank, size, {t, op, algo, count, bool(layout & 1), bool(layout & 2), seed++},
                      a, b, s);
    CK(cudaStreamDestroy(s));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuDda, LargeMessagesAndAutoSelection) {
  GPU_REQUIRE(2);
  const int n = gpuWorldSize();
  auto res = test::runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t big = (64u << 20) + 64;
    DevBuf a(big), b(big);
    // Lamport up to its inbox (16 MiB with 2 ranks and the default staging), then auto.
    const size_t lamportMax = size == 2 ? (size_t(16) << 20) : (size_t(2) << 20);
    for (DataType t : {DataType::bf16, DataType::f32, DataType::f64})
      for (size_t count : {size_t(300007), lamportMax / dtypeSize(t) - 3, lamportMax / dtypeSize(t)})
        for (int layout : {0, 3})
          runCase(*c, rank, size, {t, RedOpKind::SUM, "lamport", count, bool(layout & 1), bool(layout & 2), 50},
                  a, b, s);
    uint64_t seed = 1000;
    // Tree across the chunk boundary (the staging holds less than 64 MiB), flat at its limit.
    for (DataType t : {DataType::f32, DataType::bf16}) {
      const size_t es = dtypeSize(t);
      for (size_t count : {size_t(65537), (size_t(1) << 20) + 3, (size_t(64) << 20) / es - 3})
        for (int layout : {0, 3})
          runCase(*c, rank, size, {t, RedOpKind::SUM, "tree", count, bool(layout & 1), bool(layout & 2), seed++},
                  a, b, s);
      for (size_t count : {size_t(8191), (size_t(64) << 10) / es + 1})
        for (int layout : {0, 3})
          runCase(*c, rank, size, {t, RedOpKind::SUM, "flat", count, bool(layout & 1), bool(layout & 2), seed++},
                  a, b, s);
      for (size_t bytes : {size_t(1) << 10, size_t(1) << 20, size_t(48) << 20})
        runCase(*c, rank, size, {t, RedOpKind::SUM, "auto", bytes / es + 1, false, false, seed++}, a, b, s);
    }
    // Bitwise ops run on DDA at any size.
    runCase(*c, rank, size, {DataType::i32, RedOpKind::BXOR, "auto", (size_t(40) << 20) / 4 + 1, true, false, 7},
            a, b, s);
    CK(cudaStreamDestroy(s));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuDda, SelectionFollowsSettings) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    auto sel = [&](size_t bytes, const char* hint) {
      CollOptions o;
      if (hint) o.hints["algo"] = hint;
      return c->selectAllReduceAlgo(bytes / 2, DataType::bf16, RedOpKind::SUM, o);
    };
    MP_CHECK(sel(1024, nullptr) == "flat", "1 KiB: %s", sel(1024, nullptr).c_str());
    MP_CHECK(sel(4 << 20, nullptr) == "lamport", "4 MiB: %s", sel(4 << 20, nullptr).c_str());
    MP_CHECK(sel(16 << 20, nullptr) == "lamport", "16 MiB: %s", sel(16 << 20, nullptr).c_str());
    MP_CHECK(sel(32 << 20, nullptr) == "tree", "32 MiB: %s", sel(32 << 20, nullptr).c_str());
    MP_CHECK(sel(32 << 20, "lamport") == "tree", "lamport falls back to tree above one inbox");
    MP_CHECK(c->selectAllReduceAlgo(1 << 20, DataType::i32, RedOpKind::SUM) == "tree",
             "integers never take the Lamport path");
    MP_CHECK(sel(256 << 20, nullptr) == "nccl", "256 MiB: %s", sel(256 << 20, nullptr).c_str());
    MP_CHECK(sel(1024, "nccl") == "nccl", "hint nccl");
    MP_CHECK(sel(1024, "tree") == "tree", "hint tree");
    MP_CHECK(sel(1024, "lamport") == "lamport", "hint lamport");
    MP_CHECK(sel(512 << 10, "flat") == "flat", "hint flat at 512 KiB");
    MP_CHECK(sel(4 << 20, "flat") == "tree", "flat falls back to tree when the message does not fit");
    bool threw = false;
    try {
      sel(1024, "bogus");
    } catch (const Error& e) {
      threw = e.code() == cclxInvalidArgument;
    }
    MP_CHECK(threw, "unknown algo hint must be rejected");
    Options plain;
    plain.backend = "nccl";
    plain.name = "plain";
    auto p = makeGpuComm(rank, size, store, plain);
    MP_CHECK(p->selectAllReduceAlgo(512, DataType::bf16, RedOpKind::SUM) == "nccl", "backend nccl");
    p->finalize();
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// The Lamport inboxes' empty pattern (all ones) is a NaN of every float type: inputs made of it
// must neither hang the readers nor come out as anything but NaN.
TEST(GpuDda, LamportAllOnesInputs) {
  GPU_REQUIRE(2);
  const int n = gpuWorldSize();
  auto res = test::runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    const size_t count = 100001;
    DevBuf a(count * 8 + 64), b(count * 8 + 64);
    CollOptions o;
    o.hints["algo"] = "lamport";
    for (DataType t : {DataType::f32, DataType::bf16, DataType::f16, DataType::f64}) {
      const size_t es = dtypeSize(t);
      a.poison();  // 0xff everywhere: every element all ones, on every rank
      b.poison();
      MP_CHECK(c->selectAllReduceAlgo(count, t, RedOpKind::SUM, o) == "lamport", "lamport not selected");
      c->allReduce(a.base, b.base, count, t, RedOpKind::SUM, o);
      c->allReduce(a.base, a.base, count, t, RedOpKind::MAX, o);
      CK(cudaDeviceSynchronize());
      for (DevBuf* d : {&a, &b}) {
        std::vector<char> got(count * es);
        CK(cudaMemcpy(got.data(), d->base, got.size(), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; ++i)
          MP_CHECK(std::isnan(toDouble(t, got.data() + i * es)), "%s element %zu is not NaN", dtypeName(t), i);
      }
    }
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

#else
TEST(GpuDda, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif
