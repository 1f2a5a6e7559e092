// gpures::StreamTemp (gpu/resources.h), the stream-ordered temporary of the GPU backend's staged
// exchange input and of the unfused RMSNorm's FP8-only result: freed on every exit path, so a
// launch that throws between the allocation and the free leaks nothing. Measured on the device's
// default memory pool (what cudaMallocAsync draws from). One GPU; skips without one.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <cstdint>
#include <stdexcept>

#include "gpu/resources.h"

using namespace cclx;

namespace {

bool haveGpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

uint64_t poolUsed() {
  int dev = 0;
  cudaMemPool_t pool = nullptr;
  uint64_t used = 0;
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, dev), cudaSuccess);
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
  return used;
}

}  // namespace

TEST(GpuStreamTemp, FreedWhenTheLaunchThrows) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const uint64_t before = poolUsed();
  bool thrown = false;
  try {
    gpures::StreamTemp tmp(size_t(8) << 20, s);
    ASSERT_NE(tmp.get(), nullptr);
    ASSERT_EQ(cudaMemsetAsync(tmp.get(), 0, size_t(8) << 20, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_GE(poolUsed(), before + (size_t(8) << 20));
    throw std::runtime_error("the launch failed");  // as a launch that throws
  } catch (const std::runtime_error&) {
    thrown = true;
  }
  EXPECT_TRUE(thrown);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(poolUsed(), before);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(GpuStreamTemp, FreeOnTheNormalPathOnce) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const uint64_t before = poolUsed();
  {
    gpures::StreamTemp tmp(size_t(1) << 20, s);
    tmp.free();  // the destructor then frees nothing more (a second free would be an error)
    EXPECT_EQ(tmp.get(), nullptr);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(poolUsed(), before);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

#else

TEST(GpuStreamTemp, FreedWhenTheLaunchThrows) { GTEST_SKIP() << "built without CUDA"; }

#endif
