// CPU twin of the NCCL drop-in's shared-GPU mode, part two (helpers/dropin_twin.h): the decision
// every rank takes alike before NCCL's init (and what it costs), ncclCommSplit with colors, keys
// and NCCL_SPLIT_NOCOLOR, ncclCommShrink, the life cycle (finalize, destroy, abort, the handle
// after them), the errors that name their call, and a killed rank.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <thread>

#include "helpers/dropin_twin.h"

using namespace twin;
using cclx::test::runRanks;

namespace {

// Rank 0's id through the test store (stamped unless CCLX_DROPIN_SHARED=0).
ncclUniqueId shareId(int rank, Store& store, const std::string& key) {
  ncclUniqueId id{};
  if (rank == 0) {
    GetUniqueId(&id);
    store.set(key, std::string(id.internal, sizeof(id.internal)));
  } else {
    const std::string v = store.get(key, std::chrono::seconds(60));
    std::memcpy(id.internal, v.data(), sizeof(id.internal));
  }
  return id;
}

bool isZero(const ncclUniqueId& id) {
  for (char ch : id.internal)
    if (ch) return false;
  return true;
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// The decision: ranks on GPUs of their own go to NCCL (every rank alike, timed), one pair on a
// GPU makes the whole comm shared, CCLX_DROPIN_SHARED=1 forces it, =0 skips the exchange (no
// stamp), and =1 with an id this drop-in did not make fails naming the call.
TEST(DropinShared, DecisionIsTheSameOnEveryRank) {
  for (int n : {2, 4, 8}) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      setUpRank();
      const std::string host = hostIdentity();
      ncclResult_t r = ncclSuccess;
      ncclComm_t c = nullptr;
      // Every rank on a GPU of its own: NCCL's (not handled here).
      ncclUniqueId id = shareId(rank, *store, "own");
      auto t0 = std::chrono::steady_clock::now();
      bool handled = sh::initRank(&c, size, id, rank, nullptr,
                                  sh::Local{DeviceSpec::cpu(), host + "|gpu" + std::to_string(rank)},
                                  "ncclCommInitRank", r);
      const double ms = msSince(t0);
      MP_CHECK(!handled && !c, "ranks on GPUs of their own: decided shared (r=%d %s)", int(r), LastError());
      std::printf("[decision] %d ranks: not shared, decided in %.2f ms\n", size, ms);
      // The first and the last rank share a GPU: shared on every rank.
      id = shareId(rank, *store, "pair");
      const int gpu = rank == size - 1 ? 0 : rank;
      handled = sh::initRank(&c, size, id, rank, nullptr,
                             sh::Local{DeviceSpec::cpu(), host + "|gpu" + std::to_string(gpu)},
                             "ncclCommInitRank", r);
      MP_CHECK(handled && r == ncclSuccess && sh::isShared(c), "one shared GPU: %d %s", int(r), LastError());
      MP_CHECK(sh::destroy(SHARED(c)) == ncclSuccess, "destroy");
      // CCLX_DROPIN_SHARED=1: shared although every GPU is distinct.
      setenv("CCLX_DROPIN_SHARED", "1", 1);
      reloadConfig();
      id = shareId(rank, *store, "forced");
      handled = sh::initRank(&c, size, id, rank, nullptr,
                             sh::Local{DeviceSpec::cpu(), host + "|gpu" + std::to_string(rank)},
                             "ncclCommInitRank", r);
      MP_CHECK(handled && r == ncclSuccess && sh::isShared(c), "forced: %d %s", int(r), LastError());
      MP_CHECK(sh::destroy(SHARED(c)) == ncclSuccess, "destroy");
      ncclUniqueId plain{};  // an id NCCL made without the drop-in
      handled = sh::initRank(&c, size, plain, rank, nullptr, sh::Local{DeviceSpec::cpu(), gGpu},
                             "ncclCommInitRank", r);
      MP_CHECK(handled && r == ncclInvalidUsage &&
                   std::string(LastError()).find("ncclCommInitRank") != std::string::npos,
               "forced with a foreign id: %d %s", int(r), LastError());
      // CCLX_DROPIN_SHARED=0: no stamp, no exchange, NCCL's.
      setenv("CCLX_DROPIN_SHARED", "0", 1);
      reloadConfig();
      id = shareId(rank, *store, "off");
      MP_CHECK(isZero(id), "CCLX_DROPIN_SHARED=0 stamped the id");
      handled = sh::initRank(&c, size, id, rank, nullptr, sh::Local{DeviceSpec::cpu(), gGpu},
                             "ncclCommInitRank", r);
      MP_CHECK(!handled, "CCLX_DROPIN_SHARED=0 made a shared comm");
      finishRank(rank, size, *store);
    });
    cclx::test::echoTagged(res.log, "[decision]");
    ASSERT_TRUE(res.ok()) << "world size " << n << "\n" << res.log;
  }
}

