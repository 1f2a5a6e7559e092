// gpu/device/dtype_dispatch.h on the host: every dtype of a kernel's list reaches the matching
// element type, and any other dtype throws cclxInternalError naming the dtype and the kernel
// (never a silent fallback to another type).
#include <gtest/gtest.h>

#include <string>
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
