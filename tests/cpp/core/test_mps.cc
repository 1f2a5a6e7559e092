// core/sharing/mps.h: when ranks sharing a GPU under MPS can starve each other of SMs (the
// warning peer setup logs), checked without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "core/sharing/mps.h"

using namespace cclx;

TEST(Mps, LimitIsAnEvenShare) {
  EXPECT_EQ(mpsThreadPercentLimit(1), 100);
  EXPECT_EQ(mpsThreadPercentLimit(2), 50);
  EXPECT_EQ(mpsThreadPercentLimit(3), 33);
  EXPECT_EQ(mpsThreadPercentLimit(5), 20);
  EXPECT_EQ(mpsThreadPercentLimit(8), 12);
}

TEST(Mps, NoProblemWithoutMpsOrWithoutSharing) {
  EXPECT_EQ(mpsShareProblem("0000:06:00.0", 8, false, nullptr), "");  // time-sliced
  EXPECT_EQ(mpsShareProblem("0000:06:00.0", 1, true, nullptr), "");   // alone on its GPU
  EXPECT_EQ(mpsShareProblem("0000:06:00.0", 0, true, "100"), "");
}

TEST(Mps, UnlimitedClientsOfOneGpuAreNamed) {
  // The case that deadlocked: three ranks under MPS with no limit.
  const std::string why = mpsShareProblem("0000:06:00.0", 3, true, nullptr);
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why.find("3 ranks share GPU 0000:06:00.0 under MPS"), std::string::npos) << why;
  EXPECT_NE(why.find("unset"), std::string::npos) << why;
  EXPECT_NE(why.find("at most 33 (100 / 3)"), std::string::npos) << why;
  EXPECT_NE(mpsShareProblem("b", 2, true, "100"), "");
  EXPECT_NE(mpsShareProblem("b", 2, true, "50.5"), "");
  const std::string eight = mpsShareProblem("b", 8, true, "13");
  EXPECT_NE(eight.find("is 13:"), std::string::npos) << eight;
  EXPECT_NE(eight.find("at most 12 (100 / 8)"), std::string::npos) << eight;
}

TEST(Mps, ShareWithinTheLimitPasses) {
  // The settings the one-GPU soaks ran with (docs/PERF.md, "Soak").
  EXPECT_EQ(mpsShareProblem("b", 3, true, "33"), "");
  EXPECT_EQ(mpsShareProblem("b", 5, true, "20"), "");
  EXPECT_EQ(mpsShareProblem("b", 8, true, "12"), "");
  EXPECT_EQ(mpsShareProblem("b", 2, true, "50"), "");
  EXPECT_EQ(mpsShareProblem("b", 4, true, "12.5"), "");
}

TEST(Mps, MalformedPercentIsLeftToMps) {
  // MPS refuses such a value when the context is made; no second opinion here.
  for (const char* v : {"abc", "12x", "-5", "0"}) EXPECT_EQ(mpsShareProblem("b", 3, true, v), "") << v;
  // An empty value is unset.
  EXPECT_NE(mpsShareProblem("b", 3, true, ""), "");
}