// ncclCommSplit: colors rank % 2 with keys that reverse the order, rank 0 without a color
// (NCCL_SPLIT_NOCOLOR); the children work. ncclCommShrink without the last rank.
TEST(DropinShared, SplitAndShrink) {
  for (int n : {4, 5}) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      setUpRank();
      ncclComm_t c = makeComm(rank, size, *store, "uid");
      ncclComm_t child = nullptr;
      const int color = rank == 0 ? -1 : rank % 2;
      MP_CHECK(sh::split(SHARED(c), color, size - rank, &child, nullptr) == ncclSuccess,
               "ncclCommSplit: %s", LastError());
      if (rank == 0) {
        MP_CHECK(child == nullptr, "NCCL_SPLIT_NOCOLOR gave a comm");
      } else {
        std::vector<int> members;  // parent ranks of my color, in key order (descending rank)
        for (int r = size - 1; r >= 1; --r)
          if (r % 2 == color) members.push_back(r);
        int cnt = 0, me = -1;
        sh::count(SHARED(child), &cnt);
        sh::userRank(SHARED(child), &me);
        MP_CHECK(cnt == int(members.size()), "child size %d, expected %zu", cnt, members.size());
        MP_CHECK(members[size_t(me)] == rank, "child rank %d is parent rank %d, not %d", me,
                 members[size_t(me)], rank);
        std::vector<int32_t> v(33, rank), expect(33, 0);
        for (int r : members) for (auto& e : expect) e += r;
        MP_CHECK(AllReduce(v.data(), v.data(), 33, ncclInt32, ncclSum, child) == ncclSuccess, "%s", LastError());
        MP_CHECK(v == expect, "child allreduce");
        MP_CHECK(sh::destroy(SHARED(child)) == ncclSuccess, "destroy child");
      }
      if (rank < size - 1) {
        const int out = size - 1;
        ncclComm_t small = nullptr;
        MP_CHECK(sh::shrink(SHARED(c), &out, 1, &small, nullptr, 0) == ncclSuccess,
                 "ncclCommShrink: %s", LastError());
        int cnt = 0, me = -1;
        sh::count(SHARED(small), &cnt);
        sh::userRank(SHARED(small), &me);
        MP_CHECK(cnt == size - 1 && me == rank, "shrunk comm: rank %d of %d", me, cnt);
        int64_t x = rank + 1;
        MP_CHECK(AllReduce(&x, &x, 1, ncclInt64, ncclMax, small) == ncclSuccess, "%s", LastError());
        MP_CHECK(x == size - 1, "shrunk allreduce: %lld", (long long)x);
        MP_CHECK(sh::destroy(SHARED(small)) == ncclSuccess, "destroy shrunk");
      }
      MP_CHECK(sh::destroy(SHARED(c)) == ncclSuccess, "destroy");
      finishRank(rank, size, *store);
    });
    ASSERT_TRUE(res.ok()) << "world size " << n << "\n" << res.log;
  }
}

