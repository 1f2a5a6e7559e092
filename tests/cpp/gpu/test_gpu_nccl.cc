// Every collective through NCCL on real GPUs, checked against host references; async Work
// semantics; pointer validation (host memory, another device's memory) before anything runs.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)
#include <cclx/nccl_info.h>

#include <cstdio>
#include <cstring>

#include "core/settings/config.h"
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

// Reductions: exact for integers, float64-close for floats (NCCL may order ranks differently).
void expectReduced(DataType t, ReduceOp op, const std::vector<std::vector<char>>& in, size_t first,
                   size_t n, const std::vector<char>& got, const char* what) {
  size_t es = dtypeSize(t);
  std::vector<std::vector<char>> slice;
  for (auto& v : in) slice.emplace_back(v.begin() + first * es, v.begin() + (first + n) * es);
  std::vector<char> want = fixedOrder(t, op, slice, n);
  for (size_t i = 0; i < n; ++i) {
    if (isFloat(t)) {
      double ref = refF64(t, op, slice, i), g = toDouble(t, got.data() + i * es);
      MP_CHECK(std::fabs(g - ref) <= 2 * tolerance(t) * (1 + std::fabs(ref)), "%s %s %s: [%zu] got %.9g want %.9g",
               what, dtypeName(t), opName(op.kind), i, g, ref);
    } else {
      MP_CHECK(std::memcmp(got.data() + i * es, want.data() + i * es, es) == 0, "%s %s %s: [%zu] got %.9g want %.9g",
               what, dtypeName(t), opName(op.kind), i, toDouble(t, got.data() + i * es),
               toDouble(t, want.data() + i * es));
    }
  }
}

void expectBytes(const std::vector<char>& got, size_t off, const std::vector<char>& want, size_t woff,
                 size_t bytes, const char* what) {
  MP_CHECK(std::memcmp(got.data() + off, want.data() + woff, bytes) == 0, "%s: data differs", what);
}

void allCollectives(Comm& c, int rank, int n, DataType t, cudaStream_t s) {
  const size_t count = 1001, es = dtypeSize(t), bytes = count * es;
  CollOptions o;
  o.stream = s;
  o.hints["algo"] = "nccl";
  std::vector<std::vector<char>> in(n), big(n);
  for (int r = 0; r < n; ++r) {
    in[r] = genBuf(t, RedOpKind::SUM, 11, r, count);
    big[r] = genBuf(t, RedOpKind::SUM, 12, r, count * n);
  }
  // AllReduce (every NCCL op) and Reduce.
  std::vector<ReduceOp> ops = {RedOpKind::SUM, RedOpKind::AVG, RedOpKind::MIN, RedOpKind::MAX,
                               ReduceOp::premulSum(2.0)};
  for (ReduceOp op : ops) {
    char* src = h2d(in[rank]);
    char* dst = poisoned(bytes);
    c.allReduce(src, dst, count, t, op, o);
    c.reduce(src, src, count, t, op, n - 1, o);  // in place at the root
    CK(cudaStreamSynchronize(s));
    expectReduced(t, op, in, 0, count, d2h(dst, bytes), "allReduce");
    if (rank == n - 1) expectReduced(t, op, in, 0, count, d2h(src, bytes), "reduce");
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }
  {  // PRODUCT on its own data
    std::vector<std::vector<char>> pin(n);
    for (int r = 0; r < n; ++r) pin[r] = genBuf(t, RedOpKind::PRODUCT, 13, r, count);
    char* src = h2d(pin[rank]);
    c.allReduce(src, src, count, t, RedOpKind::PRODUCT, o);
    CK(cudaStreamSynchronize(s));
    expectReduced(t, RedOpKind::PRODUCT, pin, 0, count, d2h(src, bytes), "allReduce in place");
    CK(cudaFree(src));
  }
  // Broadcast from the last rank.
  {
    char* buf = h2d(in[rank]);
    c.broadcast(buf, buf, count, t, n - 1, o);
    CK(cudaStreamSynchronize(s));
    expectBytes(d2h(buf, bytes), 0, in[n - 1], 0, bytes, "broadcast");
    CK(cudaFree(buf));
  }
  // AllGather: out of place, in place (own slot), send == recv, list.
  {
    char* src = h2d(in[rank]);
    char* dst = poisoned(n * bytes);
    c.allGather(src, dst, count, t, o);
    CK(cudaStreamSynchronize(s));
    auto got = d2h(dst, n * bytes);
    for (int r = 0; r < n; ++r) expectBytes(got, r * bytes, in[r], 0, bytes, "allGather");
    CK(cudaMemset(dst, 0xff, n * bytes));
    CK(cudaMemcpy(dst + rank * bytes, in[rank].data(), bytes, cudaMemcpyHostToDevice));
    c.allGather(dst + rank * bytes, dst, count, t, o);
    CK(cudaStreamSynchronize(s));
    got = d2h(dst, n * bytes);
    for (int r = 0; r < n; ++r) expectBytes(got, r * bytes, in[r], 0, bytes, "allGather in place");
    CK(cudaMemset(dst, 0xff, n * bytes));
    CK(cudaMemcpy(dst, in[rank].data(), bytes, cudaMemcpyHostToDevice));
    c.allGather(dst, dst, count, t, o);
    CK(cudaStreamSynchronize(s));
    got = d2h(dst, n * bytes);
    for (int r = 0; r < n; ++r) expectBytes(got, r * bytes, in[r], 0, bytes, "allGather send == recv");
    std::vector<void*> outs(n);
    for (auto& p : outs) p = poisoned(bytes);
    c.allGatherList(src, outs, count, t, o);
    CK(cudaStreamSynchronize(s));
    for (int r = 0; r < n; ++r) expectBytes(d2h(outs[r], bytes), 0, in[r], 0, bytes, "allGatherList");
    for (auto p : outs) CK(cudaFree(p));
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }
  // ReduceScatter: out of place, send == recv, list.
  for (ReduceOp op : {ReduceOp(RedOpKind::SUM), ReduceOp(RedOpKind::MAX)}) {
    char* src = h2d(big[rank]);
    char* dst = poisoned(bytes);
    c.reduceScatter(src, dst, count, t, op, o);
    CK(cudaStreamSynchronize(s));
    expectReduced(t, op, big, rank * count, count, d2h(dst, bytes), "reduceScatter");
    c.reduceScatter(src, src, count, t, op, o);
    CK(cudaStreamSynchronize(s));
    expectReduced(t, op, big, rank * count, count, d2h(src, bytes), "reduceScatter send == recv");
    CK(cudaMemcpy(src, big[rank].data(), n * bytes, cudaMemcpyHostToDevice));
    std::vector<const void*> ins(n);
    for (int r = 0; r < n; ++r) ins[r] = src + r * bytes;
    CK(cudaMemset(dst, 0xff, bytes));
    c.reduceScatterList(ins, dst, count, t, op, o);
    CK(cudaStreamSynchronize(s));
    expectReduced(t, op, big, rank * count, count, d2h(dst, bytes), "reduceScatterList");
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }
  // AllToAll out of place and in place; AllToAllV with uneven splits.
  {
    char* src = h2d(big[rank]);
    char* dst = poisoned(n * bytes);
    c.allToAll(src, dst, count, t, o);
    c.allToAll(src, src, count, t, o);
    CK(cudaStreamSynchronize(s));
    auto got = d2h(dst, n * bytes), got2 = d2h(src, n * bytes);
    for (int r = 0; r < n; ++r) {
      expectBytes(got, r * bytes, big[r], rank * bytes, bytes, "allToAll");
      expectBytes(got2, r * bytes, big[r], rank * bytes, bytes, "allToAll in place");
    }
    auto sc = [](int from, int to) { return size_t(1 + (from + 2 * to) % 3) * 97; };
    std::vector<size_t> scount(n), rcount(n);
    size_t stot = 0, rtot = 0;
    for (int r = 0; r < n; ++r) stot += (scount[r] = sc(rank, r)), rtot += (rcount[r] = sc(r, rank));
    CK(cudaMemcpy(src, big[rank].data(), n * bytes, cudaMemcpyHostToDevice));
    char* vdst = poisoned(rtot * es);
    c.allToAllV(src, scount, vdst, rcount, t, o);
    CK(cudaStreamSynchronize(s));
    got = d2h(vdst, rtot * es);
    size_t roff = 0;
    for (int r = 0; r < n; ++r) {
      size_t soff = 0;  // where rank r's block for me starts in its send buffer
      for (int j = 0; j < rank; ++j) soff += sc(r, j);
      expectBytes(got, roff * es, big[r], soff * es, rcount[r] * es, "allToAllV");
      roff += rcount[r];
    }
    CK(cudaFree(vdst));
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }
  // Send/Recv between pairs (0,1), (2,3), ...
  if (n % 2 == 0) {
    char* buf = rank % 2 == 0 ? h2d(in[rank]) : poisoned(bytes);
    if (rank % 2 == 0) c.send(buf, count, t, rank + 1, o);
    else c.recv(buf, count, t, rank - 1, o);
    CK(cudaStreamSynchronize(s));
    if (rank % 2 == 1) expectBytes(d2h(buf, bytes), 0, in[rank - 1], 0, bytes, "send/recv");
    CK(cudaFree(buf));
  }
  c.barrier(o);
  CK(cudaStreamSynchronize(s));
}

}  // namespace

TEST(GpuNccl, EveryCollectiveBothBackends) {
  GPU_REQUIRE(2);
  const int n = gpuWorldSize();
  auto res = test::runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
    for (const char* backend : {"nccl", "cclx"}) {
      Options opts;
      opts.backend = backend;
      opts.name = backend;
      auto c = makeGpuComm(rank, size, store, opts);
      cudaStream_t s;
      CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      for (DataType t : {DataType::f32, DataType::bf16, DataType::i32, DataType::f64})
        allCollectives(*c, rank, size, t, s);
      // FP8 types move as bytes.
      auto v = genBuf(DataType::fp8_e4m3, RedOpKind::SUM, 3, rank, 333);
      auto root = genBuf(DataType::fp8_e4m3, RedOpKind::SUM, 3, 0, 333);
      char* b = h2d(v);
      CollOptions o;
      o.stream = s;
      c->broadcast(b, b, 333, DataType::fp8_e4m3, 0, o);
      CK(cudaStreamSynchronize(s));
      MP_CHECK(d2h(b, 333) == root, "fp8 broadcast");
      CK(cudaFree(b));
      CK(cudaStreamDestroy(s));
      c->finalize();
    }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuNccl, AsyncWorkSemantics) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    MP_CHECK(ncclRuntimeVersion() >= 21900, "NCCL version %d", ncclRuntimeVersion());
    cudaStream_t user, other;
    CK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    for (const char* algo : {"flat", "tree", "nccl"}) {
      const size_t count = strcmp(algo, "flat") == 0 ? 1001 : 1 << 20;
      std::vector<std::vector<char>> in(size);
      for (int r = 0; r < size; ++r) in[r] = genBuf(DataType::f32, RedOpKind::SUM, 21, r, count);
      char* buf = poisoned(count * 4);
      // The input is written on the user stream right before the call: the async op must wait.
      CK(cudaMemcpyAsync(buf, in[rank].data(), count * 4, cudaMemcpyHostToDevice, user));
      CollOptions o;
      o.stream = user;
      o.async = true;
      o.hints["algo"] = algo;
      auto w = c->allReduce(buf, buf, count, DataType::f32, RedOpKind::SUM, o);
      w->wait(other);
      std::vector<char> got(count * 4);
      CK(cudaMemcpyAsync(got.data(), buf, count * 4, cudaMemcpyDeviceToHost, other));
      CK(cudaStreamSynchronize(other));
      MP_CHECK(w->isCompleted(), "%s: work not complete after the stream waited for it", algo);
      w->waitBlocking();
      expectReduced(DataType::f32, RedOpKind::SUM, in, 0, count, got, "async allReduce");
      CK(cudaFree(buf));
    }
    MP_CHECK(c->asyncError() == cclxSuccess, "asyncError");
    CK(cudaStreamDestroy(user));
    CK(cudaStreamDestroy(other));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuNccl, RejectsHostAndForeignPointers) {
  GPU_REQUIRE(1);
  const int gpus = gpuCount();
  auto res = test::runRanks(1, [gpus](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(0, 1, store);
    auto expectUsage = [](const std::function<void()>& f, const std::vector<std::string>& words,
                          const char* what) {
      std::string msg;
      bool ok = false;
      try {
        f();
      } catch (const Error& e) {
        ok = e.code() == cclxInvalidUsage;
        msg = e.what();
      }
      MP_CHECK(ok, "%s: expected cclxInvalidUsage, got '%s'", what, msg.c_str());
      for (auto& w : words) MP_CHECK(msg.find(w) != std::string::npos, "%s: '%s' lacks '%s'", what, msg.c_str(), w.c_str());
    };
    std::vector<float> host(64, 1.0f);
    char* dev = poisoned(256);
    expectUsage([&] { c->allReduce(host.data(), dev, 64, DataType::f32, RedOpKind::SUM); },
                {"host memory", "cuda:0"}, "host send");
    expectUsage([&] { c->allReduce(dev, host.data(), 64, DataType::f32, RedOpKind::SUM); },
                {"host memory"}, "host recv");
    if (gpus >= 2) {
      CK(cudaSetDevice(1));
      char* far = poisoned(256);
      CK(cudaSetDevice(0));
      expectUsage([&] { c->allReduce(dev, far, 64, DataType::f32, RedOpKind::SUM); },
                  {"cuda:1", "cuda:0"}, "other device recv");
      expectUsage([&] { c->broadcast(far, far, 64, DataType::f32, 0); }, {"cuda:1", "cuda:0"},
                  "other device broadcast");
      auto got = d2h(far, 256);
      for (char ch : got) MP_CHECK(uint8_t(ch) == 0xff, "rejected call wrote to its buffer");
      CK(cudaSetDevice(1));
      CK(cudaFree(far));
      CK(cudaSetDevice(0));
    }
    auto got = d2h(dev, 256);
    for (char ch : got) MP_CHECK(uint8_t(ch) == 0xff, "rejected call wrote to its buffer");
    // A 1-rank comm still works (NCCL only: no peers).
    CK(cudaMemcpy(dev, host.data(), 256, cudaMemcpyHostToDevice));
    c->allReduce(dev, dev, 64, DataType::f32, RedOpKind::SUM);
    CK(cudaDeviceSynchronize());
    std::vector<float> one(64);
    CK(cudaMemcpy(one.data(), dev, 256, cudaMemcpyDeviceToHost));
    MP_CHECK(one == host, "1-rank allreduce");
    CK(cudaFree(dev));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Library loading needs no GPU: runs wherever a libnccl.so.2 is installed.
TEST(GpuNcclLib, LoadsAndReportsVersion) {
  auto ok = test::runRanks(1, [](int, int, std::shared_ptr<Store>) {
    if (ncclRuntimeVersion() == 0) {
      std::printf("no libnccl.so.2 found: nothing to check\n");
      return;
    }
    MP_CHECK(ncclRuntimeVersion() >= 21900, "version %d", ncclRuntimeVersion());
    MP_CHECK(!ncclRuntimePath().empty(), "library path unknown");
  });
  ASSERT_TRUE(ok.ok()) << ok.log;
  auto bad = test::runRanks(1, [](int, int, std::shared_ptr<Store>) {
    setenv("CCLX_NCCL_PATH", "/nonexistent/libnccl.so.2", 1);
    reloadConfig();
    MP_CHECK(ncclRuntimeVersion() == 0, "a bad CCLX_NCCL_PATH must not fall back");
  });
  ASSERT_TRUE(bad.ok()) << bad.log;
}

#else
TEST(GpuNccl, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif
