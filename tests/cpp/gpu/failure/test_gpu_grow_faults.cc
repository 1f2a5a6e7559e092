// Failed staging growth on real GPUs (CCLX_TEST_GROW_FAIL, core/failure/grow_fault.h): the first
// growth after a comm's creation fails on one rank (rank 1) or on every rank, at an allreduce
// large enough to want the tree, an all-gather and a reduce-scatter. Expected on every rank: the
// call chooses again and gives exact results, or (ranks sharing a GPU: no NCCL to fall back on)
// fails with a clear cclx error that is not an internal one; the outcome is the same on every
// rank; the failed region is never chosen again; the comm stays usable (a later call succeeds).
// World size: CCLX_TEST_RANKS (default 3), rank r on GPU r % count. The parsing is tested on the
// CPU in tests/cpp/core/test_grow_fault.cc.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <cstdlib>
#include <string>
#include <vector>

#include "core/settings/config.h"
#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

enum class Coll { kAllReduce, kAllGather, kReduceScatter };

// Rank r's input: small integers as floats (sums are exact in any order).
float inputAt(int rank, size_t i) { return float(int((i * 7 + size_t(rank) * 13) % 61) - 30); }

std::vector<float> input(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = inputAt(rank, i);
  return v;
}

// Runs `coll` on `comm` with `count` elements per rank and checks the result. Returns "ok", or
// "error <code>" when the call failed cleanly (checked here to be no internal error).
std::string runAndCheck(Comm& comm, Coll coll, int rank, int size, size_t count,
                        const CollOptions& o = {}) {
  const size_t in = coll == Coll::kReduceScatter ? count * size_t(size) : count;
  const size_t out = coll == Coll::kAllGather ? count * size_t(size) : count;
  DevBuf send(in * 4), recv(out * 4);
  const auto host = input(rank, in);
  CK(cudaMemcpy(send.base, host.data(), in * 4, cudaMemcpyHostToDevice));
  recv.poison(0);
  try {
    std::shared_ptr<Work> w;
    if (coll == Coll::kAllReduce)
      w = comm.allReduce(send.base, recv.base, count, DataType::f32, RedOpKind::SUM, o);
    else if (coll == Coll::kAllGather)
      w = comm.allGather(send.base, recv.base, count, DataType::f32, o);
    else
      w = comm.reduceScatter(send.base, recv.base, count, DataType::f32, RedOpKind::SUM, o);
    w->waitBlocking(std::chrono::seconds(60));
  } catch (const Error& e) {
    MP_CHECK(e.code() != cclxInternalError, "rank %d: internal error: %s", rank, e.what());
    std::printf("[grow] rank %d: the call failed cleanly: %s\n", rank, e.what());
    return "error " + std::to_string(int(e.code()));
  }
  std::vector<float> got(out);
  CK(cudaMemcpy(got.data(), recv.base, out * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < out; ++i) {
    float want = 0;
    if (coll == Coll::kAllGather) {
      want = inputAt(int(i / count), i % count);
    } else {
      const size_t at = coll == Coll::kReduceScatter ? size_t(rank) * count + i : i;
      for (int r = 0; r < size; ++r) want += inputAt(r, at);
    }
    if (got[i] != want) {
      MP_CHECK(false, "rank %d element %zu: %f, want %f", rank, i, double(got[i]), double(want));
      break;
    }
  }
  return "ok";
}

void growFailure(Coll coll, bool allRanks) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    unsetenv("CCLX_TEST_GROW_FAIL");
    reloadConfig();
    auto comm = sharedGpuComm(rank, size, store, "grow", std::chrono::seconds(60));
    const bool shares = size > deviceCount();
    const size_t big = size_t(32) << 20 >> 2;  // 32 MiB of f32: the tree's range
    if (comm->selectAllReduceAlgo(1024, DataType::f32, RedOpKind::SUM) == "nccl") {
      std::printf("[grow] rank %d: peer memory is off on this machine: nothing grows\n", rank);
      comm->finalize();
      return;
    }
    if (coll == Coll::kAllReduce)
      MP_CHECK(comm->selectAllReduceAlgo(big, DataType::f32, RedOpKind::SUM) == "tree",
               "rank %d: 32 MiB selects '%s', not the tree", rank,
               comm->selectAllReduceAlgo(big, DataType::f32, RedOpKind::SUM).c_str());
    // Ranks sharing a GPU allocate the exchange's staging at creation: that was growth 1.
    const int next = shares ? 2 : 1;
    const std::string v = (allRanks ? std::string("all") : std::string("1")) + ":" +
                          std::to_string(next);
    setenv("CCLX_TEST_GROW_FAIL", v.c_str(), 1);
    // The exchange collectives ask for LL, whose staging (flat/LL) no call has grown yet; the
    // allreduce wants the tree by its size.
    CollOptions o;
    if (coll != Coll::kAllReduce) o.hints["algo"] = "flat";
    const size_t count = coll == Coll::kAllReduce ? big : 4096;
    const std::string outcome = runAndCheck(*comm, coll, rank, size, count, o);
    unsetenv("CCLX_TEST_GROW_FAIL");
    // Without NCCL a failed growth may leave nothing to run the call; with NCCL it never fails.
    MP_CHECK(outcome == "ok" || shares, "rank %d: failed although NCCL could run it: %s", rank,
             outcome.c_str());
    store->set("grow/outcome/" + std::to_string(rank), outcome);
    for (int r = 0; r < size; ++r) {
      const std::string o =
          store->get("grow/outcome/" + std::to_string(r), std::chrono::seconds(60));
      MP_CHECK(o == outcome, "rank %d: '%s' but rank %d: '%s'", rank, outcome.c_str(), r,
               o.c_str());
    }
    if (coll == Coll::kAllReduce)
      MP_CHECK(comm->selectAllReduceAlgo(big, DataType::f32, RedOpKind::SUM) != "tree",
               "rank %d: the tree is still selected after its staging failed", rank);
    // The comm is not failed: a small allreduce (another region, grown now) is exact.
    MP_CHECK(runAndCheck(*comm, Coll::kAllReduce, rank, size, 1024) == "ok",
             "rank %d: the comm is unusable after a failed growth", rank);
    comm->finalize();
  }, std::chrono::seconds(300));
  test::echoTagged(res.log, "[grow]");
  ASSERT_TRUE(res.ok()) << res.log;
  if (res.log.find("peer memory is off on this machine") != std::string::npos)
    GTEST_SKIP() << "peer memory is off: no staging to grow";
  // The failure was the injected one, on the rank(s) asked for.
  EXPECT_NE(res.log.find("failure injected on rank 1"), std::string::npos) << res.log;
  if (allRanks)
    EXPECT_NE(res.log.find("failure injected on rank 0"), std::string::npos) << res.log;
  else
    EXPECT_EQ(res.log.find("failure injected on rank 0"), std::string::npos) << res.log;
}

}  // namespace

TEST(GpuGrowFaults, AllReduceOneRank) { growFailure(Coll::kAllReduce, false); }
TEST(GpuGrowFaults, AllReduceAllRanks) { growFailure(Coll::kAllReduce, true); }
TEST(GpuGrowFaults, AllGatherOneRank) { growFailure(Coll::kAllGather, false); }
TEST(GpuGrowFaults, AllGatherAllRanks) { growFailure(Coll::kAllGather, true); }
TEST(GpuGrowFaults, ReduceScatterOneRank) { growFailure(Coll::kReduceScatter, false); }
TEST(GpuGrowFaults, ReduceScatterAllRanks) { growFailure(Coll::kReduceScatter, true); }

#else
TEST(GpuGrowFaults, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
