// A rank that never arrives produces cclxTimeout naming it (never a hang); check mode catches
// ranks that disagree on a collective's arguments.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "core/settings/config.h"
#include "helpers/mp.h"

using namespace std::chrono_literals;
using cclx::DataType;
using cclx::RedOpKind;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTimeout = 2000ms;

cclx::Options shortTimeout() {
  cclx::Options o;
  o.timeout = kTimeout;
  return o;
}

// Runs `call`, which must fail with `code` within the timeout plus slack; returns the message.
template <typename F>
std::string expectFailure(cclxResult_t code, F&& call, const char* what) {
  auto t0 = Clock::now();
  try {
    call();
  } catch (const cclx::Error& e) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    MP_CHECK(e.code() == code, "%s: code %d (%s), want %d", what, int(e.code()), e.what(), int(code));
    MP_CHECK(ms < kTimeout.count() + 3000, "%s took %lld ms", what, (long long)ms);
    return e.what();
  }
  MP_CHECK(false, "%s succeeded", what);
  return "";
}

TEST(Timeout, RankMissingFromCollective) {
  auto res = cclx::test::runRanks(4, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, size, store, shortTimeout());
    std::vector<float> in(4096, float(rank + 1)), out(4096, -1.0f);
    comm->allReduce(in.data(), out.data(), in.size(), DataType::f32, RedOpKind::SUM);
    MP_CHECK(out[17] == 10.0f, "warm-up allreduce gave %f", double(out[17]));
    if (rank == 3) _exit(0);  // leaves without a word
    std::string msg = expectFailure(cclxTimeout, [&] {
      comm->allReduce(in.data(), out.data(), in.size(), DataType::f32, RedOpKind::SUM);
    }, "allreduce without rank 3");
    MP_CHECK(msg.find("[3]") != std::string::npos || msg.find("rank(s) 3 ") != std::string::npos,
             "message does not name rank 3: %s", msg.c_str());
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(Timeout, RankMissingFromRendezvous) {
  auto res = cclx::test::runRanks(4, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    if (rank == 2) return;
    std::string msg = expectFailure(cclxTimeout, [&] {
      cclx::test::makeCpuComm(rank, size, store, shortTimeout());
    }, "rendezvous without rank 2");
    MP_CHECK(msg.find("rank(s) 2 ") != std::string::npos, "message does not name rank 2: %s",
             msg.c_str());
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(Timeout, EnvironmentOverridesTimeout) {
  auto res = cclx::test::runRanks(2, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    setenv("CCLX_TIMEOUT_MS", "1500", 1);
    cclx::reloadConfig();
    cclx::Options o;  // 600 s unless the environment overrides it
    if (rank == 1) return;
    auto t0 = Clock::now();
    try {
      cclx::test::makeCpuComm(rank, size, store, o);
      MP_CHECK(false, "rendezvous without rank 1 succeeded");
    } catch (const cclx::Error& e) {
      MP_CHECK(e.code() == cclxTimeout, "code %d: %s", int(e.code()), e.what());
    }
    MP_CHECK(Clock::now() - t0 < 6s, "CCLX_TIMEOUT_MS was not applied");
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(Timeout, CheckModeCatchesCountMismatch) {
  auto res = cclx::test::runRanks(4, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    setenv("CCLX_CHECK_MODE", "1", 1);
    cclx::reloadConfig();
    auto comm = cclx::test::makeCpuComm(rank, size, store, shortTimeout());
    std::vector<float> in(128, float(rank)), out(128, -7.0f);
    comm->allReduce(in.data(), out.data(), 128, DataType::f32, RedOpKind::SUM);
    MP_CHECK(out[5] == 6.0f, "matching allreduce gave %f", double(out[5]));
    size_t count = rank == 1 ? 64 : 128;
    std::fill(out.begin(), out.end(), -7.0f);
    std::string msg = expectFailure(cclxInvalidUsage, [&] {
      comm->allReduce(in.data(), out.data(), count, DataType::f32, RedOpKind::SUM);
    }, "mismatched allreduce");
    MP_CHECK(msg.find("rank 1") != std::string::npos, "message does not name rank 1: %s",
             msg.c_str());
    MP_CHECK(out[0] == -7.0f, "a rejected collective wrote its output");
    // Root mismatch on broadcast.
    int root = rank == 2 ? 1 : 0;
    msg = expectFailure(cclxInvalidUsage, [&] {
      comm->broadcast(in.data(), out.data(), 16, DataType::f32, root);
    }, "mismatched broadcast");
    MP_CHECK(msg.find("rank 2") != std::string::npos, "%s", msg.c_str());
    // The comm is still usable once ranks agree again.
    comm->allReduce(in.data(), out.data(), 128, DataType::f32, RedOpKind::MAX);
    MP_CHECK(out[9] == 3.0f, "allreduce after mismatch gave %f", double(out[9]));
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace
