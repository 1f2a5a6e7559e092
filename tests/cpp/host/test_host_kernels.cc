// Single-process tests of the host reduction loops and the range splitter, against the
// independent references of helpers/host_util.h.
#include <gtest/gtest.h>

#include <vector>

#include "helpers/host_util.h"
#include "host/algos/reduce_kernels.h"
#include "host/shm.h"

using namespace cclx;
using namespace hosttest;

TEST(HostKernels, SplitRangeCoversEveryCount) {
  for (size_t count : {0ul, 1ul, 2ul, 3ul, 7ul, 8ul, 9ul, 1023ul, 4099ul}) {
    for (int n = 1; n <= 8; ++n) {
      size_t next = 0, mn = ~0ul, mx = 0;
      for (int i = 0; i < n; ++i) {
        Range r = splitRange(count, n, i);
        ASSERT_EQ(r.begin, next) << count << " " << n << " " << i;
        ASSERT_LE(r.begin, r.end);
        next = r.end;
        mn = std::min(mn, r.size());
        mx = std::max(mx, r.size());
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(mx - mn, 1u);
    }
  }
}

TEST(HostKernels, ReduceIntoMatchesReferenceForEveryDtypeAndOp) {
  const size_t count = 1023;
  for (DataType t : allDtypes()) {
    for (ReduceOp op : opsFor(t)) {
      for (int n : {1, 3, 8}) {
        const size_t es = esize(t);
        std::vector<std::vector<char>> in(size_t(n), std::vector<char>(count * es));
        std::vector<const void*> srcs;
        for (int r = 0; r < n; ++r) {
          fillInput(in[size_t(r)].data(), t, op.kind, 11, r, count);
          srcs.push_back(in[size_t(r)].data());
        }
        std::vector<char> out(count * es, char(kPoison));
        reduceInto(out.data(), srcs.data(), n, count, t, op, n);
        std::string err = checkReduced(t, op, 11, n, out.data(), count);
        EXPECT_EQ(err, "") << dtypeName(t) << " " << opName(op.kind) << " n=" << n;
        // In place: the destination is the first source.
        reduceInto(in[0].data(), srcs.data(), n, count, t, op, n);
        EXPECT_EQ(std::memcmp(in[0].data(), out.data(), out.size()), 0)
            << "in-place differs: " << dtypeName(t) << " " << opName(op.kind);
      }
    }
  }
}

TEST(HostKernels, ReduceIntoRejectsUndefinedPairs) {
  std::vector<float> a(4, 1.0f);
  const void* srcs[1] = {a.data()};
  try {
    reduceInto(a.data(), srcs, 1, 4, DataType::f32, RedOpKind::BAND, 1);
    FAIL() << "BAND on f32 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxInvalidArgument);
  }
  try {
    reduceInto(a.data(), srcs, 1, 4, DataType::fp8_e4m3, RedOpKind::SUM, 1);
    FAIL() << "SUM on fp8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxInvalidArgument);
  }
}

TEST(HostKernels, SixteenBitFloatsRoundOnceAfterFloatAccumulation) {
  // 1 + 4 x 2^-9 in bf16 (ulp at 1 is 2^-7): rounding after every add would stay at 1;
  // accumulating in float gives 1 + 2^-7, exactly representable.
  const uint16_t one = 0x3f80, tiny = 0x3b00;  // 1.0, 2^-9
  std::vector<uint16_t> a{one}, b{tiny}, out{0};
  const void* srcs[5] = {a.data(), b.data(), b.data(), b.data(), b.data()};
  reduceInto(out.data(), srcs, 5, 1, DataType::bf16, RedOpKind::SUM, 5);
  EXPECT_EQ(decodeBf16(out[0]), 1.0 + 1.0 / 128);
}
