// Setup and teardown of GPU comms under failure (docs/design/failure.md), with several
// ranks per GPU where there are fewer GPUs than ranks (rank r on GPU r % count):
//  * a setup failure injected on one rank (CCLX_TEST_SETUP_FAIL, every stage) gives every rank
//    the same verdict: creation fails everywhere (device, who) or peer memory is off everywhere
//    (alloc, open), and nothing hangs;
//  * ranks whose layout settings differ fail creation with a message naming the setting and ranks;
//  * two calls captured on forked streams of one CUDA-graph capture are ordered (never parallel
//    graph nodes sharing slots): replays give exact results;
//  * abort() with a dead peer returns at once and the spinning kernel stops with a NaN output;
//  * finalize() when a peer left without finalizing returns within the teardown bound.
// World size: CCLX_TEST_RANKS (default 3). The CPU twin of the setup sequence is
// tests/cpp/core/test_setup.cc.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/settings/config.h"
#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;
using Clock = std::chrono::steady_clock;

namespace {

bool sharesGpu(int size) { return size > deviceCount(); }

// The comms of this suite: 60 s unless the test says.
std::shared_ptr<Comm> gpuComm(int rank, int size, std::shared_ptr<Store> store, const char* name,
                              std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return sharedGpuComm(rank, size, std::move(store), name, timeout);
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Rank r's input: small integers as floats (sums are exact in any order).
std::vector<float> input(int rank, size_t n, int call) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = float(int((i * 7 + size_t(rank) * 13 + size_t(call) * 29) % 61) - 30);
  return v;
}
float expectedSum(int size, size_t i, int call) {
  float s = 0;
  for (int r = 0; r < size; ++r) s += input(r, i + 1, call)[i];
  return s;
}

// ---- setup ----

void injectedSetupFailure(const char* stage, bool creationFails) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    setenv("CCLX_TEST_SETUP_FAIL", (std::string("1:") + stage).c_str(), 1);
    reloadConfig();
    const auto t0 = Clock::now();
    std::shared_ptr<Comm> comm;
    try {
      comm = gpuComm(rank, size, store, "inject", std::chrono::seconds(20));
    } catch (const Error& e) {
      MP_CHECK(creationFails, "rank %d: creation failed: %s", rank, e.what());
      MP_CHECK(std::string(e.what()).find("rank 1:") != std::string::npos &&
                   std::string(e.what()).find("CCLX_TEST_SETUP_FAIL") != std::string::npos,
               "rank %d: the message does not name rank 1's injected failure: %s", rank, e.what());
      MP_CHECK(secondsSince(t0) < 15, "rank %d: failing took %.1f s", rank, secondsSince(t0));
      std::printf("[inject] %s rank %d: %s\n", stage, rank, e.what());
      return;
    }
    MP_CHECK(!creationFails, "rank %d: the comm was created although rank 1 failed", rank);
    // Peer memory off on every rank: the selection names NCCL (the same on every rank).
    const std::string algo = comm->selectAllReduceAlgo(1024, DataType::f32, RedOpKind::SUM);
    MP_CHECK(algo == "nccl", "rank %d selects '%s' with peer memory off", rank, algo.c_str());
    DevBuf buf(1024 * 4);
    const auto in = input(rank, 1024, 0);
    CK(cudaMemcpy(buf.base, in.data(), 4096, cudaMemcpyHostToDevice));
    CollOptions co;
    try {
      comm->allReduce(buf.base, buf.base, 1024, DataType::f32, RedOpKind::SUM, co)
          ->waitBlocking(std::chrono::seconds(30));
      MP_CHECK(!sharesGpu(size), "rank %d: an allreduce ran without peer memory or NCCL", rank);
      std::vector<float> out(1024);
      CK(cudaMemcpy(out.data(), buf.base, 4096, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < out.size(); ++i)
        MP_CHECK(out[i] == expectedSum(size, i, 0), "rank %d element %zu: %f", rank, i,
                 double(out[i]));
    } catch (const Error& e) {  // ranks sharing a GPU have no NCCL: a clear error, not a hang
      MP_CHECK(sharesGpu(size) && e.code() == cclxUnsupported, "rank %d: %s", rank, e.what());
    }
    comm->finalize();
  }, std::chrono::seconds(180));
  test::echoTagged(res.log, "[inject]");
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuFaults, SetupFailureAtDeviceFailsEveryRank) { injectedSetupFailure("device", true); }
TEST(GpuFaults, SetupFailureAtWhoFailsEveryRank) { injectedSetupFailure("who", true); }
TEST(GpuFaults, SetupFailureAtAllocTurnsPeerMemoryOffEverywhere) {
  injectedSetupFailure("alloc", false);
}
TEST(GpuFaults, SetupFailureAtOpenTurnsPeerMemoryOffEverywhere) {
  injectedSetupFailure("open", false);
}

TEST(GpuFaults, DifferentStagingBytesFailCreationOnEveryRank) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    if (rank == size - 1) setenv("CCLX_DDA_STAGING_BYTES", "8M", 1);
    reloadConfig();
    try {
      auto comm = gpuComm(rank, size, store, "settings", std::chrono::seconds(20));
      MP_CHECK(false, "rank %d: created a comm whose ranks disagree on the staging size", rank);
    } catch (const Error& e) {
      const std::string m = e.what();
      MP_CHECK(e.code() == cclxInvalidUsage || e.code() == cclxRemoteError, "code %d: %s",
               int(e.code()), m.c_str());
      MP_CHECK(m.find("CCLX_DDA_STAGING_BYTES differs") != std::string::npos &&
                   m.find(strFormat("8388608 on rank(s) %d", size - 1)) != std::string::npos,
               "rank %d: %s", rank, m.c_str());
    }
  }, std::chrono::seconds(120));
  ASSERT_TRUE(res.ok()) << res.log;
}

// ---- CUDA-graph capture on two streams ----

// Two allreduces of one comm captured on forked streams of one capture (no order between them in
// the application's graph): the backend orders them, so every replay is exact.
TEST(GpuFaults, CaptureOnForkedStreamsIsOrdered) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = gpuComm(rank, size, store, "fork");
    Stream a, b;
    cudaEvent_t fork, join;
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    const size_t count = 40000;
    const char* algos[] = {"flat", "lamport", "tree"};
    for (const char* algo : algos) {
      DevBuf x(count * 4), y(count * 4);
      CollOptions ca, cb;
      ca.stream = a.s;
      cb.stream = b.s;
      ca.hints = cb.hints = {{"algo", algo}};
      Graph graph(a.s, [&] {
        CK(cudaEventRecord(fork, a.s));
        CK(cudaStreamWaitEvent(b.s, fork, 0));
        comm->allReduce(x.base, x.base, count, DataType::f32, RedOpKind::SUM, ca);
        comm->allReduce(y.base, y.base, count, DataType::f32, RedOpKind::SUM, cb);
        CK(cudaEventRecord(join, b.s));
        CK(cudaStreamWaitEvent(a.s, join, 0));
      }, cudaStreamCaptureModeGlobal);
      std::vector<float> inX, inY;  // alive until the replay that reads them completed
      graph.replay(6, [&](int rep) {
        inX = input(rank, count, 2 * rep);
        inY = input(rank, count, 2 * rep + 1);
        CK(cudaMemcpyAsync(x.base, inX.data(), count * 4, cudaMemcpyHostToDevice, a.s));
        CK(cudaMemcpyAsync(y.base, inY.data(), count * 4, cudaMemcpyHostToDevice, a.s));
      }, [&](int rep) {
        std::vector<float> ox(count), oy(count);
        CK(cudaMemcpy(ox.data(), x.base, count * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(oy.data(), y.base, count * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < count; i += 97) {
          MP_CHECK(ox[i] == expectedSum(size, i, 2 * rep), "%s rep %d x[%zu] = %f", algo, rep, i,
                   double(ox[i]));
          MP_CHECK(oy[i] == expectedSum(size, i, 2 * rep + 1), "%s rep %d y[%zu] = %f", algo, rep,
                   i, double(oy[i]));
        }
      });
    }
    CK(cudaEventDestroy(fork));
    CK(cudaEventDestroy(join));
    comm->finalize();
  }, std::chrono::seconds(300));
  ASSERT_TRUE(res.ok()) << res.log;
}

// ---- abort and teardown ----

