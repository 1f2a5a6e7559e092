// Collective setup that every rank finishes alike (core/failure/setup_sequence.h) and the settings every
// rank must share (core/settings/settings_check.h), without a GPU: the sequence over an in-process
// exchange with one thread per rank (local failures at every step, late ranks, failures decided
// between steps), the settings comparison, CCLX_TEST_SETUP_FAIL, and CPU comms whose ranks
// disagree on a setting.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/settings/config.h"
#include "core/settings/settings_check.h"
#include "core/failure/setup_sequence.h"
#include "helpers/mp.h"

using namespace std::chrono_literals;

namespace {

// The ranks' shared board: per tag, one slot per rank. allGather posts and waits for every rank
// (throwing cclxTimeout naming the missing ranks past its wait); contribute posts only. Every
// call is logged per rank ("G:tag" / "C:tag") to check that all ranks made the same sequence.
struct Board {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<std::optional<std::string>>> slots;
  std::vector<std::vector<std::string>> calls;
  int size;
  explicit Board(int n) : calls(size_t(n)), size(n) {}
};

class FakeExchange final : public cclx::Exchange {
 public:
  FakeExchange(Board& b, int rank, std::chrono::milliseconds wait)
      : b_(b), rank_(rank), wait_(wait) {}
  // Called before the exchange with this tag is entered (a rank that is late there sleeps).
  std::function<void(const std::string&)> before;

