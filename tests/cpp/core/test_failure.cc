// The failure model on CPU comms (the host twin of docs/design/failure.md): a late rank
// (it sleeps twice the timeout before call k of K) and a dead rank (SIGKILL mid-loop) at 3 and 5
// ranks, for every allreduce algorithm of the host transport. Every call either returns an exact
// result (equal to a fixed-order float64-free reference: the same algorithm on the healthy comm)
// or throws; a call that failed (timeout, a peer's failure) leaves all-ones bytes (NaN) in its
// output, never a stale value; no rank waits longer than the timeout plus slack in all. Also: the
// LL flag never 0 near 2^32 epochs, abort hooks, and abort-on-error ending the process.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/backend.h"
#include "core/elements/lamport.h"
#include "core/failure/wait_chain.h"
#include "helpers/mp.h"

using namespace cclx;

namespace {

using Clock = std::chrono::steady_clock;
using Hints = std::map<std::string, std::string>;
constexpr auto kTimeout = std::chrono::milliseconds(1500);
constexpr size_t kCount = 3001;

struct AlgoCase {
  const char* name;
  Hints hints;
};
const AlgoCase kAlgos[] = {
    {"flat", {{"algo", "flat"}}},
    {"tree", {{"algo", "tree"}}},
    {"lamport", {{"algo", "lamport"}}},
    {"fp8-twoshot", {{"low_precision", "fp8"}, {"fp8_algo", "twoshot"}}},
    {"fp8-oneshot", {{"low_precision", "fp8"}, {"fp8_algo", "oneshot"}}},
};

std::vector<float> input(int rank, int call) {
  std::vector<float> v(kCount);
  for (size_t i = 0; i < kCount; ++i)
    v[i] = float(int((rank + 1) * 131 + call * 17 + int(i % 97)) % 251 - 125) / 8.0f;
  return v;
}

std::shared_ptr<Comm> comm(int rank, int size, std::shared_ptr<Store> store, const std::string& name,
                           std::chrono::milliseconds timeout = kTimeout) {
  Options o;
  o.name = name;
  o.timeout = timeout;
  o.abortOnError = false;
  return test::makeCpuComm(rank, size, std::move(store), o);
}

bool allOnes(const std::vector<float>& v) {
  for (float f : v) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (b != 0xFFFFFFFFu) return false;
  }
  return true;
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs calls [0, k) of one scenario on `c`; `before(i)` runs before call i (the late sleep or the
// kill). Checks every call against `want` (or, for a call that threw, the poisoned output).
void runCalls(Comm& c, const AlgoCase& a, int rank, int k, const std::vector<std::vector<float>>& want,
              const std::function<void(int)>& before, int& exact, int& failed) {
  exact = failed = 0;
  for (int i = 0; i < k; ++i) {
    before(i);
    std::vector<float> in = input(rank, i), out(kCount, 3.0f);  // a plausible stale value
    CollOptions co;
    co.hints = a.hints;
    try {
      c.allReduce(in.data(), out.data(), kCount, DataType::f32, RedOpKind::SUM, co);
      MP_CHECK(out == want[size_t(i)], "%s: rank %d call %d returned a wrong result", a.name, rank, i);
      ++exact;
    } catch (const Error& e) {
      ++failed;
      const bool rejected = e.code() == cclxInvalidUsage;  // the comm was already unusable
      MP_CHECK(rejected || allOnes(out), "%s: rank %d call %d failed (%s) but its output is not NaN",
               a.name, rank, i, e.what());
      if (rejected) MP_CHECK(out == std::vector<float>(kCount, 3.0f), "rejected call wrote");
    }
  }
}

// The references: every call on a healthy comm of all ranks with the same algorithm.
std::vector<std::vector<float>> references(Comm& c, const AlgoCase& a, int rank, int k) {
  std::vector<std::vector<float>> want;
  for (int i = 0; i < k; ++i) {
    std::vector<float> in = input(rank, i), out(kCount);
    CollOptions co;
    co.hints = a.hints;
    c.allReduce(in.data(), out.data(), kCount, DataType::f32, RedOpKind::SUM, co);
    want.push_back(out);
  }
  return want;
}

class HostFailure : public ::testing::TestWithParam<int> {};

TEST_P(HostFailure, LateRankGivesExactOrNaN) {
  const int n = GetParam();
  constexpr int kCalls = 8, kLate = 3;
  for (const AlgoCase& a : kAlgos) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      const int late = size - 1;
      auto ref = comm(rank, size, store, std::string("ref_") + a.name, std::chrono::seconds(60));
      const auto want = references(*ref, a, rank, kCalls);
      ref->finalize();
      auto c = comm(rank, size, store, std::string("late_") + a.name);
      auto t0 = Clock::now();
      int exact = 0, failed = 0;
      runCalls(*c, a, rank, kCalls, want, [&](int i) {
        if (rank == late && i == kLate) {
          std::this_thread::sleep_for(2 * kTimeout);
          t0 = Clock::now();
        }
      }, exact, failed);
      const double waited = since(t0);
      const double bound = std::chrono::duration<double>(kTimeout).count() + 1.5;
      MP_CHECK(waited <= bound, "%s: rank %d waited %.2f s", a.name, rank, waited);
      MP_CHECK(exact >= kLate && failed > 0, "%s: rank %d: %d exact, %d failed", a.name, rank,
               exact, failed);
      std::printf("[failure] %s n=%d rank %d: %d exact, %d failed, %.2f s\n", a.name, size, rank,
                  exact, failed, waited);
      c->abort();
    }, std::chrono::seconds(120));
    test::echoTagged(res.log, "[failure]");
    ASSERT_TRUE(res.ok()) << a.name << "\n" << res.log;
  }
}

TEST_P(HostFailure, DeadRankGivesExactOrNaN) {
  const int n = GetParam();
  constexpr int kCalls = 8, kDie = 3;
  for (const AlgoCase& a : kAlgos) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      const int victim = size - 1;
      auto ref = comm(rank, size, store, std::string("dref_") + a.name, std::chrono::seconds(60));
      const auto want = references(*ref, a, rank, kCalls);
      ref->finalize();
      auto c = comm(rank, size, store, std::string("dead_") + a.name);
      const auto t0 = Clock::now();
      int exact = 0, failed = 0;
      runCalls(*c, a, rank, kCalls, want, [&](int i) {
        if (rank == victim && i == kDie) raise(SIGKILL);
      }, exact, failed);
      const double waited = since(t0);
      MP_CHECK(waited <= std::chrono::duration<double>(kTimeout).count() + 1.5,
               "%s: rank %d waited %.2f s", a.name, rank, waited);
      MP_CHECK(exact >= kDie && failed > 0, "%s: rank %d: %d exact, %d failed", a.name, rank,
               exact, failed);
      c->abort();
    }, std::chrono::seconds(120));
    for (int r = 0; r < n - 1; ++r)
      EXPECT_EQ(res.exitCodes[size_t(r)], 0) << a.name << " rank " << r << "\n" << res.log;
  }
}

// A rank that arrives after its peers timed out on a call fails that call too, for every
// collective, also those whose peers had staged all their data before giving up (flat, Lamport,
// one-step exchanges, which it could otherwise complete): its error names itself as the rank
// the others waited for, and its output is all ones. Found by bench/soak.py --late-every.
TEST(FailureModel, LateRankFailsItsLateCall) {
  const int n = 3;
  struct Call {
    const char* name;
    std::function<void(Comm&, const float*, float*)> run;
  };
  const std::vector<Call> calls = {
      {"allreduce-flat", [](Comm& c, const float* in, float* out) {
         CollOptions co;
         co.hints = {{"algo", "flat"}};
         c.allReduce(in, out, kCount, DataType::f32, RedOpKind::SUM, co);
       }},
      {"allreduce-lamport", [](Comm& c, const float* in, float* out) {
         CollOptions co;
         co.hints = {{"algo", "lamport"}};
         c.allReduce(in, out, kCount, DataType::f32, RedOpKind::SUM, co);
       }},
      {"broadcast", [](Comm& c, const float* in, float* out) {
         c.broadcast(in, out, kCount, DataType::f32, 0);
       }},
      {"allgather", [](Comm& c, const float* in, float* out) {
         c.allGather(in, out, kCount / 8, DataType::f32);
       }},
      {"alltoall", [](Comm& c, const float* in, float* out) {
         c.allToAll(in, out, kCount / 8, DataType::f32);
       }},
      {"reducescatter", [](Comm& c, const float* in, float* out) {
         c.reduceScatter(in, out, kCount / 8, DataType::f32, RedOpKind::SUM);
       }},
  };
  for (const Call& call : calls) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      const int late = size - 1;
      auto c = comm(rank, size, store, std::string("lateonly_") + call.name);
      std::vector<float> in = input(rank, 0), out(kCount * size_t(size), 3.0f);
      call.run(*c, in.data(), out.data());  // warm-up: every rank in time
      std::fill(out.begin(), out.end(), 3.0f);
      if (rank == late) std::this_thread::sleep_for(2 * kTimeout);
      std::string msg;
      try {
        call.run(*c, in.data(), out.data());
      } catch (const Error& e) {
        msg = e.what();
        MP_CHECK(e.code() == cclxTimeout, "%s: rank %d: code %d: %s", call.name, rank,
                 int(e.code()), e.what());
      }
      MP_CHECK(!msg.empty(), "%s: rank %d (late rank %d) completed the call its peers gave up on",
               call.name, rank, late);
      const std::string named = rank == late ? "waiting for rank " + std::to_string(late)
                                             : "[" + std::to_string(late) + "]";
      MP_CHECK(msg.find(named) != std::string::npos, "%s: rank %d: message does not name rank %d: %s",
               call.name, rank, late, msg.c_str());
      const size_t written = std::string(call.name) == "allgather" ? kCount / 8 * size_t(size)
                             : std::string(call.name) == "alltoall" ? kCount / 8 * size_t(size)
                             : std::string(call.name) == "reducescatter" ? kCount / 8 : kCount;
      MP_CHECK(allOnes(std::vector<float>(out.begin(), out.begin() + long(written))),
               "%s: rank %d: the failed call's output is not NaN", call.name, rank);
      c->abort();
    }, std::chrono::seconds(120));
    ASSERT_TRUE(res.ok()) << call.name << "\n" << res.log;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, HostFailure, ::testing::Values(3, 5));

// The flat kernel's LL flag of epoch e (core/elements/lamport.h): never 0 (the value of never-written
// slots) and never equal for epochs two apart (they share a slot set), also across 2^32.
TEST(FailureModel, LlFlagNeverZeroAcrossTheWrap) {
  for (uint64_t e = (1ull << 32) - 64; e < (1ull << 32) + 64; ++e) {
    EXPECT_NE(lamport::llFlag(e), 0u) << e;
    EXPECT_NE(lamport::llFlag(e), lamport::llFlag(e + 2)) << e;
  }
  for (uint64_t e : {0ull, 1ull, 0xFFFFFFFEull, 0xFFFFFFFFull, 0x1FFFFFFFEull, ~0ull - 3}) {
    EXPECT_NE(lamport::llFlag(e), 0u) << e;
    EXPECT_NE(lamport::llFlag(e), lamport::llFlag(e + 2)) << e;
  }
}

