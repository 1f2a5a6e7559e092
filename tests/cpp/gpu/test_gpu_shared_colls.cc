// Several ranks per GPU: the DDA exchange kernels (LL and pipelined all-gather, reduce-scatter,
// all-to-all; pipelined all-to-all-v) against the host twin, bit for bit: a CPU comm of the same
// ranks running the shm algorithm with the same element rules on the same inputs. Every dtype,
// every reduce-scatter op (bitwise ones on integers), odd counts, unaligned pointers, in place,
// list forms, overlapping buffers, zero and unequal all-to-all-v splits; a small staging that
// forces many pipelined chunks per block; back-to-back calls without a sync, CUDA-graph replay
// (a staging region first allocated inside a capture); staging allocated on first use; a missing
// rank named by the timeout (at the staging growth and at the device deadline); a late rank
// (exact or NaN, never another value); all-to-all-v counts that disagree.
//
// World size: CCLX_TEST_RANKS (default 4); scripts/gpu_shared.sh runs 2, 3, 4, 5 and 8.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "helpers/gpu_xchg.h"

using namespace cclx;
using namespace gputest;
using namespace xchgtest;


TEST(GpuSharedColls, LLExchangeEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(false, [](int, int) { return exchangeCases("flat", "ll"); }, 1000);
}

TEST(GpuSharedColls, PipelinedExchangeEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(false, [](int, int) { return exchangeCases("tree", "pipelined"); }, 2000);
}

// A 2 MiB staging and 4 blocks: pipelined calls take many chunks per block (inbox reuse by
// parity and acks); a forced LL that does not fit runs pipelined.
TEST(GpuSharedColls, SmallStagingManyChunksEqualsHostTwin) {
  GPU_REQUIRE(1);
  runSuite(true, [](int, int) {
    std::vector<XCase> v = exchangeCases("tree", "pipelined");
    for (XCase c : exchangeCases("flat", nullptr)) {
      if (c.count * dtypeSize(c.t) < 16384) continue;  // the small LL slots hold < 12 KiB
      c.expect = c.mode == kOverlap ? nullptr : "pipelined";  // too large for the small LL slots
      v.push_back(c);
    }
    return v;
  }, 3000);
}

TEST(GpuSharedColls, AllToAllVSplitsEqualHostTwin) {
  GPU_REQUIRE(1);
  runSuite(false, allToAllVCases, 4000);
  runSuite(true, allToAllVCases, 5000);
}

// Auto selection where ranks share a GPU: every size runs on DDA (no NCCL there), also sizes the
// tables send to NCCL on GPUs of their own.
TEST(GpuSharedColls, AutoSelectionUsesPeerAlgorithms) {
  GPU_REQUIRE(1);
  runSuite(false, [](int, int) {
    std::vector<XCase> v;
    for (CollType ty : {CollType::AllGather, CollType::ReduceScatter, CollType::AllToAll})
      for (size_t count : {size_t(5), size_t(600001)}) {
        XCase c;
        c.type = ty;
        c.t = DataType::bf16;
        c.count = count;
        v.push_back(c);
      }
    return v;
  }, 6000);
}

// Staging is allocated by the first call that needs it, region by region, on every rank; where
// ranks share a GPU the pipelined exchange's region exists from the start (point to point runs
// on it, and a batch cannot grow staging: growth is collective).
TEST(GpuSharedColls, StagingAllocatedOnFirstUse) {
  GPU_REQUIRE(1);
  runTwinRanksWith(sharedWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    return gpuComm(rank, size, std::move(store), "lazy");
  }, "lazy_twin", [&](TwinRank& r) {
    const int rank = r.rank, size = r.size;
    auto &gpu = r.gpu, &twin = r.twin;
    Stream& st = r.st;
    CudaBackend& b = backendOf(*gpu);
    const bool sharing = size > deviceCount();
    const size_t cap = size_t(176) << 20;
    const size_t atStart = b.stagingBytesHeld();
    MP_CHECK(sharing ? atStart > 0 && atStart <= 3 * (cap / 22) + 512 : atStart == 0,
             "a new comm holds %zu bytes of staging", atStart);
    XCase ll;
    ll.type = CollType::AllGather;
    ll.count = 100;
    ll.hints = {{"algo", "flat"}};
    ll.expect = "ll";
    runCase(*gpu, *twin, ll, rank, size, 7000, st.s);
    const size_t afterLL = b.stagingBytesHeld();
    MP_CHECK(afterLL > atStart && afterLL <= atStart + cap / 22 + 256, "after an LL call: %zu bytes",
             afterLL);
    XCase pipe = ll;
    pipe.hints = {{"algo", "tree"}};
    pipe.expect = "pipelined";
    runCase(*gpu, *twin, pipe, rank, size, 7001, st.s);
    const size_t afterPipe = b.stagingBytesHeld();
    MP_CHECK((sharing ? afterPipe == afterLL : afterPipe > afterLL) && afterPipe <= 4 * (cap / 22) + 512,
             "after a pipelined call: %zu bytes", afterPipe);
    runCase(*gpu, *twin, pipe, rank, size, 7002, st.s);
    MP_CHECK(b.stagingBytesHeld() == afterPipe, "a second call grew the staging");
    // Memory a dead rank leaves valid in its peers (core/sharing/peer_share.h): the default here.
    MP_CHECK(b.peerShare() == 'V', "peer memory shared by '%c', not by file descriptor",
             b.peerShare() ? b.peerShare() : '0');
  }, std::chrono::seconds(300));
}

// CCLX_PEER_MEM_SHARE=ipc: the signal areas and staging shared by legacy CUDA IPC instead, the
// same results (the LL and pipelined exchanges, each growing a region).
TEST(GpuSharedColls, LegacyIpcSharingEqualsHostTwin) {
  GPU_REQUIRE(1);
  setenv("CCLX_PEER_MEM_SHARE", "ipc", 1);  // the ranks' processes read it at comm creation
  runTwinRanksWith(sharedWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    return gpuComm(rank, size, std::move(store), "legacy_ipc");
  }, "legacy_ipc_twin", [&](TwinRank& r) {
    CudaBackend& b = backendOf(*r.gpu);
    MP_CHECK(b.peerShare() == 'H', "peer memory shared by '%c', not by CUDA IPC",
             b.peerShare() ? b.peerShare() : '0');
    uint64_t seed = 7100;
    for (CollType ty : {CollType::AllGather, CollType::ReduceScatter, CollType::AllToAll})
      for (const char* algo : {"flat", "tree"}) {
        XCase c;
        c.type = ty;
        c.count = 1001;
        c.hints = {{"algo", algo}};
        c.expect = std::string(algo) == "flat" ? "ll" : "pipelined";
        runCase(*r.gpu, *r.twin, c, r.rank, r.size, ++seed, r.st.s);
      }
    MP_CHECK(b.stagingBytesHeld() > 0, "no staging was allocated");
  }, std::chrono::seconds(300));
  unsetenv("CCLX_PEER_MEM_SHARE");
}

// 24 calls with fresh data and their own buffers back to back without a host sync (LL and
// pipelined, every collective), then a CUDA graph of five calls, the first pipelined call of a
// fresh comm among them (its staging grows inside the capture), replayed four times with new
// inputs before each replay.
TEST(GpuSharedColls, BackToBackAndGraphReplay) {
  GPU_REQUIRE(1);
  runTwinRanksWith(sharedWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    return gpuComm(rank, size, std::move(store), "b2b");
  }, "b2b_twin", [&](TwinRank& r) {
    const int rank = r.rank, size = r.size;
    auto &gpu = r.gpu, &twin = r.twin;
    Stream& st = r.st;
    const std::shared_ptr<Store>& store = r.store;
    const CollType types[] = {CollType::AllGather, CollType::ReduceScatter, CollType::AllToAll,
                              CollType::AllToAllV};
    std::vector<XCase> cases;
    for (int i = 0; i < 24; ++i) {
      XCase c;
      c.type = types[i % 4];
      c.t = i % 3 == 0 ? DataType::bf16 : DataType::f32;
      c.count = 777 + 131 * size_t(i);
      c.mode = i % 5 == 0 ? kInPlace : kOut;
      c.hints = {{"algo", i % 2 ? "flat" : "tree"}};
      if (c.type == CollType::AllToAllV)
        for (int p = 0; p < size; ++p) {
          c.sc.push_back(split(rank, p, 1 + i % 3));
          c.rc.push_back(split(p, rank, 1 + i % 3));
        }
      cases.push_back(c);
    }
    std::vector<std::vector<char>> ins;
    std::vector<std::unique_ptr<XBufs>> bufs;
    CollOptions co;
    co.stream = st.s;
    for (size_t i = 0; i < cases.size(); ++i) {
      ins.push_back(input(cases[i], rank, size, 8000 + i));
      bufs.push_back(std::make_unique<XBufs>(cases[i], rank, size, ins.back()));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      CollOptions ci = co;
      ci.hints = cases[i].hints;
      call(*gpu, cases[i], bufs[i]->send, bufs[i]->recv, bufs[i]->rl, bufs[i]->sl, ci);
    }
    CK(cudaStreamSynchronize(st.s));
    for (size_t i = 0; i < cases.size(); ++i) {
      bool guards = false;
      expectEqual(cases[i], bufs[i]->output(guards), twinResult(*twin, cases[i], size, ins[i]), rank,
                  "back to back");
      MP_CHECK(guards, "back to back: wrote past an output");
    }

    // The graph, on a fresh comm: its first LL call (staging growth) is captured, and its first
    // pipelined call too where ranks have GPUs of their own.
    auto fresh = gpuComm(rank, size, store, "graph");
    std::vector<XCase> g(5);
    g[0].type = CollType::AllGather;
    g[0].count = 40009;
    g[0].hints = {{"algo", "tree"}};
    g[1].type = CollType::ReduceScatter;
    g[1].t = DataType::bf16;
    g[1].count = 9001;
    g[1].mode = kInPlace;
    g[1].hints = {{"algo", "flat"}};
    g[2].type = CollType::AllToAll;
    g[2].count = 3001;
    g[2].hints = {{"algo", "tree"}};
    g[3].type = CollType::AllToAllV;
    for (int p = 0; p < size; ++p) {
      g[3].sc.push_back(split(rank, p, 2));
      g[3].rc.push_back(split(p, rank, 2));
    }
    g[4].type = CollType::ReduceScatter;
    g[4].op = RedOpKind::MAX;
    g[4].count = 12345;
    g[4].hints = {{"algo", "tree"}};
    std::vector<std::unique_ptr<XBufs>> gb;
    std::vector<std::vector<char>> gin(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      gin[i] = input(g[i], rank, size, 9000 + i);
      gb.push_back(std::make_unique<XBufs>(g[i], rank, size, gin[i]));
    }
    auto graph = std::make_unique<Graph>(st.s, [&] {
      for (size_t i = 0; i < g.size(); ++i) {
        CollOptions ci = co;
        ci.hints = g[i].hints;
        call(*fresh, g[i], gb[i]->send, gb[i]->recv, gb[i]->rl, gb[i]->sl, ci);
      }
    });
    MP_CHECK(backendOf(*fresh).stagingBytesHeld() > 0, "no staging after the capture");
    graph->replay(4, [&](int rep) {
      for (size_t i = 0; i < g.size(); ++i) {
        gin[i] = input(g[i], rank, size, 9100 + 10 * uint64_t(rep) + i);
        gb[i]->load(gin[i], st.s);
      }
    }, [&](int) {
      for (size_t i = 0; i < g.size(); ++i) {
        bool guards = false;
        expectEqual(g[i], gb[i]->output(guards), twinResult(*twin, g[i], size, gin[i]), rank,
                    "graph replay");
      }
    });
    graph.reset();  // before the fresh comm goes
    fresh->finalize();
  });
}

// The last rank never calls. First at the staging growth of a comm's first pipelined call (the
// host waits for the peers' growth records), then at the device deadline of a call whose staging
// exists: both name the missing rank. The timeout (4 s) follows CCLX_TEST_TIME_SCALE.
TEST(GpuSharedColls, MissingRankIsNamed) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  const auto timeout = test::expiring(std::chrono::seconds(4));
  for (bool warm : {false, true}) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      auto gpu = gpuComm(rank, size, store, warm ? "missing_dev" : "missing_grow", false, timeout);
      const size_t count = 1000, bytes = count * 4 * size_t(size);
      char* in = poisoned(bytes);
      char* out = poisoned(bytes);
      CollOptions co;
      co.hints = {{"algo", "tree"}};
      if (warm)  // the staging exists: the wait is the kernel's
        gpu->allGather(in, out, count, DataType::f32, co)->waitBlocking(std::chrono::seconds(60));
      if (rank == size - 1) {  // alive (never calling) until the others have their timeout
        test::waitForOthers(*store, "missing", rank, size,
                            timeout + test::guard(std::chrono::seconds(30)));
        return;  // never calls; leaves without finalize
      }
      try {
        auto w = gpu->reduceScatter(in, out, count, DataType::f32, RedOpKind::SUM, co);
        w->waitBlocking(std::chrono::seconds(60));
        MP_CHECK(false, "reduce-scatter without rank %d completed", size - 1);
      } catch (const Error& e) {
        const std::string want = "rank(s) " + std::to_string(size - 1);
        MP_CHECK(e.code() == cclxTimeout, "code %d: %s", int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find(want) != std::string::npos,
                 "the message does not name rank %d: %s", size - 1, e.what());
      }
      gpu->finalize();
      test::othersDone(*store, "missing", rank);
    }, std::chrono::seconds(300));
    ASSERT_TRUE(res.ok()) << (warm ? "device deadline\n" : "staging growth\n") << res.log;
  }
}

// A late rank: within the timeout every rank's result is exact; past it, every output is either
// exact or NaN (all-ones bytes), never another value, and the late rank's call fails or is NaN.
// The timeout is 5 s (CCLX_TEST_TIME_SCALE scales it); the rank is 0.4 and 1.6 timeouts late.
TEST(GpuSharedColls, LateRankGivesExactOrNaN) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  const auto timeout = test::expiring(std::chrono::seconds(5));
  for (double share : {0.4, 1.6}) {
    const auto late = std::chrono::milliseconds(int64_t(double(timeout.count()) * share));
    const bool within = share < 1;
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      auto gpu = gpuComm(rank, size, store, "late", false, timeout);
      auto twin = hostTwin(rank, size, store, "late_twin");
      Stream st;
      XCase c;
      c.type = CollType::AllToAll;
      c.count = 4099;
      c.hints = {{"algo", "tree"}};
      runCase(*gpu, *twin, c, rank, size, 9500, st.s);  // staging exists before the late call
      const std::vector<char> in = input(c, rank, size, 9501);
      const std::vector<char> want = twinResult(*twin, c, size, in);
      XBufs b(c, rank, size, in);
      if (rank == size - 1) std::this_thread::sleep_for(late);
      CollOptions co;
      co.stream = st.s;
      co.hints = c.hints;
      bool failed = false;
      try {
        call(*gpu, c, b.send, b.recv, b.rl, b.sl, co);
      } catch (const Error&) {
        failed = true;
      }
      CK(cudaStreamSynchronize(st.s));
      bool guards = false;
      const std::vector<char> got = b.output(guards);
      bool exact = got == want, nan = true;
      for (char x : got) nan = nan && uint8_t(x) == 0xff;
      MP_CHECK(failed || exact || nan, "rank %d: output neither exact nor NaN (late %lld ms)", rank,
               (long long)late.count());
      if (within)
        MP_CHECK(exact, "rank %d: a rank %lld ms late (within the timeout) changed the result",
                 rank, (long long)late.count());
      twin->finalize();
      if (within) gpu->finalize();
    }, std::chrono::seconds(300));
    ASSERT_TRUE(res.ok()) << "late " << late.count() << " ms\n" << res.log;
  }
}

// All-to-all-v whose counts disagree (rank 1 sends rank 0 one element more than rank 0 expects):
// the call fails on every rank (rank 0 naming rank 1), the outputs are NaN, nothing hangs.
TEST(GpuSharedColls, AllToAllVCountMismatchFailsClearly) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = gpuComm(rank, size, store, "mismatch", false, std::chrono::seconds(10));
    Stream st;
    XCase c;
    c.type = CollType::AllToAllV;
    for (int p = 0; p < size; ++p) {
      c.sc.push_back(100 + size_t(p));
      c.rc.push_back(100 + size_t(rank));
    }
    if (rank == 1) c.sc[0] += 1;
    const std::vector<char> in = input(c, rank, size, 9600);
    XBufs b(c, rank, size, in);
    CollOptions co;
    co.stream = st.s;
    bool failed = false;
    try {
      call(*gpu, c, b.send, b.recv, b.rl, b.sl, co);
      CK(cudaStreamSynchronize(st.s));
      gpu->barrier()->waitBlocking(std::chrono::seconds(60));
    } catch (const Error& e) {
      // Rank 0 (the receiver that saw the wrong length) names the mismatch; every other rank
      // names it too or learns it from the abort word (the comm "was aborted by rank k"),
      // whichever reaches it first.
      failed = true;
      const std::string m = e.what();
      const bool named = m.find("all-to-all-v counts disagree") != std::string::npos;
      MP_CHECK(named || (rank != 0 && m.find("was aborted by rank") != std::string::npos),
               "rank %d: unclear message: %s", rank, e.what());
    }
    MP_CHECK(failed, "rank %d: mismatched all-to-all-v counts were not reported", rank);
    if (rank == 0) {
      bool guards = false;
      const std::vector<char> got = b.output(guards);
      for (size_t i = 0; i < got.size(); ++i)
        MP_CHECK(uint8_t(got[i]) == 0xff, "rank 0 byte %zu is not NaN after the mismatch", i);
    }
  }, std::chrono::seconds(300));
  ASSERT_TRUE(res.ok()) << res.log;
}

#else

TEST(GpuSharedColls, LLExchangeEqualsHostTwin) { GTEST_SKIP() << "built without CUDA"; }
TEST(GpuSharedColls, LegacyIpcSharingEqualsHostTwin) { GTEST_SKIP() << "built without CUDA"; }

#endif
