// The drop-in's forwarding (src/nccl_dropin/forward.cc) over a fake real NCCL installed with
// installRealNccl (real.h), without a GPU or libnccl: a forwarded call passes its arguments and
// the real NCCL's result through unchanged and leaves no stale drop-in error behind; a function
// the loaded NCCL lacks fails with ncclInvalidUsage naming it, its version and path; with no
// NCCL at all every forwarded call fails with ncclSystemError and the places tried; functions
// returning a value return their documented fallback.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "nccl_dropin/errors.h"
#include "nccl_dropin/real.h"

using namespace cclx::dropin;
using namespace cclx::nccl;

extern "C" {
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t r);
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
}

namespace {

struct Seen {
  ncclComm_t comm = nullptr;
  int flags = -1;
  size_t bytes = 0;
  int calls = 0;
} gSeen;
ncclResult_t gResult = ncclSuccess;
char gBlock[64];

ncclResult_t fSuspend(ncclComm_t comm, int flags) {
  ++gSeen.calls;
  gSeen.comm = comm;
  gSeen.flags = flags;
  return gResult;
}
ncclResult_t fMemAlloc(void** ptr, size_t size) {
  ++gSeen.calls;
  gSeen.bytes = size;
  *ptr = gBlock;
  return gResult;
}
const char* fErrorString(ncclResult_t) { return "fake NCCL's string"; }

class DropinForward : public ::testing::Test {
 protected:
  void SetUp() override {
    gSeen = Seen{};
    gResult = ncclSuccess;
    table.handle = this;  // loaded
    table.version = 22803;
    table.path = "/fake/libnccl.so.2";
    table.ncclCommSuspend = fSuspend;
    table.ncclMemAlloc = fMemAlloc;
    table.ncclGetErrorString = fErrorString;
    prev = installRealNccl(&table);
  }
  void TearDown() override { installRealNccl(prev); }
  RealNccl table;
  const RealNccl* prev = nullptr;
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x5000);
};

}  // namespace

TEST_F(DropinForward, PassesArgumentsAndTheResultThrough) {
  gResult = ncclRemoteError;
  EXPECT_EQ(ncclCommSuspend(comm, 3), ncclRemoteError);
  EXPECT_EQ(gSeen.calls, 1);
  EXPECT_EQ(gSeen.comm, comm);
  EXPECT_EQ(gSeen.flags, 3);
  EXPECT_EQ(lastError(), nullptr);  // NCCL's own error: the drop-in adds none
  gResult = ncclSuccess;
  void* p = nullptr;
  EXPECT_EQ(ncclMemAlloc(&p, 4096), ncclSuccess);
  EXPECT_EQ(p, gBlock);
  EXPECT_EQ(gSeen.bytes, 4096u);
}

TEST_F(DropinForward, TheProfilingAliasForwardsToo) {
  gResult = ncclInternalError;
  EXPECT_EQ(pncclCommSuspend(comm, 1), ncclInternalError);
  EXPECT_EQ(gSeen.calls, 1);
}

TEST_F(DropinForward, AForwardedCallClearsAStaleDropinError) {
  (void)fail(ncclInvalidArgument, "an earlier call's error");
  ASSERT_NE(lastError(), nullptr);
  EXPECT_EQ(ncclCommSuspend(comm, 0), ncclSuccess);
  EXPECT_EQ(lastError(), nullptr);
}

TEST_F(DropinForward, AFunctionTheLoadedNcclLacksIsNamed) {
  table.ncclCommSuspend = nullptr;
  EXPECT_EQ(ncclCommSuspend(comm, 0), ncclInvalidUsage);
  ASSERT_NE(lastError(), nullptr);
  const std::string m = lastError();
  EXPECT_NE(m.find("ncclCommSuspend is not in the loaded NCCL 22803 (/fake/libnccl.so.2)"),
            std::string::npos)
      << m;
  EXPECT_EQ(gSeen.calls, 0);
}

TEST_F(DropinForward, WithoutNcclEveryForwardedCallSaysWhereItLooked) {
  table.handle = nullptr;
  table.error = "no usable NCCL; tried: /nowhere/libnccl.so.2: not found";
  table.ncclCommSuspend = nullptr;
  table.ncclGetVersion = nullptr;
  int v = 0;
  EXPECT_EQ(ncclGetVersion(&v), ncclSystemError);
  ASSERT_NE(lastError(), nullptr);
  EXPECT_NE(std::string(lastError()).find("tried: /nowhere/libnccl.so.2"), std::string::npos)
      << lastError();
  EXPECT_EQ(ncclCommSuspend(comm, 0), ncclSystemError);
}

TEST_F(DropinForward, ValueFunctionsFallBackWhenMissing) {
  EXPECT_STREQ(ncclGetErrorString(ncclSystemError), "fake NCCL's string");
  table.ncclGetErrorString = nullptr;
  EXPECT_STREQ(ncclGetErrorString(ncclSystemError), "unhandled system error");
  EXPECT_EQ(ncclTeamRankToWorld(comm, ncclTeam_t{2, 0, 1}, 1), -1);
  ASSERT_NE(lastError(), nullptr);
  EXPECT_NE(std::string(lastError()).find("ncclTeamRankToWorld is not in the loaded NCCL"),
            std::string::npos)
      << lastError();
}
