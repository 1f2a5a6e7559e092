// The C API: a multi-process allreduce through cclxCommInitRank, PREMUL_SUM ops, error codes
// and messages, and that failed calls write nothing.
#include <gtest/gtest.h>

#include <cclx/cclx.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "helpers/mp.h"

using namespace std::chrono_literals;

namespace {

std::vector<double> input(int rank, size_t n) {
  std::mt19937_64 g(1234 + uint64_t(rank));
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

#define C_OK(call)                                                                            \
  do {                                                                                        \
    cclxResult_t rc_ = (call);                                                                \
    MP_CHECK(rc_ == cclxSuccess, "%s -> %s (%s)", #call, cclxGetErrorString(rc_),             \
             cclxGetLastError(nullptr));                                                      \
  } while (0)
#define C_FAILS(code, call)                                                                   \
  do {                                                                                        \
    cclxResult_t rc_ = (call);                                                                \
    MP_CHECK(rc_ == (code), "%s -> %d, want %d", #call, int(rc_), int(code));                 \
    MP_CHECK(std::strlen(cclxGetLastError(nullptr)) > 0, "%s: no error message", #call);     \
  } while (0)

TEST(CApi, AllReduceAcrossProcesses) {
  auto res = cclx::test::runRanks(2, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    cclxUniqueId id;
    if (rank == 0) {
      C_OK(cclxGetUniqueId(&id));
      store->set("uid", std::string(id.internal, sizeof(id.internal)));
    } else {
      std::string s = store->get("uid", 30s);
      MP_CHECK(s.size() == sizeof(id.internal));
      std::memcpy(id.internal, s.data(), sizeof(id.internal));
    }
    cclxConfig_t cfg = CCLX_CONFIG_INITIALIZER;
    cfg.name = "c-api";
    cfg.timeout_ms = 30000;
    cclxComm_t comm = nullptr;
    C_OK(cclxCommInitRankConfig(&comm, size, id, rank, -1, &cfg));
    int n = -1, r = -1, dev = 7;
    C_OK(cclxCommCount(comm, &n));
    C_OK(cclxCommUserRank(comm, &r));
    C_OK(cclxCommCuDevice(comm, &dev));
    MP_CHECK(n == size && r == rank && dev == -1, "count %d rank %d device %d", n, r, dev);

    const size_t count = 3000;
    std::vector<double> in = input(rank, count), out(count, -99.0);
    C_OK(cclxAllReduce(in.data(), out.data(), count, cclxFloat64, cclxSum, comm, nullptr));
    std::vector<double> a = input(0, count), b = input(1, count);
    for (size_t i = 0; i < count; ++i)
      MP_CHECK(out[i] == a[i] + b[i], "sum element %zu: %g vs %g", i, out[i], a[i] + b[i]);

    cclxRedOp_t half;
    C_OK(cclxRedOpCreatePreMulSum(&half, 0.5, comm));
    MP_CHECK(int(half) >= int(cclxNumOps), "dynamic op id %d", int(half));
    std::fill(out.begin(), out.end(), -99.0);
    C_OK(cclxAllReduce(in.data(), out.data(), count, cclxFloat64, half, comm, nullptr));
    for (size_t i = 0; i < count; ++i)
      MP_CHECK(std::fabs(out[i] - 0.5 * (a[i] + b[i])) < 1e-12, "premul element %zu", i);
    C_OK(cclxRedOpDestroy(half, comm));

    // Failures: right code, a message, nothing written.
    std::fill(out.begin(), out.end(), -99.0);
    C_FAILS(cclxInvalidArgument, cclxRedOpDestroy(half, comm));
    C_FAILS(cclxInvalidArgument,
            cclxAllReduce(in.data(), out.data(), count, cclxFloat64, half, comm, nullptr));
    C_FAILS(cclxInvalidArgument,
            cclxAllReduce(in.data(), out.data(), count, cclxFloat64, cclxPremulSum, comm, nullptr));
    C_FAILS(cclxInvalidArgument,
            cclxAllReduce(in.data(), out.data(), count, cclxFloat64, cclxBand, comm, nullptr));
    C_FAILS(cclxInvalidArgument, cclxAllReduce(in.data(), out.data(), count,
                                               cclxDataType_t(77), cclxSum, comm, nullptr));
    C_FAILS(cclxInvalidArgument,
            cclxAllReduce(in.data(), out.data(), count, cclxFloat64, cclxSum, nullptr, nullptr));
    C_FAILS(cclxInvalidArgument,
            cclxBroadcast(in.data(), out.data(), count, cclxFloat64, 5, comm, nullptr));
    C_FAILS(cclxInvalidArgument, cclxSend(in.data(), count, cclxFloat64, rank, comm, nullptr));
    C_FAILS(cclxInvalidArgument, cclxRedOpCreatePreMulSum(&half, NAN, comm));
    for (double x : out) MP_CHECK(x == -99.0, "a failed call wrote its output");

    // Other collectives through the C API.
    std::vector<double> gathered(count * size_t(size), -99.0);
    C_OK(cclxAllGather(in.data(), gathered.data(), count, cclxFloat64, comm, nullptr));
    MP_CHECK(gathered[count + 5] == b[5] && gathered[5] == a[5]);
    C_OK(cclxBarrier(comm, nullptr));
    std::vector<double> bc(16, -99.0);
    C_OK(cclxBroadcast(in.data(), bc.data(), 16, cclxFloat64, 1, comm, nullptr));
    MP_CHECK(bc[3] == b[3]);
    if (rank == 0) C_OK(cclxSend(in.data(), 8, cclxFloat64, 1, comm, nullptr));
    else {
      std::vector<double> got(8, -99.0);
      C_OK(cclxRecv(got.data(), 8, cclxFloat64, 0, comm, nullptr));
      MP_CHECK(got[7] == a[7]);
    }
    // Grouped point to point: both ranks list the send first; each also sends to itself.
    {
      const int peer = 1 - rank;
      std::vector<double> fromPeer(count, -99.0), fromSelf(count, -99.0);
      cclxP2PMessage sends[2] = {{peer, in.data(), count}, {rank, in.data(), count}};
      cclxP2PMessage recvs[2] = {{rank, fromSelf.data(), count}, {peer, fromPeer.data(), count}};
      C_OK(cclxGroupSendRecv(sends, 2, recvs, 2, cclxFloat64, comm, nullptr));
      const std::vector<double>& theirs = rank == 0 ? b : a;
      MP_CHECK(fromPeer == theirs && fromSelf == in, "cclxGroupSendRecv data");
      C_FAILS(cclxInvalidArgument, cclxGroupSendRecv(nullptr, 1, recvs, 0, cclxFloat64, comm, nullptr));
      C_FAILS(cclxInvalidArgument, cclxGroupSendRecv(sends, -1, recvs, 0, cclxFloat64, comm, nullptr));
      cclxP2PMessage badPeer = {size, fromPeer.data(), 1};
      C_FAILS(cclxInvalidArgument, cclxGroupSendRecv(nullptr, 0, &badPeer, 1, cclxFloat64, comm, nullptr));
      C_OK(cclxGroupSendRecv(nullptr, 0, nullptr, 0, cclxFloat64, comm, nullptr));  // nothing to do
    }

    cclxResult_t async = cclxInternalError;
    C_OK(cclxCommGetAsyncError(comm, &async));
    MP_CHECK(async == cclxSuccess);
    C_OK(cclxCommFinalize(comm));
    C_FAILS(cclxInvalidUsage,
            cclxAllReduce(in.data(), out.data(), count, cclxFloat64, cclxSum, comm, nullptr));
    C_OK(cclxCommDestroy(comm));
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(CApi, InitFromEnvironment) {
  int port;
  {
    auto probe = cclx::TcpStore::create("127.0.0.1", 0, true, "probe", 5s);
    port = probe->port();
  }
  auto res = cclx::test::runRanks(2, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
    unsetenv("TORCHCOMM_RANK");
    unsetenv("TORCHCOMM_SIZE");
    cclxComm_t comm = nullptr;
    C_OK(cclxCommInitFromEnv(&comm, -1, nullptr));
    std::vector<int32_t> in(10, rank + 2), out(10, 0);
    C_OK(cclxAllReduce(in.data(), out.data(), 10, cclxInt32, cclxProd, comm, nullptr));
    MP_CHECK(out[9] == 6, "product %d", out[9]);
    C_OK(cclxCommFinalize(comm));
    C_OK(cclxCommDestroy(comm));
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(CApi, ErrorsWithoutPeers) {
  cclxUniqueId id;
  std::memset(&id, 0, sizeof(id));
  std::strcpy(id.internal, "garbage");
  cclxComm_t comm = nullptr;
  EXPECT_EQ(cclxCommInitRank(&comm, 2, id, 0, -1), cclxInvalidArgument);
  EXPECT_NE(std::string(cclxGetLastError(nullptr)).find("cclxUniqueId"), std::string::npos);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(cclxGetUniqueId(nullptr), cclxInvalidArgument);
  ASSERT_EQ(cclxGetUniqueId(&id), cclxSuccess);
  EXPECT_EQ(std::strlen(cclxGetLastError(nullptr)), 0u);
  EXPECT_EQ(cclxCommInitRank(&comm, 2, id, 2, -1), cclxInvalidArgument);
  EXPECT_EQ(cclxCommInitRank(nullptr, 2, id, 0, -1), cclxInvalidArgument);
  EXPECT_EQ(cclxCommInitRank(&comm, 0, id, 0, -1), cclxInvalidArgument);
  cclxConfig_t cfg = CCLX_CONFIG_INITIALIZER;
  cfg.size = 3;
  EXPECT_EQ(cclxCommInitRankConfig(&comm, 1, id, 0, -1, &cfg), cclxInvalidArgument);
  cfg = CCLX_CONFIG_INITIALIZER;
  cfg.backend = "nccl";
  EXPECT_EQ(cclxCommInitRankConfig(&comm, 1, id, 0, -1, &cfg), cclxInvalidArgument);
  EXPECT_NE(std::string(cclxGetLastError(nullptr)).find("CUDA device"), std::string::npos);
  // A missing rank is a timeout naming it.
  cfg = CCLX_CONFIG_INITIALIZER;
  cfg.timeout_ms = 500;
  EXPECT_EQ(cclxCommInitRankConfig(&comm, 2, id, 0, -1, &cfg), cclxTimeout);
  EXPECT_NE(std::string(cclxGetLastError(nullptr)).find("rank(s) 1 "), std::string::npos)
      << cclxGetLastError(nullptr);
  EXPECT_EQ(comm, nullptr);
  int v = 0;
  EXPECT_EQ(cclxGetVersion(&v), cclxSuccess);
  EXPECT_EQ(v, CCLX_VERSION_CODE);
  int x;
  EXPECT_EQ(cclxCommCount(nullptr, &x), cclxInvalidArgument);
  EXPECT_EQ(cclxCommDestroy(nullptr), cclxSuccess);
  EXPECT_EQ(cclxCommAbort(nullptr), cclxSuccess);
}

TEST(CApi, SingleRankCommAndAbort) {
  cclxUniqueId id;
  ASSERT_EQ(cclxGetUniqueId(&id), cclxSuccess);
  cclxComm_t comm = nullptr;
  ASSERT_EQ(cclxCommInitRank(&comm, 1, id, 0, -1), cclxSuccess) << cclxGetLastError(nullptr);
  std::vector<int32_t> in = {3, -4, 5}, out(3, 0);
  ASSERT_EQ(cclxAllReduce(in.data(), out.data(), 3, cclxInt32, cclxMax, comm, nullptr), cclxSuccess)
      << cclxGetLastError(nullptr);
  EXPECT_EQ(out, in);
  EXPECT_EQ(cclxCommAbort(comm), cclxSuccess);
}

TEST(CApi, ErrorStrings) {
  std::set<std::string> seen;
  for (int r = 0; r < cclxNumResults; ++r) {
    const char* s = cclxGetErrorString(cclxResult_t(r));
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(seen.insert(s).second) << s;
  }
  EXPECT_NE(std::string(cclxGetErrorString(cclxTimeout)).find("cclxTimeout"), std::string::npos);
  EXPECT_NE(cclxGetErrorString(cclxResult_t(999)), nullptr);
}

}  // namespace

// Registration on a CPU comm is checked and tracked; the shareable-memory allocator needs CUDA.
TEST(CApi, RegistrationAndAllocator) {
  cclxUniqueId id;
  ASSERT_EQ(cclxGetUniqueId(&id), cclxSuccess);
  cclxComm_t comm = nullptr;
  ASSERT_EQ(cclxCommInitRank(&comm, 1, id, 0, -1), cclxSuccess) << cclxGetLastError(nullptr);
  std::vector<float> buf(101, 1.5f);
  EXPECT_EQ(cclxCommRegister(comm, buf.data(), 404), cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(cclxCommRegister(comm, buf.data(), 404), cclxInvalidArgument);
  EXPECT_NE(std::string(cclxGetLastError(nullptr)).find("already registered"), std::string::npos);
  EXPECT_EQ(cclxCommRegister(comm, nullptr, 4), cclxInvalidArgument);
  EXPECT_EQ(cclxCommRegister(comm, buf.data() + 1, 0), cclxInvalidArgument);
  EXPECT_EQ(cclxCommDeregister(comm, buf.data(), 400), cclxInvalidArgument);
  EXPECT_EQ(cclxCommDeregister(comm, buf.data() + 1, 4), cclxInvalidArgument);
  std::vector<float> out(101, 0.f);
  ASSERT_EQ(cclxAllReduce(buf.data(), out.data(), 101, cclxFloat32, cclxSum, comm, nullptr),
            cclxSuccess);
  EXPECT_EQ(out, buf);
  EXPECT_EQ(cclxCommDeregister(comm, buf.data(), 404), cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(cclxCommDeregister(comm, buf.data(), 404), cclxInvalidArgument);
  EXPECT_EQ(cclxCommRegister(comm, buf.data(), 404), cclxSuccess);  // again, left to finalize
  EXPECT_EQ(cclxCommFinalize(comm), cclxSuccess);
  EXPECT_EQ(cclxCommRegister(comm, out.data(), 4), cclxInvalidUsage);
  EXPECT_EQ(cclxCommDestroy(comm), cclxSuccess);

  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(cclxMemAlloc(nullptr, 64), cclxInvalidArgument);
  EXPECT_EQ(cclxMemFree(nullptr), cclxSuccess);
  const cclxResult_t r = cclxMemAlloc(&p, 64);
  if (r == cclxSuccess) {  // a GPU with the VMM API
    EXPECT_NE(p, nullptr);
    EXPECT_EQ(cclxMemFree(static_cast<char*>(p) + 256), cclxInvalidArgument);
    EXPECT_EQ(cclxMemFree(p), cclxSuccess) << cclxGetLastError(nullptr);
    void* t = cclxTorchAlloc(3 << 20, 0, nullptr);
    EXPECT_NE(t, nullptr);
    cclxTorchFree(t, 3 << 20, 0, nullptr);
    EXPECT_EQ(cclxMemFree(t), cclxInvalidArgument);  // already freed: no longer mapped
  } else {  // a build without CUDA, or no usable GPU: an error with its reason, no pointer
    EXPECT_TRUE(r == cclxUnsupported || r == cclxCudaError) << r;
    EXPECT_GT(std::strlen(cclxGetLastError(nullptr)), 0u);
    EXPECT_EQ(p, reinterpret_cast<void*>(1));
    EXPECT_EQ(cclxTorchAlloc(64, 0, nullptr), nullptr);
  }
}
