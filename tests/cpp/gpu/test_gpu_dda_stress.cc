// DDA under pressure: 10^5 back-to-back allreduces without host synchronization, CUDA-graph
// capture with 10^3 replays and fresh inputs, eager calls mixed between replays, the peer barrier,
// and the timeout path (a rank that never arrives is named in a cclxTimeout; also for the FP8
// one-shot allreduce).
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)
#include <thread>

#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

// Inputs `sets` x this rank, their device copies, and the expected result of each set.
struct Inputs {
  std::vector<char*> dev;
  std::vector<std::vector<char>> want;
  Inputs(DataType t, ReduceOp op, size_t count, int sets, int rank, int n, uint64_t seed) {
    for (int k = 0; k < sets; ++k) {
      std::vector<std::vector<char>> in(n);
      for (int r = 0; r < n; ++r) in[r] = genBuf(t, op.kind, seed + k, r, count);
      want.push_back(fixedOrder(t, op, in, count));
      char* p;
      CK(cudaMalloc(&p, in[rank].size()));
      CK(cudaMemcpy(p, in[rank].data(), in[rank].size(), cudaMemcpyHostToDevice));
      dev.push_back(p);
    }
  }
  ~Inputs() {
    for (char* p : dev) (void)cudaFree(p);
  }
};

void expectBits(const char* dev, const std::vector<char>& want, const char* what) {
  std::vector<char> got = d2h(dev, want.size());
  for (size_t i = 0; i < got.size(); ++i)
    MP_CHECK(got[i] == want[i], "%s: byte %zu differs from the fixed-order result", what, i);
}

void backToBack(Comm& c, int rank, int n, const char* algo, DataType t, size_t count, int calls) {
  const size_t bytes = count * dtypeSize(t);
  Inputs in(t, RedOpKind::SUM, count, 3, rank, n, 77);
  std::vector<char*> out(8);
  for (auto& p : out) {
    CK(cudaMalloc(&p, bytes));
    CK(cudaMemset(p, 0xff, bytes));
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CollOptions o;
  o.stream = s;
  o.hints["algo"] = algo;
  MP_CHECK(c.selectAllReduceAlgo(count, t, RedOpKind::SUM, o) == algo, "%s not selected", algo);
  for (int k = 0; k < calls; ++k) c.allReduce(in.dev[k % 3], out[k % 8], count, t, RedOpKind::SUM, o);
  CK(cudaStreamSynchronize(s));
  for (int j = 0; j < 8; ++j) {
    int last = calls - 1 - ((calls - 1 - j) % 8);  // last call that wrote out[j]
    expectBits(out[j], in.want[last % 3], strFormat("%s back-to-back out[%d]", algo, j).c_str());
  }
  for (auto p : out) CK(cudaFree(p));
  CK(cudaStreamDestroy(s));
}

}  // namespace

