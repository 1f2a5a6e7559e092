// Device-side data of the window tests (window_selftest.h).
#include <cuda_runtime.h>

#include "gpu/kernels/window_selftest.h"

namespace cclx {
namespace wintest {
namespace {

__global__ void fillKernel(char* dst, size_t n, int rank, const uint64_t* round) {
  const uint64_t k = *round;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = char(byteOf(rank, k, i));
}

__global__ void checkKernel(const char* got, size_t n, int rank, const uint64_t* round,
                            unsigned long long* bad) {
  const uint64_t k = *round;
  unsigned long long mine = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    mine += uint8_t(got[i]) != byteOf(rank, k, i);
  if (mine) atomicAdd(bad, mine);
}

__global__ void nextKernel(uint64_t* round) { *round += 1; }

int blocksFor(size_t n) {
  size_t b = (n + 255) / 256;
  return int(b < 1 ? 1 : b > 64 ? 64 : b);
}

}  // namespace

void fill(char* dst, size_t n, int rank, const uint64_t* round, void* stream) {
  fillKernel<<<blocksFor(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(dst, n, rank, round);
}

void check(const char* got, size_t n, int rank, const uint64_t* round, unsigned long long* bad,
           void* stream) {
  checkKernel<<<blocksFor(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(got, n, rank, round, bad);
}

void nextRound(uint64_t* round, void* stream) {
  nextKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(round);
}

}  // namespace wintest
}  // namespace cclx