// The last rank dies after a warm-up call; the others enqueue an allreduce that waits for it
// (timeout 120 s) and abort: abort() returns at once, the kernel stops, its output is NaN.
TEST(GpuFaults, AbortWithDeadPeerReturnsAtOnce) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = gpuComm(rank, size, store, "abort", std::chrono::seconds(120));
    Stream st;
    const size_t count = 3000;
    DevBuf buf(count * 4);
    const auto in = input(rank, count, 0);
    CK(cudaMemcpy(buf.base, in.data(), count * 4, cudaMemcpyHostToDevice));
    CollOptions co;
    co.stream = st.s;
    co.hints = {{"algo", "flat"}};
    comm->allReduce(buf.base, buf.base, count, DataType::f32, RedOpKind::SUM, co);
    CK(cudaStreamSynchronize(st.s));
    store->set("warm/" + std::to_string(rank), "1");
    for (int r = 0; r < size; ++r)
      store->get("warm/" + std::to_string(r), std::chrono::seconds(60));
    if (rank == size - 1) _exit(0);  // dead: no finalize, no destructors
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm->allReduce(buf.base, buf.base, count, DataType::f32, RedOpKind::SUM, co);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the kernel spins
    const auto t0 = Clock::now();
    comm->abort();
    const double took = secondsSince(t0);
    MP_CHECK(took < 1.0, "rank %d: abort() took %.3f s", rank, took);
    const auto t1 = Clock::now();
    while (cudaStreamQuery(st.s) == cudaErrorNotReady) {
      MP_CHECK(secondsSince(t1) < 10, "rank %d: the kernel still runs 10 s after abort()", rank);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<float> out(count);
    CK(cudaMemcpy(out.data(), buf.base, count * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i)
      MP_CHECK(std::isnan(out[i]), "rank %d element %zu is %f after the abort", rank, i,
               double(out[i]));
    std::printf("[abort] rank %d: abort() %.3f s, kernel stopped after %.3f s\n", rank, took,
                secondsSince(t1));
    comm.reset();  // the destructor leaves what a kernel may use allocated, and does not wait
  }, std::chrono::seconds(120));
  test::echoTagged(res.log, "[abort]");
  for (int r = 0; r + 1 < n; ++r) EXPECT_EQ(res.exitCodes[size_t(r)], 0) << res.log;
}

// The last rank leaves without finalizing; the others' finalize gives up on the teardown barrier
// after the comm's timeout (5 s here, scaled by CCLX_TEST_TIME_SCALE) and returns, leaving the
// peer memory allocated.
TEST(GpuFaults, FinalizeWithoutPeerReturnsWithinTheBound) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    const auto timeout = test::expiring(std::chrono::seconds(5));
    const double T = std::chrono::duration<double>(timeout).count();
    auto comm = gpuComm(rank, size, store, "leave", timeout);
    const size_t count = 1000;
    DevBuf buf(count * 4);
    CK(cudaMemset(buf.base, 0, count * 4));
    CollOptions co;
    comm->allReduce(buf.base, buf.base, count, DataType::f32, RedOpKind::SUM, co)
        ->waitBlocking(std::chrono::seconds(30));
    store->set("done/" + std::to_string(rank), "1");
    for (int r = 0; r < size; ++r)
      store->get("done/" + std::to_string(r), std::chrono::seconds(60));
    if (rank == size - 1) _exit(0);
    const auto t0 = Clock::now();
    comm->finalize();
    MP_CHECK(secondsSince(t0) < T + test::guardSeconds(3), "rank %d: finalize took %.1f s", rank,
             secondsSince(t0));
    std::printf("[leave] rank %d: finalize %.1f s\n", rank, secondsSince(t0));
  }, std::chrono::seconds(120));
  test::echoTagged(res.log, "[leave]");
  for (int r = 0; r + 1 < n; ++r) EXPECT_EQ(res.exitCodes[size_t(r)], 0) << res.log;
}

// Every rank finalizes right after an async call it never waited for: finalize waits for that
// call (this comm's work only), then the teardown barrier, and the result is exact.
TEST(GpuFaults, FinalizeWaitsForTheCommsOwnWork) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = gpuComm(rank, size, store, "own");
    Stream st;
    const size_t count = 200000;
    DevBuf buf(count * 4);
    const auto in = input(rank, count, 3);
    CK(cudaMemcpy(buf.base, in.data(), count * 4, cudaMemcpyHostToDevice));
    CollOptions co;
    co.stream = st.s;
    co.async = true;
    co.hints = {{"algo", "tree"}};
    auto w = comm->allReduce(buf.base, buf.base, count, DataType::f32, RedOpKind::SUM, co);
    const auto t0 = Clock::now();
    comm->finalize();
    std::vector<float> out(count);
    CK(cudaMemcpy(out.data(), buf.base, count * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i += 101)
      MP_CHECK(out[i] == expectedSum(size, i, 3), "rank %d element %zu: %f", rank, i,
               double(out[i]));
    std::printf("[own] rank %d: finalize %.3f s\n", rank, secondsSince(t0));
  }, std::chrono::seconds(120));
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace

#else

TEST(GpuFaults, SetupFailureAtDeviceFailsEveryRank) { GTEST_SKIP() << "built without CUDA"; }

#endif
