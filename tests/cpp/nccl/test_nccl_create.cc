// The NCCL comm's creation (src/gpu/nccl/create.h) over a fake NCCL table and an in-memory store,
// one thread per rank, no GPU: every rank initializes with rank 0's unique id; rank 0's failing
// ncclGetUniqueId ends the other ranks' wait at once with its message (Comm creation posts it, as
// here) rather than at their timeout; a failing ncclCommInitRank names the rank, call and code;
// a rank that never arrives is a timeout naming it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "gpu/nccl/create.h"
#include "gpu/nccl/table.h"
#include "store/bootstrap.h"

using namespace cclx;
using namespace cclx::nccl;
using Clock = std::chrono::steady_clock;

namespace {

class MemStore final : public Store {
 public:
  void set(const std::string& k, const std::string& v) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      kv_[k] = v;
    }
    cv_.notify_all();
  }
  std::string get(const std::string& k, std::chrono::milliseconds timeout) override {
    wait({k}, timeout);
    std::lock_guard<std::mutex> g(mu_);
    return kv_[k];
  }
  int64_t add(const std::string& k, int64_t d) override {
    std::lock_guard<std::mutex> g(mu_);
    const int64_t v = (kv_.count(k) ? std::stoll(kv_[k]) : 0) + d;
    kv_[k] = std::to_string(v);
    return v;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] {
          for (const auto& k : keys)
            if (!kv_.count(k)) return false;
          return true;
        }))
      CCLX_THROW(cclxTimeout, "store wait timed out");
  }
  bool check(const std::string& k) override {
    std::lock_guard<std::mutex> g(mu_);
    return kv_.count(k) != 0;
  }
  void erase(const std::string& k) override {
    std::lock_guard<std::mutex> g(mu_);
    kv_.erase(k);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

constexpr int kRanks = 3;
std::atomic<int> gUidResult{ncclSuccess};
std::atomic<int> gInitFailRank{-1};
std::mutex gMu;
std::map<int, std::string> gUidSeen;  // rank -> the id it initialized with

ncclResult_t fUid(ncclUniqueId* id) {
  for (int i = 0; i < CCLX_NCCL_UNIQUE_ID_BYTES; ++i) id->internal[i] = char(i * 7 + 1);
  return ncclResult_t(gUidResult.load());
}
ncclResult_t fInit(ncclComm_t* comm, int, ncclUniqueId id, int rank) {
  {
    std::lock_guard<std::mutex> g(gMu);
    gUidSeen[rank] = std::string(id.internal, sizeof(id.internal));
  }
  if (rank == gInitFailRank.load()) return ncclInvalidUsage;
  *comm = reinterpret_cast<ncclComm_t>(uintptr_t(0x100 + rank));
  return ncclSuccess;
}
const char* fErrorString(ncclResult_t) { return "fake"; }

struct Outcome {
  ncclComm_t comm = nullptr;
  std::optional<Error> error;
  double seconds = 0;
};

class NcclCreate : public ::testing::Test {
 protected:
  void SetUp() override {
    gUidResult = ncclSuccess;
    gInitFailRank = -1;
    gUidSeen.clear();
    table.getUniqueId = fUid;
    table.commInitRank = fInit;
    table.getErrorString = fErrorString;
  }
  // Runs the creation on `present` of kRanks ranks; a failing rank posts its failure as Comm
  // creation does.
  std::vector<Outcome> create(int present, std::chrono::milliseconds timeout) {
    std::vector<Outcome> out(kRanks);
    std::vector<std::thread> ts;
    for (int r = 0; r < present; ++r)
      ts.emplace_back([&, r] {
        const auto t0 = Clock::now();
        try {
          out[size_t(r)].comm = ncclCreateComm(store, r, kRanks, timeout, "fake");
        } catch (const Error& e) {
          out[size_t(r)].error = e;
          postFailure(store, r, kRanks, e, timeout, false);
        }
        out[size_t(r)].seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      });
    for (auto& t : ts) t.join();
    return out;
  }
  NcclLib table;
  ScopedNcclLib installed{table};
  MemStore store;
};

}  // namespace

TEST_F(NcclCreate, EveryRankInitializesWithRankZerosId) {
  const auto out = create(kRanks, std::chrono::seconds(20));
  ncclUniqueId want;
  (void)fUid(&want);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_FALSE(out[size_t(r)].error) << out[size_t(r)].error->what();
    EXPECT_EQ(out[size_t(r)].comm, reinterpret_cast<ncclComm_t>(uintptr_t(0x100 + r)));
    EXPECT_EQ(gUidSeen[r], std::string(want.internal, sizeof(want.internal))) << r;
  }
}

TEST_F(NcclCreate, RankZerosUniqueIdFailureEndsTheOthersWaitAtOnce) {
  gUidResult = ncclSystemError;
  const auto out = create(kRanks, std::chrono::seconds(30));
  ASSERT_TRUE(out[0].error);
  EXPECT_EQ(out[0].error->code(), cclxNcclError);
  EXPECT_NE(std::string(out[0].error->what()).find("rank 0: ncclGetUniqueId failed: NCCL error 2"),
            std::string::npos)
      << out[0].error->what();
  for (int r = 1; r < kRanks; ++r) {
    ASSERT_TRUE(out[size_t(r)].error) << "rank " << r << " created a comm";
    const std::string m = out[size_t(r)].error->what();
    EXPECT_NE(m.find("ncclGetUniqueId failed: NCCL error 2"), std::string::npos) << m;
    EXPECT_NE(out[size_t(r)].error->code(), cclxTimeout) << m;
    EXPECT_LT(out[size_t(r)].seconds, 10.0) << "rank " << r << " waited for its timeout";
  }
  EXPECT_TRUE(gUidSeen.empty());  // nobody reached ncclCommInitRank
}

TEST_F(NcclCreate, AFailingInitNamesTheRankCallAndCode) {
  gInitFailRank = 2;
  const auto out = create(kRanks, std::chrono::seconds(20));
  ASSERT_TRUE(out[2].error);
  EXPECT_EQ(out[2].error->code(), cclxNcclError);
  EXPECT_NE(std::string(out[2].error->what())
                .find("rank 2: ncclCommInitRank failed: NCCL error 5 (fake)"),
            std::string::npos)
      << out[2].error->what();
  EXPECT_FALSE(out[0].error);
  EXPECT_FALSE(out[1].error);
}

TEST_F(NcclCreate, AMissingRankIsATimeoutNamingIt) {
  const auto out = create(kRanks - 1, std::chrono::milliseconds(300));
  for (int r = 0; r < kRanks - 1; ++r) {
    ASSERT_TRUE(out[size_t(r)].error);
    EXPECT_EQ(out[size_t(r)].error->code(), cclxTimeout) << out[size_t(r)].error->what();
    EXPECT_NE(std::string(out[size_t(r)].error->what()).find("rank(s) 2 did not arrive"),
              std::string::npos)
        << out[size_t(r)].error->what();
  }
  EXPECT_TRUE(gUidSeen.empty());
}
