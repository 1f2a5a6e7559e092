// Several ranks per GPU: the DDA allreduce (flat, Lamport, tree, each forced) and the FP8
// collectives (allreduce one-shot and two-shot, all-gather, reduce-scatter, all-to-all) at any
// world size on however many GPUs there are (rank r uses GPU r % count; processes on one GPU
// time-slice, so this checks correctness, never speed). Every result is compared bit for bit with
// the host twin: a CPU comm of the same ranks running the same algorithm on the same inputs.
// Also: back-to-back calls with fresh data, CUDA-graph replay, a missing rank named in the
// timeout, a rank killed in the middle of a loop, and the clear error for a call forced onto NCCL.
//
// World size: CCLX_TEST_RANKS (default 4); scripts/gpu_shared.sh runs 2, 3, 4, 5 and 8.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/backend.h"
#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

using Hints = std::map<std::string, std::string>;

// One collective: GPU and host twin on the same inputs.
struct Case {
  CollType type = CollType::AllReduce;
  DataType t = DataType::f32;
  ReduceOp op = RedOpKind::SUM;
  size_t count = 1031;    // elements per rank (AllGather/ReduceScatter/AllToAll: per segment)
  bool inPlace = false;
  size_t offset = 0;      // bytes added to both device pointers (unaligned when not 16)
  Hints hints;
  const char* expectAlgo = nullptr;  // allreduce: the algorithm the selection must name
};

size_t inElems(const Case& c, int n) {
  return c.type == CollType::AllReduce || c.type == CollType::AllGather ? c.count : c.count * size_t(n);
}
size_t outElems(const Case& c, int n) {
  return c.type == CollType::AllReduce || c.type == CollType::ReduceScatter ? c.count : c.count * size_t(n);
}

std::string describe(const Case& c) {
  std::string s = strFormat("%s %s %s count=%zu%s%s", collName(c.type), dtypeName(c.t),
                            opName(c.op.kind), c.count, c.inPlace ? " in-place" : "",
                            c.offset ? " unaligned" : "");
  for (const auto& [k, v] : c.hints) s += " " + k + "=" + v;
  return s;
}

void enqueue(Comm& comm, const Case& c, const void* send, void* recv, const CollOptions& co) {
  switch (c.type) {
    case CollType::AllReduce: comm.allReduce(send, recv, c.count, c.t, c.op, co); break;
    case CollType::AllGather: comm.allGather(send, recv, c.count, c.t, co); break;
    case CollType::ReduceScatter: comm.reduceScatter(send, recv, c.count, c.t, c.op, co); break;
    case CollType::AllToAll: comm.allToAll(send, recv, c.count, c.t, co); break;
    default: MP_CHECK(false, "unexpected collective");
  }
}

// Device side of a case: poisoned buffers (a guard byte past each), the input copied in.
struct Bufs {
  char *sbase = nullptr, *rbase = nullptr, *send = nullptr, *recv = nullptr;
  size_t inBytes = 0, outBytes = 0;
  Bufs(const Case& c, int n, const std::vector<char>& in) {
    const size_t es = dtypeSize(c.t);
    inBytes = inElems(c, n) * es;
    outBytes = outElems(c, n) * es;
    const size_t span = std::max(inBytes, outBytes);
    sbase = poisoned(span + c.offset);
    send = sbase + c.offset;
    CK(cudaMemcpy(send, in.data(), inBytes, cudaMemcpyHostToDevice));
    rbase = c.inPlace ? sbase : poisoned(outBytes + c.offset);
    recv = c.inPlace ? send : rbase + c.offset;
    // A copy from pageable memory may return before its DMA is done, and the collectives run on
    // a non-blocking stream: wait for the device before any of them reads the input.
    CK(cudaDeviceSynchronize());
  }
  ~Bufs() {
    (void)cudaFree(sbase);
    if (rbase != sbase) (void)cudaFree(rbase);
  }
  Bufs(const Bufs&) = delete;
  void refill(const Case& c, const std::vector<char>& in, cudaStream_t s) {
    CK(cudaMemcpyAsync(send, in.data(), inBytes, cudaMemcpyHostToDevice, s));
    if (!c.inPlace) CK(cudaMemsetAsync(recv, 0xff, outBytes, s));
  }
};

std::vector<char> input(const Case& c, int rank, int n, uint64_t seed) {
  return genBuf(c.t, c.op.kind, seed, rank, inElems(c, n));
}

std::vector<char> twinResult(Comm& twin, const Case& c, int n, const std::vector<char>& in) {
  std::vector<char> out(outElems(c, n) * dtypeSize(c.t));
  std::vector<char> buf = in;
  CollOptions co;
  co.hints = c.hints;
  if (c.inPlace && c.type == CollType::AllReduce) {
    twin.allReduce(buf.data(), buf.data(), c.count, c.t, c.op, co);
    return buf;
  }
  enqueue(twin, c, in.data(), out.data(), co);
  return out;
}

void expectEqual(const Case& c, const std::vector<char>& got, const std::vector<char>& want,
                 int rank, const char* what) {
  MP_CHECK(got.size() == want.size(), "%s: size", describe(c).c_str());
  for (size_t i = 0; i < got.size(); ++i)
    MP_CHECK(got[i] == want[i], "%s (%s): rank %d byte %zu differs from the host twin (0x%02x vs 0x%02x)",
             describe(c).c_str(), what, rank, i, unsigned(uint8_t(got[i])), unsigned(uint8_t(want[i])));
}

// Runs one case on the GPU (synchronously on `s`) and checks it against the twin.
void runCase(Comm& gpu, Comm& twin, const Case& c, int rank, int n, uint64_t seed, cudaStream_t s) {
  const std::vector<char> in = input(c, rank, n, seed);
  Bufs b(c, n, in);
  CollOptions co;
  co.stream = s;
  co.hints = c.hints;
  if (c.expectAlgo) {
    const std::string algo = gpu.selectAllReduceAlgo(c.count, c.t, c.op, co);
    MP_CHECK(algo == c.expectAlgo, "%s: selection picked %s", describe(c).c_str(), algo.c_str());
  }
  enqueue(gpu, c, b.send, b.recv, co);
  CK(cudaStreamSynchronize(s));
  std::vector<char> got = d2h(b.recv, b.outBytes + 1);
  MP_CHECK(uint8_t(got.back()) == 0xff, "%s: wrote past the end of the output", describe(c).c_str());
  got.pop_back();
  expectEqual(c, got, twinResult(twin, c, n, in), rank, "single call");
}

const DataType kAllTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                              DataType::i32, DataType::i64, DataType::u32, DataType::u64,
                              DataType::i8,  DataType::u8};

// The allreduce cases of one forced DDA algorithm: every dtype with SUM, every op on f32, bf16
// and i32, the signed types' ops that run on another instance, unaligned pointers and in-place
// calls.
std::vector<Case> ddaCases(const char* algo) {
  const bool lamport = std::string(algo) == "lamport";
  std::vector<Case> v;
  auto add = [&](DataType t, ReduceOp op, size_t count, bool inPlace, size_t off) {
    if (lamport && !isFloat(t)) return;  // the protocol carries float types only
    Case c;
    c.t = t;
    c.op = op;
    c.count = count;
    c.inPlace = inPlace;
    c.offset = off;
    c.hints = {{"algo", algo}};
    c.expectAlgo = algo;
    v.push_back(c);
  };
  for (size_t i = 0; i < std::size(kAllTypes); ++i)
    add(kAllTypes[i], RedOpKind::SUM, 1031 + 7 * i, (i & 1) != 0, 0);
  for (DataType t : {DataType::f32, DataType::bf16, DataType::i32}) {
    for (RedOpKind k : {RedOpKind::AVG, RedOpKind::PRODUCT, RedOpKind::MIN, RedOpKind::MAX})
      add(t, k, 517, k == RedOpKind::MIN, 0);
    if (isFloat(t)) add(t, ReduceOp::premulSum(0.375), 517, false, 0);
    else
      for (RedOpKind k : {RedOpKind::BAND, RedOpKind::BOR, RedOpKind::BXOR}) add(t, k, 333, false, 0);
  }
  // A signed type's PRODUCT and bitwise ops run on its unsigned twin's kernel; its PREMUL_SUM (a
  // negative factor) and AVG (signed division) on its own.
  for (DataType t : {DataType::i8, DataType::i64}) {
    add(t, RedOpKind::PRODUCT, 259, false, 0);
    add(t, RedOpKind::BXOR, 259, true, 0);
  }
  add(DataType::i32, ReduceOp::premulSum(-3.0), 259, false, 0);
  add(DataType::i64, RedOpKind::AVG, 259, false, 0);
  add(DataType::f16, RedOpKind::SUM, 4099, false, 2);   // 2-byte aligned only
  add(DataType::f32, RedOpKind::MAX, 8193, true, 4);    // 4-byte aligned, in place
  add(DataType::bf16, RedOpKind::SUM, 65537, false, 6);  // several rounds per block
  add(DataType::f32, RedOpKind::SUM, 1, false, 0);       // one element
  return v;
}

std::vector<Case> fp8Cases() {
  std::vector<Case> v;
  for (DataType t : {DataType::f32, DataType::bf16, DataType::f16}) {
    for (const char* algo : {"oneshot", "twoshot"})
      for (RedOpKind k : {RedOpKind::SUM, RedOpKind::AVG}) {
        Case c;
        c.t = t;
        c.op = k;
        c.count = 20011;
        c.inPlace = k == RedOpKind::AVG;
        c.hints = {{"low_precision", "fp8"}, {"fp8_algo", algo}};
        c.expectAlgo = std::string(algo) == "oneshot" ? "fp8_oneshot" : "fp8";
        v.push_back(c);
      }
    for (CollType ty : {CollType::AllGather, CollType::ReduceScatter, CollType::AllToAll}) {
      Case c;
      c.type = ty;
      c.t = t;
      c.count = ty == CollType::AllToAll ? 3001 : 5003;
      c.hints = {{"low_precision", "fp8"}};
      v.push_back(c);
      if (ty == CollType::ReduceScatter) {
        c.op = RedOpKind::AVG;
        v.push_back(c);
      }
    }
  }
  return v;
}

void runSuite(const std::vector<Case>& cases, uint64_t seed0) {
  runTwinRanks(sharedWorldSize(), "shared", "twin", [&](TwinRank& r) {
    uint64_t seed = seed0;
    for (const Case& c : cases) runCase(*r.gpu, *r.twin, c, r.rank, r.size, ++seed, r.st.s);
  });
}

}  // namespace

TEST(GpuShared, DdaFlatEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(ddaCases("flat"), 100);
}

TEST(GpuShared, DdaLamportEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(ddaCases("lamport"), 200);
}

TEST(GpuShared, DdaTreeEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(ddaCases("tree"), 300);
}

TEST(GpuShared, Fp8EqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(fp8Cases(), 400);
}

// Auto selection where ranks share a GPU: every size runs on the peer algorithms (NCCL does not
// exist there), including sizes the tables send to NCCL when ranks have GPUs of their own.
TEST(GpuShared, AutoSelectionUsesPeerAlgorithms) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "auto", "twin", [&](TwinRank& r) {
    const int devices = deviceCount();
    for (size_t count : {size_t(3), size_t(300001), size_t(5) << 20}) {
      Case c;
      c.count = count;
      const std::string algo = r.gpu->selectAllReduceAlgo(count, c.t, c.op);
      if (r.size > devices) MP_CHECK(algo != "nccl", "%zu floats: auto picked nccl on a shared GPU", count);
      runCase(*r.gpu, *r.twin, c, r.rank, r.size, 500 + count, r.st.s);
    }
  });
}

// 24 calls with fresh data and their own buffers, enqueued back to back without a host sync, then
// one CUDA graph of four calls replayed four times with new inputs before each replay.
TEST(GpuShared, BackToBackAndGraphReplay) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "b2b", "twin", [&](TwinRank& r) {
    const int rank = r.rank, size = r.size;
    Comm &gpu = *r.gpu, &twin = *r.twin;
    Stream& st = r.st;
    const char* algos[] = {"flat", "lamport", "tree"};
    const DataType types[] = {DataType::f32, DataType::bf16, DataType::f16, DataType::f64};
    std::vector<Case> cases;
    for (int i = 0; i < 24; ++i) {
      Case c;
      c.t = types[i % 4];
      c.count = 777 + 131 * size_t(i);
      c.inPlace = i % 5 == 0;
      c.hints = {{"algo", algos[i % 3]}};
      cases.push_back(c);
    }
    std::vector<std::vector<char>> ins;
    std::vector<std::unique_ptr<Bufs>> bufs;
    CollOptions co;
    co.stream = st.s;
    for (size_t i = 0; i < cases.size(); ++i) {
      ins.push_back(input(cases[i], rank, size, 600 + i));
      bufs.push_back(std::make_unique<Bufs>(cases[i], size, ins.back()));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      CollOptions ci = co;
      ci.hints = cases[i].hints;
      enqueue(gpu, cases[i], bufs[i]->send, bufs[i]->recv, ci);
    }
    CK(cudaStreamSynchronize(st.s));
    for (size_t i = 0; i < cases.size(); ++i)
      expectEqual(cases[i], d2h(bufs[i]->recv, bufs[i]->outBytes),
                  twinResult(twin, cases[i], size, ins[i]), rank, "back to back");

    // The graph: flat, Lamport, tree and an FP8 one-shot allreduce.
    std::vector<Case> g(4);
    g[0].hints = {{"algo", "flat"}};
    g[1].t = DataType::bf16;
    g[1].count = 9001;
    g[1].hints = {{"algo", "lamport"}};
    g[2].count = 40009;
    g[2].inPlace = true;
    g[2].hints = {{"algo", "tree"}};
    g[3].t = DataType::bf16;
    g[3].count = 12345;
    g[3].hints = {{"low_precision", "fp8"}, {"fp8_algo", "oneshot"}};
    std::vector<std::unique_ptr<Bufs>> gb;
    std::vector<std::vector<char>> gin(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      gin[i] = input(g[i], rank, size, 700 + i);
      gb.push_back(std::make_unique<Bufs>(g[i], size, gin[i]));
    }
    Graph graph(st.s, [&] {
      for (size_t i = 0; i < g.size(); ++i) {
        CollOptions ci = co;
        ci.hints = g[i].hints;
        enqueue(gpu, g[i], gb[i]->send, gb[i]->recv, ci);
      }
    });
    graph.replay(4, [&](int rep) {
      for (size_t i = 0; i < g.size(); ++i) {
        gin[i] = input(g[i], rank, size, 800 + 10 * uint64_t(rep) + i);
        gb[i]->refill(g[i], gin[i], st.s);
      }
    }, [&](int) {
      for (size_t i = 0; i < g.size(); ++i)
        expectEqual(g[i], d2h(gb[i]->recv, gb[i]->outBytes), twinResult(twin, g[i], size, gin[i]),
                    rank, "graph replay");
    });
  });
}

// Ranks that share a GPU have no NCCL comm: a call that asks for NCCL (hint algo=nccl) fails,
// before anything runs, with a message that says why. (Point to point runs there on the pipelined
// exchange: test_gpu_shared_p2p.)
TEST(GpuShared, NcclCollectivesFailClearly) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    const int devices = deviceCount();
    auto gpu = sharedGpuComm(rank, size, store, "nonccl");
    if (size <= devices) {  // one GPU per rank here: NCCL exists, nothing to check
      gpu->finalize();
      return;
    }
    char* p = poisoned(64);
    CollOptions co;
    co.hints = {{"algo", "nccl"}};
    try {
      gpu->allReduce(p, p, 16, DataType::f32, RedOpKind::SUM, co);
      MP_CHECK(false, "an allreduce forced onto NCCL on a shared GPU did not fail");
    } catch (const Error& e) {
      MP_CHECK(e.code() == cclxUnsupported, "code %d: %s", int(e.code()), e.what());
      MP_CHECK(std::string(e.what()).find("share GPU") != std::string::npos &&
                   std::string(e.what()).find("NCCL needs one GPU per rank") != std::string::npos,
               "unclear message: %s", e.what());
    }
    for (char ch : d2h(p, 64)) MP_CHECK(uint8_t(ch) == 0xff, "a refused call wrote to its buffer");
    (void)cudaFree(p);
    gpu->finalize();
  }, std::chrono::seconds(300));
  ASSERT_TRUE(res.ok()) << res.log;
}

// The last rank never calls: every other rank's call times out naming it (device-side deadline).
// The timeout (5 s) follows CCLX_TEST_TIME_SCALE (helpers/scale.h).
TEST(GpuShared, MissingRankIsNamed) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  const auto timeout = test::expiring(std::chrono::seconds(5));
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = sharedGpuComm(rank, size, store, "missing", timeout);
    if (rank == size - 1) {  // alive (never calling) until the others have their timeout
      test::waitForOthers(*store, "missing", rank, size,
                          timeout + test::guard(std::chrono::seconds(30)));
      return;  // never calls; leaves without finalize
    }
    char* p = poisoned(4096);
    CollOptions co;
    co.hints = {{"algo", "flat"}};
    try {
      auto w = gpu->allReduce(p, p, 1000, DataType::f32, RedOpKind::SUM, co);
      w->waitBlocking(std::chrono::seconds(60));
      MP_CHECK(false, "allreduce without rank %d completed", size - 1);
    } catch (const Error& e) {
      const std::string want = std::to_string(size - 1);
      MP_CHECK(e.code() == cclxTimeout, "code %d: %s", int(e.code()), e.what());
      MP_CHECK(std::string(e.what()).find("rank(s) " + want) != std::string::npos,
               "the message does not name rank %d: %s", size - 1, e.what());
    }
    gpu->finalize();
    test::othersDone(*store, "missing", rank);
  }, std::chrono::seconds(300));
  ASSERT_TRUE(res.ok()) << res.log;
}

// A rank killed (SIGKILL) in the middle of a loop of DDA allreduces: the others fail with an error
// naming it, within the comm's timeout, without hanging or crashing; then the survivors make a
// new, smaller comm and it works.
TEST(GpuShared, KilledRankIsNamedAndSurvivorsGoOn) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  const int victim = n - 1;
  const auto timeout = test::expiring(std::chrono::seconds(8));  // CCLX_TEST_TIME_SCALE
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = sharedGpuComm(rank, size, store, "kill", timeout);
    Stream st;
    const size_t count = 4099;
    char* p = poisoned(count * 4);
    CollOptions co;
    co.stream = st.s;
    bool failed = false;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 400 && !failed; ++i) {
      if (rank == victim && i == 25) raise(SIGKILL);
      co.hints = {{"algo", i % 3 == 0 ? "lamport" : i % 3 == 1 ? "flat" : "tree"}};
      try {
        auto w = gpu->allReduce(p, p, count, DataType::f32, RedOpKind::MAX, co);
        if (i % 4 == 3) w->waitBlocking(std::chrono::seconds(60));
      } catch (const Error& e) {
        failed = true;
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MP_CHECK(e.code() == cclxTimeout || e.code() == cclxRemoteError, "code %d: %s",
                 int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find(std::to_string(victim)) != std::string::npos,
                 "the error does not name rank %d: %s", victim, e.what());
        std::printf("[kill] rank %d: error after %.1f s: %s\n", rank, s, e.what());
      }
    }
    MP_CHECK(failed, "rank %d never noticed that rank %d died", rank, victim);
    gpu->finalize();
    (void)cudaFree(p);
    // The survivors go on with a comm of their own.
    const int m = size - 1;
    auto after = sharedGpuComm(rank, m, store, "after_kill", std::chrono::seconds(60));
    auto twin = test::makeCpuComm(rank, m, store, [] { Options o; o.name = "after_twin"; return o; }());
    Case c;
    c.count = 2053;
    runCase(*after, *twin, c, rank, m, 900, st.s);
    after->finalize();
    twin->finalize();
  }, std::chrono::seconds(300));
  test::echoTagged(res.log, "[kill]");
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    EXPECT_EQ(res.exitCodes[size_t(r)], 0) << "rank " << r << "\n" << res.log;
  }
}

#else

TEST(GpuShared, DdaFlatEqualsHostTwin) { GTEST_SKIP() << "built without CUDA"; }

#endif