TEST(GpuDdaStress, BackToBackWithoutHostSync) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    backToBack(*c, rank, size, "flat", DataType::bf16, 1001, 100000);
    backToBack(*c, rank, size, "tree", DataType::f32, 100003, 5000);
    // Large messages (the whole staging of a block part in use), back to back.
    backToBack(*c, rank, size, "tree", DataType::bf16, (size_t(1) << 23) + 5, 400);
    backToBack(*c, rank, size, "tree", DataType::f32, 1000003, 2000);
    backToBack(*c, rank, size, "flat", DataType::f32, 3, 20000);
    backToBack(*c, rank, size, "lamport", DataType::bf16, 100003, 100000);
    backToBack(*c, rank, size, "lamport", DataType::f32, (size_t(1) << 22) - 1, 1000);
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuDdaStress, GraphCaptureAndReplay) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    const size_t nf = 4097, nt = 2000003;
    Inputs inF(DataType::bf16, RedOpKind::SUM, nf, 4, rank, size, 500);
    Inputs inT(DataType::f32, RedOpKind::SUM, nt, 4, rank, size, 600);
    char *srcF, *srcT, *dstF, *dstT, *eager;
    CK(cudaMalloc(&srcF, nf * 2));
    CK(cudaMalloc(&dstF, nf * 2));
    CK(cudaMalloc(&srcT, nt * 4));
    CK(cudaMalloc(&dstT, nt * 4));
    CK(cudaMalloc(&eager, nf * 2));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CollOptions flat, tree, lam;
    flat.stream = tree.stream = lam.stream = s;
    flat.hints["algo"] = "flat";
    tree.hints["algo"] = "tree";
    lam.hints["algo"] = "lamport";
    char* dstL;
    CK(cudaMalloc(&dstL, nt * 4));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    c->allReduce(srcF, dstF, nf, DataType::bf16, RedOpKind::SUM, flat);
    c->allReduce(srcT, dstT, nt, DataType::f32, RedOpKind::SUM, tree);
    c->allReduce(dstF, dstF, nf, DataType::bf16, RedOpKind::MAX, flat);  // in place, idempotent
    c->allReduce(srcT, dstL, nt, DataType::f32, RedOpKind::SUM, lam);
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 1000; ++i) {
      int v = i % 4;
      CK(cudaMemcpyAsync(srcF, inF.dev[v], nf * 2, cudaMemcpyDeviceToDevice, s));
      CK(cudaMemcpyAsync(srcT, inT.dev[v], nt * 4, cudaMemcpyDeviceToDevice, s));
      CK(cudaGraphLaunch(ge, s));
      if (i % 10 == 3) {  // eager calls between replays share the epoch counters
        c->allReduce(inF.dev[(v + 1) % 4], eager, nf, DataType::bf16, RedOpKind::SUM, flat);
        c->allReduce(inF.dev[(v + 2) % 4], eager, nf, DataType::bf16, RedOpKind::SUM, lam);
      }
      if (i % 100 == 93 || i < 3 || i == 999) {
        CK(cudaStreamSynchronize(s));
        expectBits(dstF, inF.want[v], strFormat("graph flat replay %d", i).c_str());
        expectBits(dstT, inT.want[v], strFormat("graph tree replay %d", i).c_str());
        expectBits(dstL, inT.want[v], strFormat("graph lamport replay %d", i).c_str());
        if (i % 10 == 3) expectBits(eager, inF.want[(v + 2) % 4], "eager flat + lamport between replays");
      }
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    for (char* p : {srcF, srcT, dstF, dstT, dstL, eager}) CK(cudaFree(p));
    CK(cudaStreamDestroy(s));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuDdaStress, PeerBarrier) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CollOptions o;
    o.stream = s;
    for (int i = 0; i < 2000; ++i) c->barrier(o);
    CK(cudaStreamSynchronize(s));
    o.async = true;
    auto w = c->barrier(o);
    w->waitBlocking();
    MP_CHECK(w->isCompleted(), "barrier work not complete after waitBlocking");
    MP_CHECK(c->asyncError() == cclxSuccess, "asyncError after barriers");
    CK(cudaStreamDestroy(s));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuDdaStress, MissingRankTimesOut) {
  GPU_REQUIRE(2);
  for (const char* algo : {"flat", "lamport", "tree", "nccl", "fp8_oneshot"}) {
    auto res = test::runRanks(2, [algo](int rank, int size, std::shared_ptr<Store> store) {
      Options opts;
      opts.timeout = std::chrono::milliseconds(3000);
      auto c = makeGpuComm(rank, size, store, opts);
      char* buf;
      CK(cudaMalloc(&buf, 4096));
      CK(cudaMemset(buf, 0, 4096));
      // Both ranks complete one call first (NCCL connects lazily, on the host, at first use).
      auto hints = [algo](CollOptions& o) {
        if (std::string(algo) == "fp8_oneshot") {
          o.hints["low_precision"] = "fp8";
          o.hints["fp8_algo"] = "oneshot";
        } else {
          o.hints["algo"] = algo;
        }
      };
      CollOptions warm;
      hints(warm);
      c->allReduce(buf, buf, 1024, DataType::f32, RedOpKind::SUM, warm)->waitBlocking();
      if (rank == 1) {  // never arrives
        std::this_thread::sleep_for(std::chrono::seconds(8));
        _exit(0);
      }
      CollOptions o;
      hints(o);
      MP_CHECK(c->selectAllReduceAlgo(1024, DataType::f32, RedOpKind::SUM, o) == algo,
               "%s not selected", algo);
      auto w = c->allReduce(buf, buf, 1024, DataType::f32, RedOpKind::SUM, o);
      bool threw = false;
      std::string msg;
      try {
        // The host wait is longer than the comm timeout: the kernel's own deadline fires first.
        w->waitBlocking(std::chrono::milliseconds(std::string(algo) == "nccl" ? 3000 : 20000));
      } catch (const Error& e) {
        threw = e.code() == cclxTimeout;
        msg = e.what();
      }
      MP_CHECK(threw, "%s: expected cclxTimeout, got '%s'", algo, msg.c_str());
      if (std::string(algo) != "nccl")
        MP_CHECK(msg.find("rank(s) 1") != std::string::npos, "%s: message must name rank 1: %s", algo,
                 msg.c_str());
      MP_CHECK(c->asyncError() == cclxTimeout, "asyncError must report the timeout");
      bool refused = false;
      try {
        c->allReduce(buf, buf, 16, DataType::f32, RedOpKind::SUM, o);
      } catch (const Error& e) {
        refused = true;
      }
      MP_CHECK(refused, "a failed comm must refuse new work");
      _exit(0);  // skip teardown of the failed comm
    });
    ASSERT_TRUE(res.ok()) << algo << "\n" << res.log;
  }
}

#else
TEST(GpuDdaStress, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif
