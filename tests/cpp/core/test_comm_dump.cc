// Comm::dump()'s operation counts over Works that complete later and out of order (CUDA comms
// return such Works; here a controllable Work on a one-rank CPU comm): every operation issued is
// eventually completed or failed, also when more than the queue's sweep threshold (4096) are
// pending at once, and in_flight returns to 0.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <cclx/cclx.hpp>

#include "core/comm/backend.h"
#include "core/comm/comm_internal.h"

using namespace cclx;

namespace {

// A Work whose completion the test decides; `fail` makes isCompleted() raise.
class HeldWork final : public Work {
 public:
  std::atomic<bool> done{false}, fail{false};
  bool isCompleted() override {
    if (fail.load()) throw Error(cclxRemoteError, "held work failed");
    return done.load();
  }
  void wait(void*) override {}
  void waitBlocking(std::chrono::milliseconds) override {}
};

std::shared_ptr<Comm> oneRankComm() {
  auto server = TcpStore::create("127.0.0.1", 0, true, "dump", std::chrono::seconds(5));
  Options o;
  o.name = "dump";
  return Comm::create(DeviceSpec::cpu(), o, server, 0, 1);
}

long long num(const std::map<std::string, std::string>& d, const char* k) {
  return std::stoll(d.at(k));
}

void issue(CommState& st, uint64_t seq, std::shared_ptr<Work> w) {
  trackIssued(st, "all_reduce", seq);
  trackReturned(st, "all_reduce", seq, std::move(w), "test");
}

}  // namespace

// 5000 pending operations (beyond the sweep threshold), completed newest first, then the oldest:
// every one is counted once and nothing stays in flight.
TEST(CommDump, EveryOperationBeyondTheThresholdIsCounted) {
  auto comm = oneRankComm();
  CommState& st = CommAccess::state(*comm);
  const auto base = comm->dump();
  const long long issued0 = num(base, "ops_issued"), completed0 = num(base, "ops_completed");
  constexpr int kOps = 5000;
  std::vector<std::shared_ptr<HeldWork>> works;
  for (int i = 0; i < kOps; ++i) {
    works.push_back(std::make_shared<HeldWork>());
    issue(st, uint64_t(i), works.back());
  }
  auto d = comm->dump();
  EXPECT_EQ(num(d, "ops_issued") - issued0, kOps);
  EXPECT_EQ(num(d, "in_flight"), kOps);
  // The newest complete first (another stream): the oldest one still holds the queue's front.
  for (int i = kOps - 1; i >= 1; --i) works[size_t(i)]->done = true;
  d = comm->dump();
  EXPECT_EQ(num(d, "in_flight"), 1);
  EXPECT_EQ(num(d, "ops_completed") - completed0, kOps - 1);
  EXPECT_NE(d.at("in_flight_ops").find("all_reduce #0"), std::string::npos) << d.at("in_flight_ops");
  works[0]->fail = true;
  d = comm->dump();
  EXPECT_EQ(num(d, "in_flight"), 0);
  EXPECT_EQ(num(d, "ops_failed"), 1);
  EXPECT_EQ(num(d, "ops_completed") - completed0 + num(d, "ops_failed"), kOps);
  comm->finalize();
}

// Operations issued while thousands are pending are swept as dispatch goes on (no dump needed):
// the queue stays bounded by twice what is really running.
TEST(CommDump, TheQueueHoldsOnlyWhatRuns) {
  auto comm = oneRankComm();
  CommState& st = CommAccess::state(*comm);
  auto stuck = std::make_shared<HeldWork>();  // the oldest, never done until the end
  issue(st, 0, stuck);
  for (int i = 1; i < 20000; ++i) {
    auto w = std::make_shared<HeldWork>();
    w->done = true;  // completes at once, behind the stuck one
    issue(st, uint64_t(i), w);
  }
  {
    std::lock_guard<std::mutex> g(st.track.mu);
    EXPECT_LE(st.track.pending.size(), 4096u);
  }
  stuck->done = true;
  const auto d = comm->dump();
  EXPECT_EQ(num(d, "in_flight"), 0);
  EXPECT_EQ(d.at("in_flight_ops"), "");
  comm->finalize();
}