  std::vector<std::string> allGather(const std::string& tag, const std::string& mine) override {
    if (before) before(tag);
    std::unique_lock<std::mutex> lk(b_.mu);
    post(tag, mine, "G:");
    auto& v = b_.slots[tag];
    const bool all = b_.cv.wait_for(lk, wait_, [&] {
      for (const auto& s : v)
        if (!s) return false;
      return true;
    });
    if (!all) {
      std::string missing;
      for (int r = 0; r < b_.size; ++r)
        if (!v[size_t(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw cclx::Error(cclxTimeout, "rank(s) " + missing + " did not arrive");
    }
    std::vector<std::string> out;
    for (const auto& s : v) out.push_back(*s);
    return out;
  }
  void contribute(const std::string& tag, const std::string& mine) override {
    if (before) before(tag);
    std::lock_guard<std::mutex> lk(b_.mu);
    post(tag, mine, "C:");
  }

 private:
  void post(const std::string& tag, const std::string& mine, const char* how) {
    auto& v = b_.slots[tag];
    v.resize(size_t(b_.size));
    v[size_t(rank_)] = mine;
    b_.calls[size_t(rank_)].push_back(how + tag);
    b_.cv.notify_all();
  }
  Board& b_;
  int rank_;
  std::chrono::milliseconds wait_;
};

// What one rank saw: per step whether it got every rank's records, and the final state.
struct Seen {
  std::vector<bool> gotAll;
  bool failed = false, broken = false;
  cclxResult_t code = cclxSuccess;
  std::string why;
  int steps = 0;
};

const char* kTags[] = {"peer/who", "peer/handle", "peer/vote"};

// Runs the three-step sequence on `n` threads. local(rank, step) gives a rank's record (it may
// throw); between(rank, step, records, seq) may fail the rank after a step; late(rank, tag)
// sleeps where a rank is late.
std::vector<Seen> runSequence(
    int n, std::function<std::string(int, int)> local,
    std::function<void(int, int, const std::vector<std::string>&, cclx::SetupSequence&)> between =
        {},
    std::function<void(int, const std::string&)> late = {},
    std::chrono::milliseconds wait = 2000ms) {
  Board board(n);
  std::vector<Seen> seen(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      FakeExchange ex(board, r, wait);
      if (late) ex.before = [&, r](const std::string& tag) { late(r, tag); };
      cclx::SetupSequence seq(ex, r, n);
      for (int k = 0; k < 3; ++k) {
        auto recs = seq.step(kTags[k], [&] { return local(r, k); });
        seen[size_t(r)].gotAll.push_back(recs.has_value());
        if (recs && between) between(r, k, *recs, seq);
      }
      Seen& s = seen[size_t(r)];
      s.failed = seq.failed();
      s.broken = seq.broken();
      s.code = seq.code();
      s.why = seq.why();
      s.steps = seq.steps();
    });
  for (auto& t : ts) t.join();
  // The property an ordered transport needs: every rank made the same calls, in the same order.
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> tags;
    for (const std::string& c : board.calls[size_t(r)]) tags.push_back(c.substr(2));
    EXPECT_EQ(tags, std::vector<std::string>(std::begin(kTags), std::end(kTags))) << "rank " << r;
  }
  return seen;
}

std::string body(int r, int k) { return "r" + std::to_string(r) + "s" + std::to_string(k); }

TEST(SetupSequence, AllWellEveryRankGetsEveryRecord) {
  std::vector<std::vector<std::string>> got(4);
  std::mutex mu;
  auto seen = runSequence(4, body, [&](int r, int k, const std::vector<std::string>& recs,
                                       cclx::SetupSequence&) {
    std::lock_guard<std::mutex> g(mu);
    if (k == 2) got[size_t(r)] = recs;
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE(seen[size_t(r)].failed) << seen[size_t(r)].why;
    EXPECT_EQ(seen[size_t(r)].gotAll, (std::vector<bool>{true, true, true}));
    EXPECT_EQ(seen[size_t(r)].steps, 3);
    EXPECT_EQ(got[size_t(r)], (std::vector<std::string>{"r0s2", "r1s2", "r2s2", "r3s2"}));
  }
}

// A rank that fails locally at any step still takes part in every remaining exchange, and every
// rank learns of it at that step.
TEST(SetupSequence, LocalFailureAtEveryStepFailsEveryRankThere) {
  for (int failStep = 0; failStep < 3; ++failStep) {
    SCOPED_TRACE("failing step " + std::to_string(failStep));
    auto seen = runSequence(3, [&](int r, int k) -> std::string {
      if (r == 1 && k == failStep) throw cclx::Error(cclxCudaError, "out of memory (injected)");
      return body(r, k);
    });
    for (int r = 0; r < 3; ++r) {
      const Seen& s = seen[size_t(r)];
      EXPECT_TRUE(s.failed);
      EXPECT_FALSE(s.broken);
      EXPECT_EQ(s.steps, 3);
      for (int k = 0; k < 3; ++k) EXPECT_EQ(s.gotAll[size_t(k)], k < failStep) << "rank " << r;
      EXPECT_NE(s.why.find("rank 1: out of memory (injected)"), std::string::npos) << s.why;
      EXPECT_EQ(s.code, r == 1 ? cclxCudaError : cclxRemoteError);
    }
  }
}

// A verdict every rank derives from the same records (settings that differ) fails all of them
// alike, and the remaining exchanges still run.
TEST(SetupSequence, FailureDecidedBetweenStepsOnEveryRank) {
  auto seen = runSequence(3, body, [](int r, int k, const std::vector<std::string>& recs,
                                      cclx::SetupSequence& seq) {
    if (k == 0 && recs.size() == 3) seq.fail(cclxInvalidUsage, "settings differ");
  });
  for (const Seen& s : seen) {
    EXPECT_TRUE(s.failed);
    EXPECT_EQ(s.code, cclxInvalidUsage);
    EXPECT_EQ(s.why, "settings differ");
    EXPECT_EQ(s.gotAll, (std::vector<bool>{true, false, false}));
    EXPECT_EQ(s.steps, 3);
  }
}

// A rank later than the others' deadline at step 2: they give up there (broken), still
// contribute step 3 (published, not waited for); the late rank completes step 2 and learns of
// their failure at step 3. Nobody waits for more than its deadline; every rank fails.
TEST(SetupSequence, LateRankMidSequenceFailsEveryRank) {
  auto t0 = std::chrono::steady_clock::now();
  auto seen = runSequence(
      3, body, {},
      [](int r, const std::string& tag) {
        if (r == 2 && tag == "peer/handle") std::this_thread::sleep_for(700ms);
      },
      300ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  for (int r = 0; r < 3; ++r) {
    const Seen& s = seen[size_t(r)];
    EXPECT_TRUE(s.failed) << "rank " << r;
    EXPECT_EQ(s.steps, 3);
    if (r == 2) {
      EXPECT_FALSE(s.broken);
      EXPECT_EQ(s.gotAll, (std::vector<bool>{true, true, false}));
      EXPECT_NE(s.why.find("rank 0: setup exchange 'peer/handle'"), std::string::npos) << s.why;
    } else {
      EXPECT_TRUE(s.broken);
      EXPECT_EQ(s.gotAll, (std::vector<bool>{true, false, false}));
      EXPECT_NE(s.why.find("rank(s) 2 did not arrive"), std::string::npos) << s.why;
      EXPECT_EQ(s.code, cclxTimeout);
    }
  }
}

// The one case the sequence cannot settle by itself (setup_sequence.h): a rank late at the last
// exchange completes it, while the others broke there. peer_mem.cc covers it with the comm's
// abort word; here the state says exactly who knows what.
TEST(SetupSequence, LateRankAtTheLastStepIsTheOnlyOneToSucceed) {
  auto seen = runSequence(
      2, body, {},
      [](int r, const std::string& tag) {
        if (r == 1 && tag == "peer/vote") std::this_thread::sleep_for(600ms);
      },
      200ms);
  EXPECT_TRUE(seen[0].failed && seen[0].broken);
  EXPECT_FALSE(seen[1].failed) << seen[1].why;
  EXPECT_EQ(seen[1].gotAll, (std::vector<bool>{true, true, true}));
}

TEST(SetupSequence, MalformedRecordFailsEveryRank) {
  Board board(2);
  std::thread bad([&] {
    FakeExchange ex(board, 1, 2000ms);
    (void)ex.allGather("peer/who", "garbage");  // not a sequence record
  });
  FakeExchange ex(board, 0, 2000ms);
  cclx::SetupSequence seq(ex, 0, 2);
  auto recs = seq.step("peer/who", [] { return std::string("x"); });
  bad.join();
  EXPECT_FALSE(recs.has_value());
  EXPECT_TRUE(seq.failed());
  EXPECT_NE(seq.why().find("rank 1 sent a malformed setup record"), std::string::npos) << seq.why();
}

// ---- settings every rank must share ----

std::string settingsWith(const char* name, const char* value, cclx::SettingsScope scope) {
  cclx::Config c;
  if (name) {
    setenv(name, value, 1);
    c = cclx::Config::fromEnv();
    unsetenv(name);
  }
  return cclx::encodeSettings(cclx::layoutSettings(c, scope));
}

TEST(SettingsCheck, StagingBytesMismatchNamesSettingValuesAndRanks) {
  const std::string def = settingsWith(nullptr, nullptr, cclx::SettingsScope::kGpu);
  const std::string small = settingsWith("CCLX_DDA_STAGING_BYTES", "1M", cclx::SettingsScope::kGpu);
  EXPECT_EQ(cclx::compareSettings({def, def, def}), "");
  const std::string msg = cclx::compareSettings({def, small, def});
  EXPECT_NE(msg.find("CCLX_DDA_STAGING_BYTES differs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("184549376 on rank(s) 0, 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1048576 on rank(s) 1"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("CCLX_DDA_MAX_BLOCKS"), std::string::npos) << msg;  // only what differs
}

TEST(SettingsCheck, EveryLayoutSettingIsCompared) {
  const std::pair<const char*, const char*> changes[] = {
      {"CCLX_DDA_MAX_BLOCKS", "16"},        {"CCLX_FP8_BLOCK_SIZE", "64"},
      {"CCLX_FP8_TILES_PER_CTA", "4"},      {"CCLX_DDA_FLAT_MAX_BYTES", "4K"},
      {"CCLX_DDA_LAMPORT_MAX_BYTES", "4K"}, {"CCLX_DDA_TREE_MAX_BYTES", "4K"},
      {"CCLX_LOW_PRECISION_MIN_BYTES", "1M"}, {"CCLX_LOW_PRECISION_ALLREDUCE", "1"},
      {"CCLX_ALLREDUCE_ALGO", "tree"},      {"CCLX_FP8_ALLREDUCE_ALGO", "twoshot"},
      {"CCLX_FP8_ONESHOT_MAX_BYTES", "1M"}, {"CCLX_DDA_ENABLE", "0"},
      {"CCLX_NCCL_INTERCEPT", "0"},         {"CCLX_NCCL_FORWARD", "allgather"}};
  const std::string def = settingsWith(nullptr, nullptr, cclx::SettingsScope::kDropin);
  for (const auto& [k, v] : changes) {
    const std::string other = settingsWith(k, v, cclx::SettingsScope::kDropin);
    const std::string msg = cclx::compareSettings({def, other});
    EXPECT_NE(msg.find(std::string(k) + " differs"), std::string::npos) << k << ": " << msg;
  }
  // A CPU comm compares the host transport's layout, and not the GPU's.
  const std::string host = settingsWith(nullptr, nullptr, cclx::SettingsScope::kHost);
  EXPECT_NE(cclx::compareSettings(
                {host, settingsWith("CCLX_SHM_CHUNK_BYTES", "8K", cclx::SettingsScope::kHost)}),
            "");
  EXPECT_EQ(cclx::compareSettings(
                {host, settingsWith("CCLX_DDA_STAGING_BYTES", "8M", cclx::SettingsScope::kHost)}),
            "");
  // The drop-in's masks only matter to the drop-in.
  const std::string gpu = settingsWith(nullptr, nullptr, cclx::SettingsScope::kGpu);
  EXPECT_EQ(cclx::compareSettings(
                {gpu, settingsWith("CCLX_NCCL_FORWARD", "all", cclx::SettingsScope::kGpu)}),
            "");
}

TEST(SettingsCheck, MalformedAndMissingEntries) {
  const std::string def = settingsWith(nullptr, nullptr, cclx::SettingsScope::kGpu);
  std::string msg = cclx::compareSettings({def, "no equals sign here"});
  EXPECT_NE(msg.find("rank(s) 1 sent a malformed settings record"), std::string::npos) << msg;
  std::string shorter = def.substr(0, def.find("CCLX_DDA_MAX_BLOCKS"));
  msg = cclx::compareSettings({def, shorter});
  EXPECT_NE(msg.find("CCLX_DDA_MAX_BLOCKS differs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unset on the other rank(s)"), std::string::npos) << msg;
}

TEST(SettingsCheck, TestSetupFailParsing) {
  setenv("CCLX_TEST_SETUP_FAIL", "3:open", 1);
  cclx::Config c = cclx::Config::fromEnv();
  EXPECT_EQ(c.testSetupFailRank, 3);
  EXPECT_EQ(c.testSetupFailStage, "open");
  EXPECT_NO_THROW(cclx::injectSetupFailure(c, 2, "open"));
  EXPECT_NO_THROW(cclx::injectSetupFailure(c, 3, "alloc"));
  try {
    cclx::injectSetupFailure(c, 3, "open");
    ADD_FAILURE() << "no failure injected";
  } catch (const cclx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("CCLX_TEST_SETUP_FAIL=3:open"), std::string::npos);
  }
  for (const char* bad : {"open", "1:", "x:open", "1:nowhere", "-1:who"}) {
    setenv("CCLX_TEST_SETUP_FAIL", bad, 1);
    EXPECT_THROW(cclx::Config::fromEnv(), cclx::Error) << bad;
  }
  unsetenv("CCLX_TEST_SETUP_FAIL");
  EXPECT_EQ(cclx::Config::fromEnv().testSetupFailRank, -1);
}

TEST(SettingsCheck, TimeoutSetOrNot) {
  unsetenv("CCLX_TIMEOUT");
  unsetenv("TORCHCOMM_TIMEOUT_SECONDS");
  EXPECT_FALSE(cclx::Config::fromEnv().defaultTimeoutSet);
  setenv("CCLX_TIMEOUT", "0", 1);
  cclx::Config c = cclx::Config::fromEnv();
  EXPECT_TRUE(c.defaultTimeoutSet);
  EXPECT_EQ(c.defaultTimeoutMs, 0);
  unsetenv("CCLX_TIMEOUT");
  setenv("TORCHCOMM_TIMEOUT_SECONDS", "1800", 1);
  c = cclx::Config::fromEnv();
  EXPECT_TRUE(c.defaultTimeoutSet);
  EXPECT_EQ(c.defaultTimeoutMs, 1800000);
  unsetenv("TORCHCOMM_TIMEOUT_SECONDS");
}

// Two CPU-comm ranks with different CCLX_SHM_CHUNK_BYTES: creation fails on both with a message
// that names the setting, both values and both ranks (before any shared memory exists).
TEST(SettingsCheck, CpuCommRanksDisagree) {
  auto res = cclx::test::runRanks(2, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    if (rank == 1) setenv("CCLX_SHM_CHUNK_BYTES", "8K", 1);
    cclx::reloadConfig();
    try {
      auto comm = cclx::test::makeCpuComm(rank, size, store);
      MP_CHECK(false, "rank %d: the comm was created", rank);
    } catch (const cclx::Error& e) {
      const std::string m = e.what();
      MP_CHECK(e.code() == cclxInvalidUsage, "code %d: %s", int(e.code()), m.c_str());
      MP_CHECK(m.find("CCLX_SHM_CHUNK_BYTES differs: 4194304 on rank(s) 0; 8192 on rank(s) 1") !=
                   std::string::npos,
               "%s", m.c_str());
    }
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace
