// CCLX_TEST_GROW_FAIL (core/failure/grow_fault.h): the parsing, which growth of which rank fails,
// and that the variable is a known setting (no "unknown variable" warning). The growth itself
// runs on a GPU: tests/cpp/gpu/failure/test_gpu_grow_faults.cc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.h"
#include "core/failure/grow_fault.h"
#include "core/settings/config.h"

using cclx::GrowFault;

TEST(GrowFault, ParsesOneRankAndAll) {
  GrowFault f = cclx::parseGrowFault("2:3");
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.nth, 3);
  f = cclx::parseGrowFault("all:1");
  EXPECT_EQ(f.rank, GrowFault::kAllRanks);
  EXPECT_EQ(f.nth, 1);
  EXPECT_EQ(cclx::parseGrowFault(nullptr).rank, GrowFault::kNone);
  EXPECT_EQ(cclx::parseGrowFault("").rank, GrowFault::kNone);
}

TEST(GrowFault, RejectsMalformedValues) {
  for (const char* bad : {"1", "1:", ":1", "1:0", "x:1", "-1:2", "all:-1", "1:2:3", "1:2x",
                          "ALL:1", " 1:2"}) {
    try {
      (void)cclx::parseGrowFault(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const cclx::Error& e) {
      EXPECT_EQ(e.code(), cclxInvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("CCLX_TEST_GROW_FAIL"), std::string::npos) << e.what();
    }
  }
}

TEST(GrowFault, HitsOnlyTheNthGrowthOfTheNamedRanks) {
  const GrowFault one = cclx::parseGrowFault("1:2");
  EXPECT_FALSE(one.hits(1, 1));
  EXPECT_TRUE(one.hits(1, 2));
  EXPECT_FALSE(one.hits(1, 3));
  EXPECT_FALSE(one.hits(0, 2));
  const GrowFault all = cclx::parseGrowFault("all:1");
  for (int r = 0; r < 8; ++r) {
    EXPECT_TRUE(all.hits(r, 1)) << r;
    EXPECT_FALSE(all.hits(r, 2)) << r;
  }
  EXPECT_FALSE(GrowFault{}.hits(0, 0));
  EXPECT_FALSE(GrowFault{}.hits(0, 1));
}

TEST(GrowFault, ReadsTheEnvironmentAtEachGrowth) {
  setenv("CCLX_TEST_GROW_FAIL", "0:4", 1);
  EXPECT_TRUE(cclx::growFaultFromEnv().hits(0, 4));
  setenv("CCLX_TEST_GROW_FAIL", "all:2", 1);  // changed without a reload: seen at once
  EXPECT_TRUE(cclx::growFaultFromEnv().hits(5, 2));
  unsetenv("CCLX_TEST_GROW_FAIL");
  EXPECT_EQ(cclx::growFaultFromEnv().rank, GrowFault::kNone);
}

TEST(GrowFault, MessageNamesTheSettingRankAndGrowth) {
  const std::string m = cclx::growFaultMessage(cclx::parseGrowFault("all:3"), 2, 3);
  EXPECT_NE(m.find("CCLX_TEST_GROW_FAIL=all:3"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
  EXPECT_NE(m.find("growth 3"), std::string::npos) << m;
}

TEST(GrowFault, IsAKnownSetting) {
  char entry[] = "CCLX_TEST_GROW_FAIL=1:1";
  char* env[] = {entry, nullptr};
  EXPECT_TRUE(cclx::unknownEnvNames(env).empty());
}
