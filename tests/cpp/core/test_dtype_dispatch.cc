// gpu/device/dtype_dispatch.h on the host: every dtype of a kernel's list reaches the matching
// element type, and any other dtype throws cclxInternalError naming the dtype and the kernel
// (never a silent fallback to another type); and the DDA reduce instances' op table
// (kDdaInstanceOps, ddaKernelDtype).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "gpu/device/dtype_dispatch.h"

using namespace cclx;

namespace {

template <class List>
std::string nameOf(List list, DataType t) {
  return dev::dispatchDtype(list, t, "test", [&]<class T>() { return dtypeName(dev::DtypeOf<T>::value); });
}

void expectRefused(auto list, DataType t, const char* kernel) {
  try {
    dev::dispatchDtype(list, t, kernel, [&]<class T>() { FAIL() << "ran as " << typeid(T).name(); });
    FAIL() << "no error for " << dtypeName(t);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), cclxInternalError);
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dtypeName(t)), std::string::npos) << msg;
    EXPECT_NE(msg.find(kernel), std::string::npos) << msg;
  }
}

const DataType kAll[] = {DataType::f32, DataType::f64, DataType::f16,  DataType::bf16,
                         DataType::i8,  DataType::u8,  DataType::i32,  DataType::i64,
                         DataType::u32, DataType::u64, DataType::fp8_e4m3, DataType::fp8_e5m2};

}  // namespace

TEST(DtypeDispatch, EveryListedDtypeReachesItsType) {
  for (DataType t : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i8,
                     DataType::u8, DataType::i32, DataType::i64, DataType::u32, DataType::u64})
    EXPECT_STREQ(nameOf(dev::DdaTypes{}, t).c_str(), dtypeName(t));
  for (DataType t : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16})
    EXPECT_STREQ(nameOf(dev::LamportTypes{}, t).c_str(), dtypeName(t));
  for (DataType t : {DataType::f32, DataType::f16, DataType::bf16})
    EXPECT_STREQ(nameOf(dev::RowTypes{}, t).c_str(), dtypeName(t));
}

TEST(DtypeDispatch, AnyOtherDtypeIsAnInternalErrorNamingDtypeAndKernel) {
  int refused = 0;
  for (DataType t : kAll) {
    if (t != DataType::fp8_e4m3 && t != DataType::fp8_e5m2) continue;
    expectRefused(dev::DdaTypes{}, t, "DDA flat allreduce");
    ++refused;
  }
  for (DataType t : kAll) {
    if (t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16)
      continue;
    expectRefused(dev::LamportTypes{}, t, "DDA Lamport allreduce");  // no bf16 fallback
    ++refused;
  }
  for (DataType t : kAll) {
    if (t == DataType::f32 || t == DataType::f16 || t == DataType::bf16) continue;
    expectRefused(dev::RowTypes{}, t, "fused one-shot");
    ++refused;
  }
  EXPECT_EQ(refused, 2 + 8 + 9);
}

TEST(DtypeDispatch, ReturnsWhatTheChosenInstanceReturns) {
  const size_t s = dev::dispatchDtype(dev::RowTypes{}, DataType::bf16, "test",
                                      [&]<class T>() { return sizeof(T); });
  EXPECT_EQ(s, 2u);
}

namespace {

const DataType kDda[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i8,
                         DataType::u8,  DataType::i32, DataType::i64, DataType::u32,  DataType::u64};
const RedOpKind kOps[] = {RedOpKind::SUM, RedOpKind::PRODUCT, RedOpKind::MIN,
                          RedOpKind::MAX, RedOpKind::AVG,     RedOpKind::BAND,
                          RedOpKind::BOR, RedOpKind::BXOR,    RedOpKind::PREMUL_SUM};

bool isFloat(DataType t) {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}
bool isSignedInt(DataType t) { return t == DataType::i8 || t == DataType::i32 || t == DataType::i64; }
bool bitwise(RedOpKind op) {
  return op == RedOpKind::BAND || op == RedOpKind::BOR || op == RedOpKind::BXOR;
}
uint32_t instanceOps(DataType t) {
  return dev::dispatchDtype(dev::DdaTypes{}, t, "test",
                            [&]<class T>() { return dev::kDdaInstanceOps<T>; });
}

}  // namespace

// Every (dtype, op) of the DDA reduce kernels reaches an instance with a body for the op (the
// device's dispatchOp traps otherwise), of the same element size and kind; only a signed integer
// type's PRODUCT and bitwise ops move, to the unsigned type of its width.
TEST(DtypeDispatch, EveryDdaOpRunsOnAnInstanceWithItsBody) {
  int moved = 0, pairs = 0;
  for (DataType t : kDda) {
    for (RedOpKind op : kOps) {
      if (bitwise(op) && isFloat(t)) continue;  // not a DDA op (ddaOpSupported)
      ++pairs;
      const DataType k = dev::ddaKernelDtype(t, op);
      SCOPED_TRACE(std::string(dtypeName(t)) + " op " + std::to_string(int(op)) + " on " +
                   dtypeName(k));
      EXPECT_EQ(dtypeSize(k), dtypeSize(t));
      EXPECT_EQ(isFloat(k), isFloat(t));
      EXPECT_NE(instanceOps(k) & dev::opBit(op), 0u);
      if (k != t) {
        ++moved;
        EXPECT_TRUE(isSignedInt(t));
        EXPECT_TRUE(op == RedOpKind::PRODUCT || bitwise(op));
      }
    }
  }
  EXPECT_EQ(pairs, 4 * 6 + 6 * 9);
  EXPECT_EQ(moved, 3 * 4);
}

// The bodies a DDA reduce kernel instantiates per alignment: SUM (which also runs AVG and
// PREMUL_SUM), MIN, MAX, PRODUCT unless signed, the bitwise ops for unsigned integers: 46 where one
// body per (dtype, op) would be 78.
TEST(DtypeDispatch, DdaInstancesHaveOneBodyPerDistinctOp) {
  const uint32_t folded = dev::opBit(RedOpKind::AVG) | dev::opBit(RedOpKind::PREMUL_SUM);
  int bodies = 0;
  for (DataType t : kDda) {
    const uint32_t ops = instanceOps(t);
    EXPECT_EQ(ops & folded, folded) << dtypeName(t);  // SUM's body computes them
    bodies += __builtin_popcount(ops & ~folded);
  }
  EXPECT_EQ(bodies, 4 * 4 + 3 * 7 + 3 * 3);
}

namespace {

// Reduces n values of signed S in rank order with math::combine<Op> on S and on the unsigned type
// of its width (the instance ddaKernelDtype launches); the bits must agree.
template <class S, RedOpKind Op>
void expectUnsignedTwinBits(std::mt19937_64& g) {
  using U = std::make_unsigned_t<S>;
  const S edge[] = {std::numeric_limits<S>::min(), std::numeric_limits<S>::max(), S(-1), S(0), S(1)};
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 2 + trial % 7;
    S s{};
    U u{};
    for (int r = 0; r < n; ++r) {
      const uint64_t bits = g();
      S v;
      if (trial % 5 == 0) v = edge[bits % 5];
      else std::memcpy(&v, &bits, sizeof v);
      U w;
      std::memcpy(&w, &v, sizeof v);
      s = r == 0 ? v : math::combine<Op, S>(s, v);
      u = r == 0 ? w : math::combine<Op, U>(u, w);
    }
    ASSERT_EQ(std::memcmp(&s, &u, sizeof s), 0) << "trial " << trial << " op " << int(Op);
  }
}

template <class S>
void expectTwinBitsAllOps(std::mt19937_64& g) {
  expectUnsignedTwinBits<S, RedOpKind::PRODUCT>(g);
  expectUnsignedTwinBits<S, RedOpKind::BAND>(g);
  expectUnsignedTwinBits<S, RedOpKind::BOR>(g);
  expectUnsignedTwinBits<S, RedOpKind::BXOR>(g);
}

}  // namespace

TEST(DtypeDispatch, SignedOpsOnTheUnsignedInstanceGiveTheSameBits) {
  std::mt19937_64 g(20261207);
  expectTwinBitsAllOps<int8_t>(g);
  expectTwinBitsAllOps<int32_t>(g);
  expectTwinBitsAllOps<int64_t>(g);
}
