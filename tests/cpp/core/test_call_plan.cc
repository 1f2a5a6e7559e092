// The order in which a GPU call settles what it runs on (core/select/call_plan.h), with the
// backend's steps replaced: a failed staging growth inside CUDA-graph capture that falls back to
// NCCL is refused before anything is enqueued, and reduce_scatter_quantized whose FP8 staging
// failed runs as the quantized op it is (chosen again from the call), never as the exact
// reduce-scatter it was lowered to.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/select/call_plan.h"

using namespace cclx;

namespace {

const char* nameOf(Algo a) {
  switch (a) {
    case Algo::Base: return "base";
    case Algo::Fp8: return "fp8";
    case Algo::SrBf16: return "sr_bf16";
    case Algo::XchgPipe: return "pipelined";
    default: return "other";
  }
}
const char* nameOf(CollType t) {
  switch (t) {
    case CollType::ReduceScatter: return "reduce_scatter";
    case CollType::ReduceScatterQuantized: return "reduce_scatter_quantized";
    case CollType::AllToAllVDevice: return "all_to_all_v_device";
    default: return "other";
  }
}

// A backend whose growth fails once for `failing`; records the steps it was asked for.
struct FakeBackend {
  Algo failing = Algo::Base;
  bool hasNccl = true;
  std::vector<std::string> log;
  std::map<CollType, Algo> choice;  // what select() returns per collective while nothing failed
  bool failed = false;

  CallSteps steps() {
    return CallSteps{
        [this](const CollArgs& a) {
          Algo c = choice.count(a.type) ? choice[a.type] : Algo::Base;
          if (failed && c == failing) c = a.type == CollType::ReduceScatterQuantized
                                               ? Algo::SrBf16 : Algo::Base;
          log.push_back(std::string("select ") + nameOf(a.type) + " -> " + nameOf(c));
          return c;
        },
        [this](const CollArgs& a, Algo al, bool again) {
          log.push_back(std::string("grow ") + nameOf(a.type) + " " + nameOf(al) +
                        (again ? "" : " (no choice)"));
          if (al != failing || failed) return al;
          failed = true;  // every rank alike
          if (!again) return Algo::Base;
          Algo c = choice.count(a.type) ? choice[a.type] : Algo::Base;
          return c == failing ? Algo::Base : c;
        },
        [this](const CollArgs&) {
          log.push_back("requireNccl");
          if (!hasNccl) throw Error(cclxUnsupported, "no NCCL");
        }};
  }
};

CollArgs quantized() {
  CollArgs a;
  a.type = CollType::ReduceScatterQuantized;
  a.count = 1024;
  a.dtype = DataType::f32;
  a.opts.hints["low_precision"] = "fp8";
  return a;
}

CollArgs deviceRows() {
  CollArgs a;
  a.type = CollType::AllToAllVDevice;
  a.dtype = DataType::f32;
  a.rows.rowElems = 4;
  a.rows.sendCap = a.rows.recvCap = 8;
  return a;
}

}  // namespace

TEST(CallPlan, QuantizedWhoseFp8StagingFailedStaysQuantized) {
  FakeBackend b;
  b.choice[CollType::ReduceScatterQuantized] = Algo::Fp8;
  b.failing = Algo::Fp8;
  const CollArgs call = quantized();
  const CallSteps steps = b.steps();
  CallPlan p = planCall(call, steps);
  ASSERT_TRUE(p.lowered);
  EXPECT_EQ(p.args(call).type, CollType::ReduceScatter);
  growPlan(p, call, CallPlace{0, 4, false, ""}, steps);
  EXPECT_FALSE(p.lowered);
  EXPECT_EQ(p.args(call).type, CollType::ReduceScatterQuantized);  // not an exact reduce-scatter
  EXPECT_EQ(p.algo, Algo::SrBf16);
  // The lowered growth did not choose for itself: the call chose again.
  ASSERT_GE(b.log.size(), 3u);
  EXPECT_EQ(b.log[1], "grow reduce_scatter fp8 (no choice)");
  EXPECT_EQ(b.log[2], "select reduce_scatter_quantized -> sr_bf16");
  // A later call (same comm) chooses the same: both round alike.
  CallPlan q = planCall(call, steps);
  growPlan(q, call, CallPlace{0, 4, false, ""}, steps);
  EXPECT_FALSE(q.lowered);
  EXPECT_EQ(q.algo, Algo::SrBf16);
}

TEST(CallPlan, QuantizedWhoseFp8StagingGrewRunsLowered) {
  FakeBackend b;
  b.choice[CollType::ReduceScatterQuantized] = Algo::Fp8;
  const CollArgs call = quantized();
  const CallSteps steps = b.steps();
  CallPlan p = planCall(call, steps);
  growPlan(p, call, CallPlace{0, 2, false, ""}, steps);
  EXPECT_TRUE(p.lowered);
  EXPECT_EQ(p.algo, Algo::Fp8);
  EXPECT_STREQ(p.args(call).what, "reduce_scatter_quantized");
}

TEST(CallPlan, DeviceRowsFallingBackToNcclInsideCaptureAreRefused) {
  FakeBackend b;
  b.choice[CollType::AllToAllVDevice] = Algo::XchgPipe;
  b.failing = Algo::XchgPipe;
  const CollArgs call = deviceRows();
  const CallSteps steps = b.steps();
  CallPlan p = planCall(call, steps);
  EXPECT_EQ(p.algo, Algo::XchgPipe);
  try {
    growPlan(p, call, CallPlace{2, 4, true, "its staging failed"}, steps);
    ADD_FAILURE() << "not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot be captured"), std::string::npos) << e.what();
  }
  // The growth ran first (its failure is what led to NCCL).
  ASSERT_FALSE(b.log.empty());
  EXPECT_EQ(b.log.back(), "grow all_to_all_v_device pipelined");
}

TEST(CallPlan, DeviceRowsOnNcclOutsideCaptureOrAtOneRankRun) {
  FakeBackend b;  // Base for everything
  const CollArgs call = deviceRows();
  const CallSteps steps = b.steps();
  CallPlan p = planCall(call, steps);
  EXPECT_NO_THROW(growPlan(p, call, CallPlace{0, 4, false, ""}, steps));
  EXPECT_EQ(p.algo, Algo::Base);
  CallPlan one = planCall(call, steps);
  EXPECT_NO_THROW(growPlan(one, call, CallPlace{0, 1, true, ""}, steps));  // a local copy
}

TEST(CallPlan, NcclIsRequiredOnlyForWhatMoves) {
  FakeBackend b;
  b.hasNccl = false;
  CollArgs empty;
  empty.type = CollType::AllReduce;
  empty.count = 0;
  EXPECT_NO_THROW(planCall(empty, b.steps()));
  CollArgs some = empty;
  some.count = 8;
  EXPECT_THROW(planCall(some, b.steps()), Error);
}