// Queries, registration, PreMulSum misuse, FP8 reductions, NCCL functions the mode does not
// serve, finalize, destroy, abort: every refusal is an NCCL error whose message names the call,
// and a handle stays known (and refused) after destroy and abort.
TEST(DropinShared, LifeCycleAndErrors) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    setUpRank();
    ncclComm_t c = makeComm(rank, size, *store, "uid");
    auto named = [](const char* call) { return std::string(LastError()).find(call) != std::string::npos; };
    ncclResult_t err = ncclInternalError;
    MP_CHECK(sh::asyncError(SHARED(c), &err) == ncclSuccess && err == ncclSuccess, "async error %d", int(err));
    int dev = 5;
    MP_CHECK(sh::cuDevice(SHARED(c), &dev) == ncclSuccess && dev == -1, "ncclCommCuDevice %d", dev);
    Buf mem(4096);
    void* h = nullptr;
    MP_CHECK(sh::registerBuffer(SHARED(c), mem.data(), mem.size(), &h) == ncclSuccess && h, "register");
    MP_CHECK(sh::deregisterBuffer(SHARED(c), h) == ncclSuccess, "deregister");
    MP_CHECK(sh::deregisterBuffer(SHARED(c), h) == ncclInvalidArgument && named("ncclCommDeregister"),
             "deregistering twice: %s", LastError());
    float f = 0.5f;
    ncclRedOp_t op = 0;
    MP_CHECK(sh::redOpCreatePreMulSum(SHARED(c), &op, &f, ncclFloat32, ncclScalarDevice) == ncclInvalidUsage &&
                 named("ncclRedOpCreatePreMulSum") && named("ncclScalarDevice"), "device scalar: %s", LastError());
    MP_CHECK(sh::redOpCreatePreMulSum(SHARED(c), &op, &f, ncclFloat32, ncclScalarHostImmediate) == ncclSuccess, "premul");
    std::vector<double> d(8, 1.0);
    MP_CHECK(AllReduce(d.data(), d.data(), 8, ncclFloat64, op, c) == ncclInvalidArgument && named("ncclAllReduce"),
             "a f32 PreMulSum on f64 data: %s", LastError());
    MP_CHECK(AllReduce(d.data(), d.data(), 8, ncclFloat64, 999, c) == ncclInvalidArgument, "unknown op");
    MP_CHECK(sh::redOpDestroy(SHARED(c), op) == ncclSuccess, "destroy op");
    MP_CHECK(sh::redOpDestroy(SHARED(c), op) == ncclInvalidArgument && named("ncclRedOpDestroy"), "destroy op twice");
    std::vector<uint8_t> q(16, 0x38);
    MP_CHECK(AllReduce(q.data(), q.data(), 16, ncclFloat8e4m3, ncclSum, c) == ncclInvalidArgument &&
                 named("ncclAllReduce"), "an FP8 reduction: %s", LastError());
    MP_CHECK(AllReduce(nullptr, nullptr, 16, ncclFloat32, ncclSum, c) == ncclInvalidArgument && named("ncclAllReduce"),
             "null buffers: %s", LastError());
    MP_CHECK(sh::unsupported("ncclCommWindowRegister", c) == ncclInvalidUsage && named("ncclCommWindowRegister") &&
                 named("share a GPU"), "unsupported: %s", LastError());
    MP_CHECK(Send(d.data(), 8, ncclFloat64, size, c) == ncclInvalidArgument && named("ncclSend"), "bad peer");
    // Finalize: later calls fail naming themselves; destroy; the handle stays known.
    MP_CHECK(sh::finalize(SHARED(c)) == ncclSuccess, "finalize");
    MP_CHECK(AllReduce(d.data(), d.data(), 8, ncclFloat64, ncclSum, c) == ncclInvalidUsage &&
                 named("ncclAllReduce") && named("finalized"), "after finalize: %s", LastError());
    MP_CHECK(sh::destroy(SHARED(c)) == ncclSuccess, "destroy");
    MP_CHECK(sh::isShared(c), "a destroyed handle is no longer recognized (it would go to NCCL)");
    MP_CHECK(sh::destroy(SHARED(c)) == ncclInvalidUsage && named("ncclCommDestroy"), "destroy twice");
    MP_CHECK(sh::asyncError(SHARED(c), &err) == ncclSuccess && err == ncclSuccess, "async error after destroy");
    // Abort never waits for the peers: rank 0 aborts while the others are elsewhere.
    ncclComm_t a = makeComm(rank, size, *store, "uid-abort");
    if (rank == 0) {
      auto t0 = std::chrono::steady_clock::now();
      MP_CHECK(sh::abort(SHARED(a)) == ncclSuccess, "abort");
      MP_CHECK(msSince(t0) < 2000, "abort took %.0f ms", msSince(t0));
      MP_CHECK(AllReduce(d.data(), d.data(), 8, ncclFloat64, ncclSum, a) == ncclInvalidUsage &&
                   named("aborted"), "after abort: %s", LastError());
      store->set("aborted", "1");
    } else {
      (void)store->get("aborted", std::chrono::seconds(60));
      MP_CHECK(sh::destroy(SHARED(a)) == ncclSuccess, "destroy");
    }
    finishRank(rank, size, *store);
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// A PreMulSum scalar may sit at any address (the application passes a pointer to its bytes):
// read by bytes, it gives its factor (found by tests/fuzz/fuzz_dropin.cc: the scalar was read as
// an aligned element, undefined behaviour for a misaligned one).
TEST(DropinShared, PreMulSumScalarAtAnyAddress) {
  auto res = runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    setUpRank();
    ncclComm_t c = makeComm(rank, size, *store, "uid");
    alignas(16) unsigned char bytes[32];
    for (size_t off : {1, 3, 5}) {
      const double f64 = 0.75;
      const int32_t i32 = 3;
      std::memcpy(bytes + off, &f64, 8);
      ncclRedOp_t op = 0;
      MP_CHECK(sh::redOpCreatePreMulSum(SHARED(c), &op, bytes + off, ncclFloat64,
                                        ncclScalarHostImmediate) == ncclSuccess, "f64: %s", LastError());
      std::vector<double> d(5, double(rank + 1));
      MP_CHECK(AllReduce(d.data(), d.data(), 5, ncclFloat64, op, c) == ncclSuccess, "%s", LastError());
      for (double x : d) MP_CHECK(x == 0.75 * 3, "f64 PreMulSum from offset %zu: %g", off, x);
      MP_CHECK(sh::redOpDestroy(SHARED(c), op) == ncclSuccess, "destroy op");
      std::memcpy(bytes + off, &i32, 4);
      MP_CHECK(sh::redOpCreatePreMulSum(SHARED(c), &op, bytes + off, ncclInt32,
                                        ncclScalarHostImmediate) == ncclSuccess, "i32: %s", LastError());
      std::vector<int32_t> v(5, rank + 1);
      MP_CHECK(AllReduce(v.data(), v.data(), 5, ncclInt32, op, c) == ncclSuccess, "%s", LastError());
      for (int32_t x : v) MP_CHECK(x == 9, "i32 PreMulSum from offset %zu: %d", off, x);
      MP_CHECK(sh::redOpDestroy(SHARED(c), op) == ncclSuccess, "destroy op");
    }
    MP_CHECK(sh::destroy(SHARED(c)) == ncclSuccess, "destroy");
    finishRank(rank, size, *store);
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// A rank killed in the middle of a loop of allreduces: every survivor's next call fails within
// the timeout with ncclRemoteError, its message naming the dead rank; nothing hangs.
TEST(DropinShared, KilledRankIsNamed) {
  for (int n : {3, 4}) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      setUpRank("3");
      ncclComm_t c = makeComm(rank, size, *store, "uid");
      const int victim = size - 1;
      std::vector<float> v(1001, 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      bool failed = false;
      for (int i = 0; i < 200 && !failed; ++i) {
        if (rank == victim && i == 5) raise(SIGKILL);
        const ncclResult_t r = AllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclMax, c);
        if (r == ncclSuccess) continue;
        failed = true;
        const std::string m = LastError();
        MP_CHECK(r == ncclRemoteError || r == ncclSystemError, "code %d: %s", int(r), m.c_str());
        MP_CHECK(m.find(std::to_string(victim)) != std::string::npos && m.find("ncclAllReduce") != std::string::npos,
                 "the error does not name rank %d and the call: %s", victim, m.c_str());
        std::printf("[kill] rank %d: %d after %.1f s: %s\n", rank, int(r), msSince(t0) / 1000, m.c_str());
      }
      MP_CHECK(failed, "rank %d never noticed that rank %d died", rank, victim);
      MP_CHECK(msSince(t0) < 30000, "the failure took %.0f ms", msSince(t0));
      MP_CHECK(sh::abort(SHARED(c)) == ncclSuccess, "abort");
      finishRank(rank, size - 1, *store);  // the survivors (the victim is the last rank)
    });
    cclx::test::echoTagged(res.log, "[kill]");
    for (int r = 0; r < n - 1; ++r) EXPECT_EQ(res.exitCodes[size_t(r)], 0) << "rank " << r << "\n" << res.log;
  }
}
