// Rendezvous as users meet it: a rank that never starts (rank 0, the store's server, or any
// other) is named by a cclxTimeout on every waiting rank within the timeout; a rank that fails
// tells the others, which fail at once with its message; long waits log progress; the process
// serving the store leaves only after the others finalized; a store of another job, or of
// another CCLX_STORE_TOKEN, is refused with a clear error; without a token only loopback serves.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/settings/config.h"
#include "helpers/mp.h"
#include "store/bootstrap.h"

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

long long msSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

int freePort() {
  auto probe = cclx::TcpStore::create("127.0.0.1", 0, true, "probe", 5s);
  return probe->port();
}

// The environment of Comm::fromEnv for `rank` of `size` meeting at 127.0.0.1:port.
void setRankEnv(int rank, int size, int port, const char* timeoutMs = nullptr) {
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
  if (timeoutMs) setenv("CCLX_TIMEOUT_MS", timeoutMs, 1);
  cclx::reloadConfig();
}

// Runs `call`, which must throw cclx::Error with `code`; returns the message and the time taken.
template <typename F>
std::string failsWith(cclxResult_t code, F&& call, long long* ms = nullptr) {
  auto t0 = Clock::now();
  try {
    call();
  } catch (const cclx::Error& e) {
    if (ms) *ms = msSince(t0);
    MP_CHECK(e.code() == code, "code %d, want %d: %s", int(e.code()), int(code), e.what());
    return e.what();
  }
  MP_CHECK(false, "no error");
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Rendezvous, WaitLogsProgressNamingMissingRanks) {
  auto res = cclx::test::runRanks(1, [](int, int, std::shared_ptr<cclx::Store> store) {
    auto ns = cclx::prefixStore(store, "progress/");
    ns->set("k/0", "x");
    ns->set("k/2", "x");
    long long ms = 0;
    std::string msg = failsWith(cclxTimeout, [&] {
      cclx::storeWaitRanks(*ns, "k", {0, 1, 2, 3}, 1200ms, "test wait", 500ms);
    }, &ms);
    MP_CHECK(msg == "test wait: rank(s) 1, 3 did not arrive within 1200 ms", "%s", msg.c_str());
    MP_CHECK(ms >= 1100 && ms < 3000, "took %lld ms", ms);
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
  // One WARN line per report interval (at 0.5 s and 1 s), visible without CCLX_DEBUG.
  size_t lines = 0;
  const std::string line = "CCLX WARN test wait: waiting for rank(s) 1, 3 at 127.0.0.1:";
  for (size_t at = 0; (at = res.log.find(line, at)) != std::string::npos; ++at)
    ++lines;
  EXPECT_EQ(lines, 2u) << res.log;
  EXPECT_TRUE(has(res.log, ", 1 s of 1 s")) << res.log;
}

TEST(Rendezvous, PostedFailureEndsWaitsAtOnce) {
  auto server = cclx::TcpStore::create("127.0.0.1", 0, true, "posted", 5s);
  auto client = cclx::TcpStore::create("127.0.0.1", server->port(), false, "posted", 5s);
  auto ns = cclx::prefixStore(client, "comm/");
  cclx::postFailure(*cclx::prefixStore(client, "comm/"), 2, 4,
                    cclx::Error(cclxInvalidArgument, "CCLX_TIMEOUT_MS='abc' is not an integer"),
                    5s, true);
  auto t0 = Clock::now();
  try {
    cclx::storeWaitRanks(*ns, "host", {0, 1, 2, 3}, 30s, "rendezvous");
    FAIL() << "no error";
  } catch (const cclx::Error& e) {
    EXPECT_EQ(e.code(), cclxRemoteError);
    EXPECT_STREQ(e.what(), "rank 2 failed: CCLX_TIMEOUT_MS='abc' is not an integer");
  }
  EXPECT_LT(msSince(t0), 1000);
  // The first failure stays; a timeout keeps its code for the others.
  auto other = cclx::prefixStore(server, "other/");
  cclx::postFailure(*other, 0, 1, cclx::Error(cclxTimeout, "rank(s) 3 did not arrive"), 5s, false);
  cclx::postFailure(*other, 1, 2, cclx::Error(cclxInternalError, "later"), 5s, false);
  try {
    cclx::throwPostedFailure(*other, 5);
    FAIL() << "no error";
  } catch (const cclx::Error& e) {
    EXPECT_EQ(e.code(), cclxTimeout);
    EXPECT_STREQ(e.what(), "rank 0 failed: rank(s) 3 did not arrive");
  }
  EXPECT_NO_THROW(cclx::throwPostedFailure(*other, 0));  // its own report
  EXPECT_TRUE(server->check("other/failed_ack/1"));
}

TEST(Rendezvous, LostStoreIsATimeoutNamingRankZero) {
  auto res = cclx::test::runRanks(2, [](int rank, int, std::shared_ptr<cclx::Store> parent) {
    if (rank == 0) {
      auto server = cclx::TcpStore::create("127.0.0.1", 0, true, "lost", 10s);
      parent->set("port", std::to_string(server->port()));
      parent->get("waiting", 10s);
      std::this_thread::sleep_for(200ms);
      _exit(0);  // leaves without a word (no destructor)
    }
    int port = std::stoi(parent->get("port", 10s));
    auto client = cclx::TcpStore::create("127.0.0.1", port, false, "lost", 10s);
    parent->set("waiting", "1");
    long long ms = 0;
    std::string msg = failsWith(cclxTimeout, [&] {
      cclx::storeWaitRanks(*cclx::prefixStore(client, "c/"), "host", {0, 1}, 10s, "rendezvous");
    }, &ms);
    MP_CHECK(has(msg, "rank 0, which serves it, left") && has(msg, std::to_string(port)), "%s",
             msg.c_str());
    MP_CHECK(ms < 3000, "took %lld ms", ms);
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(RendezvousEnv, RankZeroNeverStarts) {
  int port = freePort();
  auto res = cclx::test::runRanks(3, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    if (rank == 0) return;
    setRankEnv(rank, size, port, "1000");
    long long ms = 0;
    std::string msg = failsWith(cclxTimeout, [&] {
      cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());  // 600 s unless CCLX_TIMEOUT_MS says less
    }, &ms);
    MP_CHECK(has(msg, "rank 0") && has(msg, "127.0.0.1:" + std::to_string(port)), "%s",
             msg.c_str());
    MP_CHECK(ms < 3000, "took %lld ms", ms);
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(RendezvousEnv, MissingRankNamedOnEveryRank) {
  int port = freePort();
  auto res = cclx::test::runRanks(4, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    if (rank == 3) return;
    setRankEnv(rank, size, port, "1000");
    long long ms = 0;
    std::string msg = failsWith(cclxTimeout, [&] {
      cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());
    }, &ms);
    MP_CHECK(has(msg, "rank(s) 3 did not arrive"), "%s", msg.c_str());
    MP_CHECK(ms < 3000, "took %lld ms", ms);
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

// One rank's bad argument (here a hint) reaches every rank at once, also when it is rank 0,
// which serves the store and stays until the others have read it.
TEST(RendezvousEnv, OneRanksFailureFailsAllAtOnce) {
  for (int bad : {2, 0}) {
    int port = freePort();
    auto res = cclx::test::runRanks(3, [port, bad](int rank, int size,
                                                   std::shared_ptr<cclx::Store>) {
      setRankEnv(rank, size, port);
      cclx::Options o;
      o.timeout = 60s;
      if (rank == bad) o.hints["algo"] = "fastest";
      long long ms = 0;
      std::string want = "hint algo='fastest' is not one of auto, base, flat, lamport, tree, ll, pipelined, nccl, dda";
      std::string msg = failsWith(rank == bad ? cclxInvalidArgument : cclxRemoteError, [&] {
        cclx::Comm::fromEnv(cclx::DeviceSpec::cpu(), o);
      }, &ms);
      if (rank != bad) want = "rank " + std::to_string(bad) + " failed: " + want;
      MP_CHECK(msg == want, "%s", msg.c_str());
      MP_CHECK(ms < 3000, "took %lld ms", ms);
    }, 60s);
    ASSERT_TRUE(res.ok()) << "bad rank " << bad << "\n" << res.log;
  }
}

TEST(RendezvousEnv, JobIdMismatchIsRefused) {
  int port = freePort();
  auto res = cclx::test::runRanks(2, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    setenv("CCLX_JOB_ID", rank == 0 ? "jobA" : "jobB", 1);
    setRankEnv(rank, size, port, "1000");
    if (rank == 1) {
      std::string msg = failsWith(cclxRemoteError, [&] {
        cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());
      });
      MP_CHECK(has(msg, "serves another job") && has(msg, "'jobB'") && !has(msg, "jobA"), "%s",
               msg.c_str());
    } else {
      std::string msg = failsWith(cclxTimeout, [&] {
        cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());
      });
      MP_CHECK(has(msg, "rank(s) 1 did not arrive"), "%s", msg.c_str());
    }
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

// finalize on the process serving the store returns only once the others have finalized, so a
// program that leaves right after finalize never takes the store from a peer still using it.
TEST(RendezvousEnv, StoreOwnerLeavesAfterTheOthersFinalized) {
  int port = freePort();
  auto res = cclx::test::runRanks(3, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    setRankEnv(rank, size, port);
    cclx::Options o;
    o.timeout = 30s;
    auto comm = cclx::Comm::fromEnv(cclx::DeviceSpec::cpu(), o);
    auto sub = comm->split({0, 2}, "pair");  // closing it must not count as the last comm
    if (sub) sub->finalize();
    comm->barrier();
    if (rank == 2) std::this_thread::sleep_for(700ms);
    auto t0 = Clock::now();
    comm->finalize();
    long long ms = msSince(t0);
    if (rank == 0) {
      MP_CHECK(ms >= 600, "rank 0 left after %lld ms, before rank 2 finalized", ms);
      _exit(0);  // no destructor: only finalize protects the others
    }
    MP_CHECK(ms < 500, "rank %d's finalize took %lld ms", rank, ms);
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace

namespace {

TEST(RendezvousEnv, StoreTokenMismatchIsAClearErrorNotAHang) {
  int port = freePort();
  auto res = cclx::test::runRanks(2, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    setenv("CCLX_STORE_TOKEN", rank == 0 ? "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                         : "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", 1);
    setRankEnv(rank, size, port, "3000");
    long long ms = 0;
    if (rank == 1) {
      std::string msg = failsWith(cclxRemoteError, [&] {
        cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());
      }, &ms);
      MP_CHECK(has(msg, "CCLX_STORE_TOKEN differs"), "%s", msg.c_str());
      MP_CHECK(!has(msg, "aaaa") && !has(msg, "bbbb"), "the message shows a token: %s",
               msg.c_str());
      MP_CHECK(ms < 2500, "took %lld ms", ms);
    } else {
      std::string msg = failsWith(cclxTimeout, [&] {
        cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());
      }, &ms);
      MP_CHECK(has(msg, "rank(s) 1 did not arrive"), "%s", msg.c_str());
      MP_CHECK(ms < 6000, "took %lld ms", ms);
    }
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

// MASTER_ADDR=0.0.0.0 is not a loopback address: without a token every rank refuses at once
// (rank 0 to serve it, the others to connect), naming CCLX_STORE_TOKEN; with one it works.
TEST(RendezvousEnv, RoutableAddressNeedsAStoreToken) {
  int port = freePort();
  auto res = cclx::test::runRanks(3, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    unsetenv("CCLX_STORE_TOKEN");
    setRankEnv(rank, size, port, "20000");
    setenv("MASTER_ADDR", "0.0.0.0", 1);
    long long ms = 0;
    std::string msg = failsWith(cclxInvalidArgument, [&] {
      cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());
    }, &ms);
    MP_CHECK(has(msg, "CCLX_STORE_TOKEN") && has(msg, "loopback"), "%s", msg.c_str());
    MP_CHECK(ms < 2000, "took %lld ms", ms);
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
  int port2 = freePort();
  res = cclx::test::runRanks(3, [port2](int rank, int size, std::shared_ptr<cclx::Store>) {
    setenv("CCLX_STORE_TOKEN", "0123456789abcdef0123456789abcdef", 1);
    setRankEnv(rank, size, port2, "20000");
    setenv("MASTER_ADDR", "0.0.0.0", 1);
    auto comm = cclx::Comm::fromEnv(cclx::DeviceSpec::cpu());
    float x = float(rank + 1), y = 0;
    comm->allReduce(&x, &y, 1, cclx::DataType::f32, cclx::RedOpKind::SUM);
    MP_CHECK(y == 6.0f, "sum %f", y);
    comm->finalize();
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace
