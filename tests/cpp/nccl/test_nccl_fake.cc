// NCCL's callers in src/gpu/nccl (colls.cc over table.h) against a fake NCCL table, without a GPU:
// a failing call gives a cclxNcclError naming the call, the code, NCCL's string and the comm's
// last error; nothing after the failure is enqueued (no copy of a temporary into the output, no
// further calls of a group) and every opened group is closed; a PREMUL_SUM op is destroyed; a
// nonblocking comm that stays ncclInProgress fails with cclxTimeout at the call's deadline and
// one that settles on an error names the call. The fake's stream_ops.h records device work on
// host memory.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "gpu/nccl/colls.h"
#include "gpu/nccl/stream_ops.h"
#include "gpu/nccl/table.h"

using namespace cclx;
using namespace cclx::nccl;

namespace {

// What the fake NCCL does: results per call name, the async state of the comm, a call log.
struct Fake {
  std::map<std::string, ncclResult_t> result;  // per call name; default ncclSuccess
  std::map<std::string, int> failAt;           // call name -> the k-th call (1-based) fails
  std::map<std::string, int> seen;
  std::vector<std::string> log;
  int inProgressPolls = 0;  // ncclCommGetAsyncError says ncclInProgress this often (-1: always)
  ncclResult_t settlesTo = ncclSuccess;
  int polls = 0;
  const char* lastError = "peer 2 closed the connection";
  int gatherRanks = 0;  // > 0: ncclAllGather of int64 words copies the send buffer to every slot
  int markPolls = 0;    // markDone says "not yet" this often (-1: always)
  int markPolled = 0, marksLive = 0;

  ncclResult_t call(const std::string& name) {
    log.push_back(name);
    const int k = ++seen[name];
    auto f = failAt.find(name);
    if (f != failAt.end() && f->second != k) return ncclSuccess;
    auto r = result.find(name);
    return r == result.end() ? ncclSuccess : r->second;
  }
  size_t count(const std::string& name) const {
    size_t n = 0;
    for (const auto& s : log) n += s == name;
    return n;
  }
};
Fake* gFake = nullptr;

ncclResult_t fAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                        ncclStream_t) {
  return gFake->call("ncclAllReduce");
}
ncclResult_t fReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                     ncclStream_t) {
  return gFake->call("ncclReduce");
}
ncclResult_t fBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, ncclStream_t) {
  return gFake->call("ncclBroadcast");
}
ncclResult_t fAllGather(const void* send, void* recv, size_t count, ncclDataType_t, ncclComm_t,
                        ncclStream_t) {
  for (int r = 0; r < gFake->gatherRanks; ++r)
    std::memcpy(static_cast<int64_t*>(recv) + size_t(r) * count, send, count * sizeof(int64_t));
  return gFake->call("ncclAllGather");
}
ncclResult_t fReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            ncclStream_t) {
  return gFake->call("ncclReduceScatter");
}
ncclResult_t fSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, ncclStream_t) {
  return gFake->call("ncclSend");
}
ncclResult_t fRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, ncclStream_t) {
  return gFake->call("ncclRecv");
}
ncclResult_t fGroupStart() { return gFake->call("ncclGroupStart"); }
ncclResult_t fGroupEnd() { return gFake->call("ncclGroupEnd"); }
ncclResult_t fPreMul(ncclRedOp_t* op, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t) {
  *op = 77;
  return gFake->call("ncclRedOpCreatePreMulSum");
}
ncclResult_t fOpDestroy(ncclRedOp_t op, ncclComm_t) {
  return gFake->call(op == 77 ? "ncclRedOpDestroy(77)" : "ncclRedOpDestroy(?)");
}
ncclResult_t fAsync(ncclComm_t, ncclResult_t* st) {
  ++gFake->polls;
  const bool pending = gFake->inProgressPolls < 0 || gFake->polls <= gFake->inProgressPolls;
  *st = pending ? ncclInProgress : gFake->settlesTo;
  return ncclSuccess;
}
const char* fErrorString(ncclResult_t r) {
  return r == ncclSystemError ? "unhandled system error (fake)" : "fake error";
}
const char* fLastError(ncclComm_t) { return gFake->lastError; }

NcclLib fakeTable() {
  NcclLib l;
  l.allReduce = fAllReduce;
  l.reduce = fReduce;
  l.broadcast = fBroadcast;
  l.allGather = fAllGather;
  l.reduceScatter = fReduceScatter;
  l.send = fSend;
  l.recv = fRecv;
  l.groupStart = fGroupStart;
  l.groupEnd = fGroupEnd;
  l.redOpCreatePreMulSum = fPreMul;
  l.redOpDestroy = fOpDestroy;
  l.commGetAsyncError = fAsync;
  l.getErrorString = fErrorString;
  l.getLastError = fLastError;
  l.version = 22800;
  l.path = "fake";
  return l;
}

class NcclFake : public ::testing::Test {
 protected:
  void SetUp() override { gFake = &fake; }
  void TearDown() override { gFake = nullptr; }
  Fake fake;
  NcclLib table = fakeTable();
  ScopedNcclLib installed{table};
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x1000);
  int stream = 0;  // its address stands for a stream

  CollArgs args(CollType t, const void* send, void* recv, size_t count) {
    CollArgs a;
    a.type = t;
    a.send = send;
    a.recv = recv;
    a.count = count;
    a.dtype = DataType::f32;
    a.opts.timeout = std::chrono::seconds(30);
    return a;
  }
  // Runs `a` at `rank` of `size`; returns the error, or a success marker.
  Error run(const CollArgs& a, int rank = 0, int size = 2) {
    try {
      ncclRunCollective(a, comm, rank, size, &stream);
    } catch (const Error& e) {
      return e;
    }
    return Error(cclxSuccess, "");
  }
};

}  // namespace

// The fake's device work: host memory, logged as "copy", "alloc", "free".
namespace cclx {
namespace ncclstream {
void copy(void* dst, const void* src, size_t bytes, nccl::ncclStream_t) {
  if (gFake) gFake->log.push_back("copy");
  std::memmove(dst, src, bytes);
}
void* allocTemp(size_t bytes, nccl::ncclStream_t) {
  if (gFake) gFake->log.push_back("alloc");
  return std::calloc(bytes, 1);
}
void freeTemp(void* p, nccl::ncclStream_t) noexcept {
  if (gFake) gFake->log.push_back("free");
  std::free(p);
}
void copyHost(void* dst, const void* src, size_t bytes, nccl::ncclStream_t) {
  if (gFake) gFake->log.push_back("copy");
  std::memmove(dst, src, bytes);
}
void poison(void* dst, size_t bytes, nccl::ncclStream_t) {
  if (gFake) gFake->log.push_back("poison");
  std::memset(dst, 0xFF, bytes);
}
void* markRecord(nccl::ncclStream_t) {
  if (gFake) ++gFake->marksLive;
  return new int(0);
}
bool markDone(void*) {
  ++gFake->markPolled;
  return gFake->markPolls >= 0 && gFake->markPolled > gFake->markPolls;
}
void markFree(void* m) noexcept {
  if (gFake) --gFake->marksLive;
  delete static_cast<int*>(m);
}
}  // namespace ncclstream
}  // namespace cclx

TEST_F(NcclFake, TheInstalledTableIsWhatCallersGet) {
  EXPECT_EQ(&ncclLib(), &table);
  NcclLib other = fakeTable();
  {
    ScopedNcclLib inner(other);
    EXPECT_EQ(&ncclLib(), &other);
  }
  EXPECT_EQ(&ncclLib(), &table);
}

TEST_F(NcclFake, SuccessEnqueuesTheCall) {
  float buf[4] = {};
  Error e = run(args(CollType::AllReduce, buf, buf, 4));
  EXPECT_EQ(e.code(), cclxSuccess) << e.what();
  EXPECT_EQ(fake.log, std::vector<std::string>{"ncclAllReduce"});
}

TEST_F(NcclFake, AFailedCallNamesTheCallCodeAndLastError) {
  fake.result["ncclAllReduce"] = ncclSystemError;
  float buf[4] = {};
  Error e = run(args(CollType::AllReduce, buf, buf, 4));
  EXPECT_EQ(e.code(), cclxNcclError);
  EXPECT_NE(std::string(e.what()).find("ncclAllReduce failed: NCCL error 2 (unhandled system "
                                       "error (fake)): peer 2 closed the connection"),
            std::string::npos)
      << e.what();
}

TEST_F(NcclFake, WithoutNcclsStringsTheCodeIsStillNamed) {
  table.getErrorString = nullptr;
  table.getLastError = nullptr;
  fake.result["ncclBroadcast"] = ncclRemoteError;
  float buf[4] = {};
  CollArgs a = args(CollType::Broadcast, buf, buf, 4);
  a.root = 1;
  Error e = run(a);
  EXPECT_EQ(e.code(), cclxNcclError);
  EXPECT_NE(std::string(e.what()).find("ncclBroadcast failed: NCCL error 6 (remote process exited"),
            std::string::npos)
      << e.what();
}

TEST_F(NcclFake, AFailureInsideAGroupStopsTheGroupAndClosesIt) {
  fake.result["ncclSend"] = ncclInvalidUsage;
  fake.failAt["ncclSend"] = 2;
  std::vector<float> in(6), out(6);
  Error e = run(args(CollType::AllToAll, in.data(), out.data(), 2), 0, 3);
  EXPECT_EQ(e.code(), cclxNcclError);
  EXPECT_NE(std::string(e.what()).find("ncclSend failed: NCCL error 5"), std::string::npos)
      << e.what();
  // Rank 0 of 3: send/recv to 0, send to 1 fails; nothing more, and the group is closed once.
  const std::vector<std::string> want = {"ncclGroupStart", "ncclSend", "ncclRecv", "ncclSend",
                                         "ncclGroupEnd"};
  EXPECT_EQ(fake.log, want);
}

TEST_F(NcclFake, AFailedGroupEndIsNamed) {
  fake.result["ncclGroupEnd"] = ncclRemoteError;
  std::vector<float> in(6), out(6);
  Error e = run(args(CollType::AllToAll, in.data(), out.data(), 2), 1, 3);
  EXPECT_EQ(e.code(), cclxNcclError);
  EXPECT_NE(std::string(e.what()).find("ncclGroupEnd failed: NCCL error 6"), std::string::npos)
      << e.what();
  EXPECT_EQ(fake.count("ncclGroupEnd"), 1u);  // not a second time from the guard
}

// A reduce-scatter whose output overlaps its input elsewhere than its own block goes through a
// temporary: when NCCL refuses it, the temporary (never written) is not copied into the output.
TEST_F(NcclFake, AFailedCallLeavesNoStaleTemporaryInTheOutput) {
  std::vector<float> buf(8, 5.0f);  // rank 1 of 2, 4 elements each; output = buf[0..4)
  CollArgs a = args(CollType::ReduceScatter, buf.data(), buf.data(), 4);
  Error ok = run(a, 1, 2);
  EXPECT_EQ(ok.code(), cclxSuccess) << ok.what();
  EXPECT_EQ(fake.log, (std::vector<std::string>{"alloc", "ncclReduceScatter", "copy", "free"}));
  fake.log.clear();
  std::fill(buf.begin(), buf.end(), 5.0f);
  fake.result["ncclReduceScatter"] = ncclInternalError;
  Error e = run(a, 1, 2);
  EXPECT_EQ(e.code(), cclxNcclError);
  EXPECT_NE(std::string(e.what()).find("ncclReduceScatter failed: NCCL error 3"),
            std::string::npos);
  EXPECT_EQ(fake.log, (std::vector<std::string>{"alloc", "ncclReduceScatter", "free"}));
  for (float v : buf) EXPECT_EQ(v, 5.0f);
}

TEST_F(NcclFake, APremulSumOpIsDestroyedWhenTheCallFails) {
  fake.result["ncclAllReduce"] = ncclUnhandledCudaError;
  float buf[4] = {};
  CollArgs a = args(CollType::AllReduce, buf, buf, 4);
  a.op = ReduceOp::premulSum(0.5);
  Error e = run(a);
  EXPECT_EQ(e.code(), cclxNcclError);
  EXPECT_EQ(fake.count("ncclRedOpCreatePreMulSum"), 1u);
  EXPECT_EQ(fake.count("ncclRedOpDestroy(77)"), 1u);
}

TEST_F(NcclFake, InProgressThatSettlesSucceeds) {
  fake.result["ncclAllReduce"] = ncclInProgress;
  fake.inProgressPolls = 3;
  float buf[4] = {};
  Error e = run(args(CollType::AllReduce, buf, buf, 4));
  EXPECT_EQ(e.code(), cclxSuccess) << e.what();
  EXPECT_EQ(fake.polls, 4);
}

TEST_F(NcclFake, InProgressForeverTimesOutAtTheCallsDeadline) {
  fake.result["ncclAllReduce"] = ncclInProgress;
  fake.inProgressPolls = -1;
  float buf[4] = {};
  CollArgs a = args(CollType::AllReduce, buf, buf, 4);
  a.opts.timeout = std::chrono::milliseconds(200);
  const auto t0 = std::chrono::steady_clock::now();
  Error e = run(a);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e.code(), cclxTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("ncclAllReduce"), std::string::npos) << e.what();
  EXPECT_GE(s, 0.19);
  EXPECT_LT(s, 5.0);
}

TEST_F(NcclFake, AGroupEndInProgressForeverTimesOut) {
  fake.result["ncclGroupEnd"] = ncclInProgress;
  fake.inProgressPolls = -1;
  std::vector<float> in(4), out(4);
  CollArgs a = args(CollType::AllToAll, in.data(), out.data(), 2);
  a.opts.timeout = std::chrono::milliseconds(100);
  Error e = run(a, 0, 2);
  EXPECT_EQ(e.code(), cclxTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("ncclGroupEnd"), std::string::npos) << e.what();
  EXPECT_EQ(fake.count("ncclGroupEnd"), 1u);
}

TEST_F(NcclFake, InProgressThatSettlesOnAnErrorNamesTheCall) {
  fake.result["ncclAllGather"] = ncclInProgress;
  fake.inProgressPolls = 2;
  fake.settlesTo = ncclRemoteError;
  std::vector<float> in(2), out(4);
  Error e = run(args(CollType::AllGather, in.data(), out.data(), 2), 0, 2);
  EXPECT_EQ(e.code(), cclxNcclError) << e.what();
  EXPECT_NE(std::string(e.what()).find("ncclAllGather failed: NCCL error 6"), std::string::npos)
      << e.what();
}

TEST_F(NcclFake, ncclCheckPassesSuccessAndNamesFailures) {
  EXPECT_NO_THROW(ncclCheck(ncclSuccess, "ncclCommRegister", comm));
  try {
    ncclCheck(ncclInvalidArgument, "ncclCommRegister", nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxNcclError);
    // Without a comm there is no last error to add.
    EXPECT_EQ(std::string(e.what()).find("peer 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ncclCommRegister failed: NCCL error 4"),
              std::string::npos);
  }
}

// all_to_all_v_device through NCCL (alltoallv_device.cc): the host waits for the gathered split
// sizes by polling, so a gather that never completes ends at the call's deadline, an NCCL error
// and a comm failed elsewhere end the wait at once; the pending gather is announced (`queued`)
// before the wait; the marker is released on every path.
namespace {

struct DevCall {
  int64_t send[2] = {1, 1}, recv[2] = {1, 1};  // rows to / from ranks 0 and 1
  std::vector<float> in = std::vector<float>(6), out = std::vector<float>(6, 1.f);
  std::vector<int64_t> host = std::vector<int64_t>(ncclAllToAllVDeviceHostBytes(2) / 8);
  CollArgs a;
  DevCall() {
    a.type = CollType::AllToAllVDevice;
    a.send = in.data();
    a.recv = out.data();
    a.dtype = DataType::f32;
    a.rows.send = send;
    a.rows.recv = recv;
    a.rows.rowElems = 3;
    a.rows.sendCap = a.rows.recvCap = 2;
    a.opts.timeout = std::chrono::milliseconds(200);
  }
};

}  // namespace

TEST_F(NcclFake, DeviceSplitSizesThatNeverArriveTimeOutAtTheDeadline) {
  fake.markPolls = -1;  // the gather never completes (a peer stalls)
  DevCall c;
  int queued = 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ncclAllToAllVDevice(c.a, comm, 0, 2, &stream, c.host.data(), [&] { ++queued; });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("did not arrive within 200 ms"), std::string::npos)
        << e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 0.19);
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(queued, 1);  // shown to the watchdog before the wait
  EXPECT_GT(fake.markPolled, 1);
  EXPECT_EQ(fake.marksLive, 0);
  EXPECT_EQ(fake.count("ncclSend"), 0u);  // nothing after the gather
}

TEST_F(NcclFake, DeviceSplitSizesWaitEndsOnAnNcclError) {
  fake.markPolls = -1;
  fake.inProgressPolls = 0;
  fake.settlesTo = ncclRemoteError;  // the comm's asynchronous error, seen while waiting
  DevCall c;
  c.a.opts.timeout = std::chrono::seconds(60);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ncclAllToAllVDevice(c.a, comm, 0, 2, &stream, c.host.data());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxNcclError) << e.what();
    EXPECT_NE(std::string(e.what()).find("split sizes"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(fake.marksLive, 0);
}

TEST_F(NcclFake, DeviceSplitSizesWaitEndsWhenTheCommFails) {
  fake.markPolls = -1;
  DevCall c;
  c.a.opts.timeout = std::chrono::seconds(60);
  std::atomic<bool> failed{false};
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    failed = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ncclAllToAllVDevice(c.a, comm, 0, 2, &stream, c.host.data(), {}, &failed);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxAborted) << e.what();
  }
  watchdog.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST_F(NcclFake, DeviceSplitSizesThatAgreeRunTheExchange) {
  fake.gatherRanks = 2;  // both ranks published the same record: 1 row each way
  fake.markPolls = 3;
  DevCall c;
  ncclAllToAllVDevice(c.a, comm, 0, 2, &stream, c.host.data());
  EXPECT_EQ(fake.count("ncclAllGather"), 1u);
  EXPECT_EQ(fake.count("ncclSend"), 2u);
  EXPECT_EQ(fake.count("ncclRecv"), 2u);
  EXPECT_EQ(fake.marksLive, 0);
}

TEST_F(NcclFake, DeviceSplitSizesThatDisagreeFailAndPoison) {
  fake.gatherRanks = 2;
  DevCall c;
  c.send[1] = 2;  // rank 0 sends rank 1 two rows; rank 1 (the same record) expects one
  c.a.rows.sendCap = 3;
  try {
    ncclAllToAllVDevice(c.a, comm, 0, 2, &stream, c.host.data());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxInvalidUsage) << e.what();
  }
  for (float v : c.out) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(fake.count("ncclSend"), 0u);
}
