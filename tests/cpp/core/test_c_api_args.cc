// What fuzzing the C API (tests/fuzz/fuzz_capi.cc) found: enum values out of range, destroyed
// and unknown handles, misaligned and partly overlapping buffers, PreMulSum factors outside the
// data type, signed integer overflow. Each bad call fails with a code and a message and writes
// nothing; the valid neighbours of each work and give the reference result.
#include <gtest/gtest.h>

#include <cclx/cclx.h>

#include <cstdlib>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/settings/config.h"

namespace {

class CApiArgs : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("CCLX_SHM_CHUNK_BYTES", "4096", 1);  // counts span several staging chunks
    cclx::reloadConfig();
    cclxUniqueId id;
    ASSERT_EQ(cclxGetUniqueId(&id), cclxSuccess) << cclxGetLastError(nullptr);
    ASSERT_EQ(cclxCommInitRank(&comm_, 1, id, 0, -1), cclxSuccess) << cclxGetLastError(nullptr);
  }
  void TearDown() override {
    if (comm_) EXPECT_EQ(cclxCommDestroy(comm_), cclxSuccess) << cclxGetLastError(nullptr);
  }
  // The call fails with `code` and a message containing `words`.
  static void fails(cclxResult_t r, cclxResult_t code, const char* words) {
    EXPECT_EQ(r, code) << cclxGetLastError(nullptr);
    EXPECT_NE(std::string(cclxGetLastError(nullptr)).find(words), std::string::npos)
        << cclxGetLastError(nullptr);
  }
  cclxComm_t comm_ = nullptr;
};

// The enums are int-sized with every int a value (C's rule), so the checks of out-of-range
// values are not themselves undefined behaviour.
TEST_F(CApiArgs, EnumsTakeAnyIntAndOutOfRangeValuesAreRefused) {
  static_assert(std::is_same_v<std::underlying_type_t<cclxDataType_t>, int>);
  static_assert(std::is_same_v<std::underlying_type_t<cclxRedOp_t>, int>);
  static_assert(std::is_same_v<std::underlying_type_t<cclxResult_t>, int>);
  std::vector<float> in(8, 1.f), out(8, -1.f);
  for (int t : {-1, int(cclxNumTypes), 0x7fffffff, int(0x80000000u)})
    fails(cclxAllReduce(in.data(), out.data(), 8, cclxDataType_t(t), cclxSum, comm_, nullptr),
          cclxInvalidArgument, "datatype");
  for (int op : {-1, int(cclxNumOps), 0x7fffffff})
    fails(cclxAllReduce(in.data(), out.data(), 8, cclxFloat32, cclxRedOp_t(op), comm_, nullptr),
          cclxInvalidArgument, "reduction op");
  EXPECT_EQ(out, std::vector<float>(8, -1.f));
}

// A destroyed or aborted handle stays known: every call on it fails (a second destroy too),
// never touching freed memory; a pointer no init returned is refused.
TEST_F(CApiArgs, DestroyedAndUnknownHandlesAreErrors) {
  cclxUniqueId id;
  ASSERT_EQ(cclxGetUniqueId(&id), cclxSuccess);
  cclxComm_t dead = nullptr, aborted = nullptr;
  ASSERT_EQ(cclxCommInitRank(&dead, 1, id, 0, -1), cclxSuccess) << cclxGetLastError(nullptr);
  ASSERT_EQ(cclxCommDestroy(dead), cclxSuccess);
  ASSERT_EQ(cclxGetUniqueId(&id), cclxSuccess);
  ASSERT_EQ(cclxCommInitRank(&aborted, 1, id, 0, -1), cclxSuccess) << cclxGetLastError(nullptr);
  ASSERT_EQ(cclxCommAbort(aborted), cclxSuccess);
  std::vector<int32_t> in(4, 7), out(4, 0);
  int n = -1;
  for (cclxComm_t c : {dead, aborted}) {
    fails(cclxAllReduce(in.data(), out.data(), 4, cclxInt32, cclxSum, c, nullptr),
          cclxInvalidUsage, "destroyed or aborted");
    fails(cclxCommCount(c, &n), cclxInvalidUsage, "destroyed or aborted");
    fails(cclxBarrier(c, nullptr), cclxInvalidUsage, "destroyed or aborted");
    cclxRedOp_t op;
    fails(cclxRedOpCreatePreMulSum(&op, 2.0, c), cclxInvalidUsage, "destroyed or aborted");
    fails(cclxCommDestroy(c), cclxInvalidUsage, "already destroyed");
    EXPECT_EQ(cclxCommAbort(c), cclxSuccess);  // nothing left to abort
  }
  EXPECT_EQ(out, std::vector<int32_t>(4, 0));
  EXPECT_EQ(n, -1);
  alignas(64) static char notAComm[256] = {};
  cclxComm_t fake = reinterpret_cast<cclxComm_t>(notAComm);
  fails(cclxCommCount(fake, &n), cclxInvalidArgument, "not made by cclxCommInitRank");
  fails(cclxCommDestroy(fake), cclxInvalidArgument, "not made by cclxCommInitRank");
  fails(cclxCommAbort(fake), cclxInvalidArgument, "not made by cclxCommInitRank");
  // The live comm is untouched.
  ASSERT_EQ(cclxAllReduce(in.data(), out.data(), 4, cclxInt32, cclxSum, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(out, in);
}

// Buffers at any address work: a reduction's misaligned buffers go through aligned temporaries
// (they were accessed as misaligned elements, undefined behaviour), data movement copies bytes.
TEST_F(CApiArgs, MisalignedBuffersWork) {
  std::vector<char> a(40000), b(40000, 0x55);
  for (size_t i = 0; i < a.size(); ++i) a[i] = char(i * 7 + 1);
  std::vector<float> f(3001);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(i % 97) - 40.f;
  std::memcpy(a.data() + 1, f.data(), f.size() * 4);
  ASSERT_EQ(cclxAllReduce(a.data() + 1, b.data() + 3, 3001, cclxFloat32, cclxSum, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(std::memcmp(a.data() + 1, b.data() + 3, 3001 * 4), 0);
  ASSERT_EQ(cclxReduceScatter(a.data() + 1, b.data() + 6, 3001, cclxFloat32, cclxMax, comm_,
                              nullptr), cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(std::memcmp(a.data() + 1, b.data() + 6, 3001 * 4), 0);
  ASSERT_EQ(cclxReduce(a.data() + 2, b.data() + 1, 1500, cclxInt64, cclxMin, 0, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(std::memcmp(a.data() + 2, b.data() + 1, 1500 * 8), 0);
  // In place at an odd address.
  std::vector<char> c(a);
  ASSERT_EQ(cclxAllReduce(c.data() + 1, c.data() + 1, 3001, cclxFloat32, cclxSum, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(c, a);
  ASSERT_EQ(cclxBroadcast(a.data() + 1, b.data() + 3, 100, cclxFloat32, 0, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(std::memcmp(a.data() + 1, b.data() + 3, 400), 0);
  ASSERT_EQ(cclxAllGather(a.data() + 5, b.data() + 1, 33, cclxFloat64, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(std::memcmp(a.data() + 5, b.data() + 1, 264), 0);
}

// Input and output that overlap other than in place: the result is that of the input as it was
// (the host algorithms wrote output chunks over input not yet read; found by fuzzing:
// memcpy-param-overlap). Counts span several staging chunks (CCLX_SHM_CHUNK_BYTES=4096).
TEST_F(CApiArgs, PartlyOverlappingBuffersGiveTheResultOfTheInput) {
  const size_t n = 3000;
  for (long shift : {4L, -4L, 1001L}) {
    std::vector<float> v(2 * n + 2000);
    const size_t base = 1000;
    auto reset = [&] {
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 251) + 0.25f;
    };
    reset();
    const std::vector<float> orig = v;
    float* send = v.data() + base;
    float* recv = send + shift;
    const std::vector<float> want(orig.begin() + base, orig.begin() + base + n);
    auto got = [&] { return std::vector<float>(recv, recv + n); };
    ASSERT_EQ(cclxAllToAll(send, recv, n, cclxFloat32, comm_, nullptr), cclxSuccess)
        << cclxGetLastError(nullptr);
    EXPECT_EQ(got(), want) << "all-to-all, shift " << shift;
    reset();
    ASSERT_EQ(cclxAllGather(send, recv, n, cclxFloat32, comm_, nullptr), cclxSuccess)
        << cclxGetLastError(nullptr);
    EXPECT_EQ(got(), want) << "all-gather, shift " << shift;
    reset();
    ASSERT_EQ(cclxAllReduce(send, recv, n, cclxFloat32, cclxSum, comm_, nullptr), cclxSuccess)
        << cclxGetLastError(nullptr);
    EXPECT_EQ(got(), want) << "allreduce, shift " << shift;
    reset();
    ASSERT_EQ(cclxReduceScatter(send, recv, n, cclxFloat32, cclxSum, comm_, nullptr),
              cclxSuccess) << cclxGetLastError(nullptr);
    EXPECT_EQ(got(), want) << "reduce-scatter, shift " << shift;
    reset();
    ASSERT_EQ(cclxBroadcast(send, recv, n, cclxFloat32, 0, comm_, nullptr), cclxSuccess)
        << cclxGetLastError(nullptr);
    EXPECT_EQ(got(), want) << "broadcast, shift " << shift;
  }
}

// A PreMulSum factor is converted to the type the reduction accumulates in: one outside that
// type is refused at the call (the conversion was undefined).
TEST_F(CApiArgs, PreMulSumFactorOutsideTheTypeIsRefused) {
  cclxRedOp_t huge, negative;
  ASSERT_EQ(cclxRedOpCreatePreMulSum(&huge, 1e300, comm_), cclxSuccess);
  ASSERT_EQ(cclxRedOpCreatePreMulSum(&negative, -3.0, comm_), cclxSuccess);
  std::vector<char> in(256, 2), out(256, 0);
  for (cclxDataType_t t : {cclxInt8, cclxInt32, cclxUint64, cclxFloat32, cclxBfloat16})
    fails(cclxAllReduce(in.data(), out.data(), 8, t, huge, comm_, nullptr), cclxInvalidArgument,
          "outside the range");
  for (cclxDataType_t t : {cclxUint8, cclxUint32, cclxUint64})
    fails(cclxAllReduce(in.data(), out.data(), 8, t, negative, comm_, nullptr),
          cclxInvalidArgument, "outside the range");
  EXPECT_EQ(out, std::vector<char>(256, 0));
  // In range: the result is the factor times the input.
  std::vector<double> d(4, 2.0), dout(4, 0.0);
  ASSERT_EQ(cclxAllReduce(d.data(), dout.data(), 4, cclxFloat64, huge, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(dout, std::vector<double>(4, 2e300));
  std::vector<int32_t> i(4, 5), iout(4, 0);
  ASSERT_EQ(cclxAllReduce(i.data(), iout.data(), 4, cclxInt32, negative, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  EXPECT_EQ(iout, std::vector<int32_t>(4, -15));
  EXPECT_EQ(cclxRedOpDestroy(huge, comm_), cclxSuccess);
  EXPECT_EQ(cclxRedOpDestroy(negative, comm_), cclxSuccess);
}

// Integer sums and products wrap around (two's complement), as NCCL's: with one rank the
// PreMulSum's product is the only arithmetic, and it overflows here.
TEST_F(CApiArgs, SignedIntegerArithmeticWraps) {
  cclxRedOp_t three;
  ASSERT_EQ(cclxRedOpCreatePreMulSum(&three, 3.0, comm_), cclxSuccess);
  std::vector<int64_t> in = {INT64_MAX, INT64_MIN, INT64_MAX / 2 + 7, -1}, out(4, 0);
  ASSERT_EQ(cclxAllReduce(in.data(), out.data(), 4, cclxInt64, three, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  for (size_t k = 0; k < in.size(); ++k)
    EXPECT_EQ(out[k], int64_t(uint64_t(in[k]) * 3u)) << k;
  std::vector<int32_t> in32 = {INT32_MAX, INT32_MIN + 1}, out32(2, 0);
  ASSERT_EQ(cclxAllReduce(in32.data(), out32.data(), 2, cclxInt32, three, comm_, nullptr),
            cclxSuccess) << cclxGetLastError(nullptr);
  for (size_t k = 0; k < in32.size(); ++k)
    EXPECT_EQ(out32[k], int32_t(uint32_t(in32[k]) * 3u)) << k;
  EXPECT_EQ(cclxRedOpDestroy(three, comm_), cclxSuccess);
}

}  // namespace