// abort() runs the comm's abort hooks once, in registration order; removed hooks do not run.
TEST(FailureModel, AbortHooksRunOnceInOrder) {
  auto res = test::runRanks(2, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto c = comm(rank, size, store, "hooks");
    std::vector<int> order;
    std::string reason;
    c->addAbortHook([&](const std::string& r) { order.push_back(1); reason = r; });
    int gone = c->addAbortHook([&](const std::string&) { order.push_back(2); });
    c->addAbortHook([&](const std::string&) { order.push_back(3); });
    c->removeAbortHook(gone);
    MP_CHECK(!c->isAborted(), "aborted too early");
    c->abort();
    c->abort();
    MP_CHECK(c->isAborted(), "isAborted() is false after abort()");
    MP_CHECK((order == std::vector<int>{1, 3}), "hooks ran %zu times", order.size());
    MP_CHECK(reason.find("hooks") != std::string::npos, "reason: %s", reason.c_str());
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Abort-on-error on (the default): a rank that never arrives ends every other process with
// SIGABRT, after one line naming the comm and the missing rank and after the abort hooks ran.
TEST(FailureModel, AbortOnErrorEndsTheProcess) {
  auto res = test::runRanks(3, [&](int rank, int size, std::shared_ptr<Store> store) {
    Options o;
    o.name = "fatal";
    o.timeout = kTimeout;
    o.abortOnError = true;  // the default; CTest sets CCLX_ABORT_ON_ERROR=0 for the suites
    auto c = test::makeCpuComm(rank, size, store, o);
    MP_CHECK(c->abortOnError(), "abortOnError() is false");
    if (rank == size - 1) {
      std::this_thread::sleep_for(3 * kTimeout);
      std::_Exit(0);
    }
    c->addAbortHook([rank](const std::string&) { std::printf("[failure] hook of rank %d\n", rank); std::fflush(stdout); });
    std::vector<float> v(kCount, 1.0f);
    c->allReduce(v.data(), v.data(), kCount, DataType::f32, RedOpKind::SUM);
    std::printf("[failure] rank %d: the call returned\n", rank);
    std::_Exit(0);
  }, std::chrono::seconds(60));
  test::echoTagged(res.log, "[failure]");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res.exitCodes[size_t(r)], 128 + SIGABRT) << "rank " << r << "\n" << res.log;
    EXPECT_NE(res.log.find("hook of rank " + std::to_string(r)), std::string::npos) << res.log;
  }
  EXPECT_EQ(res.exitCodes[2], 0) << res.log;
  EXPECT_NE(res.log.find("of comm 'fatal'"), std::string::npos) << res.log;
  EXPECT_NE(res.log.find("[2] did not arrive"), std::string::npos) << res.log;
}

}  // namespace

// The ranks a timeout names when the ranks it waited for were themselves waiting (gpu/work.cc
// builds its messages with it from the published kCtlWaitingFor words).
TEST(WaitChain, FollowsWaitsToTheRankThatPublishedNone) {
  // 8 ranks, rank 7 killed: 0, 2, 3 waited for 7; rank 1 timed out waiting for 0, 2, 3.
  uint32_t w[8] = {1u << 7, 0, 1u << 7, 1u << 7, 0, 0, 0, 0};
  EXPECT_EQ(waitChainEnd(0b1101u, w, 8, 1), 1u << 7);
  const std::string note = waitChainNote(0b1101u, w, 8, 1);
  EXPECT_NE(note.find("rank(s) 0, 2, 3 were themselves waiting"), std::string::npos) << note;
  EXPECT_NE(note.find("end at rank(s) 7)"), std::string::npos) << note;
  // Longer chains: 1 -> 0 -> 4 -> 6, and 1 -> 2 (published none).
  uint32_t c[8] = {1u << 4, 0, 0, 0, 1u << 6, 0, 0, 0};
  EXPECT_EQ(waitChainEnd(0b101u, c, 8, 1), (1u << 2) | (1u << 6));
}

TEST(WaitChain, AddsNothingWhereNothingIsKnown) {
  uint32_t none[4] = {0, 0, 0, 0};
  EXPECT_EQ(waitChainEnd(1u << 3, none, 4, 0), 0u);  // the rank waited for published no wait
  EXPECT_EQ(waitChainNote(1u << 3, none, 4, 0), "");
  // A cycle back to the timed-out rank names nothing new, never the rank itself.
  uint32_t cyc[4] = {0, 1u << 0, 0, 0};
  EXPECT_EQ(waitChainEnd(1u << 1, cyc, 4, 0), 0u);
  uint32_t loop[4] = {0, 1u << 2, 1u << 1, 0};
  EXPECT_EQ(waitChainEnd(1u << 1, loop, 4, 0), 0u);
  // Bits beyond the world size are ignored; 32 ranks use every bit.
  uint32_t big[32] = {};
  big[5] = 1u << 31;
  EXPECT_EQ(waitChainEnd(1u << 5, big, 32, 0), 1u << 31);
  uint32_t stray[4] = {0, 0xF0u, 0, 0};
  EXPECT_EQ(waitChainEnd(1u << 1, stray, 4, 0), 0u);
}
