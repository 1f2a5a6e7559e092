// Device-side data generation and checking for tests/cpp/gpu/test_gpu_window.cc (CUDA builds
// only), so that thousands of put / signal / wait rounds run back to back, eager or replayed
// from a CUDA graph, without the host touching the data. The round number lives on the device.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define CCLX_WINTEST_HD __host__ __device__
#else
#define CCLX_WINTEST_HD
#endif

namespace cclx {
namespace wintest {

/// Byte i of what rank `rank` sends in round `round` (never 0x00 or 0xff).
CCLX_WINTEST_HD inline uint8_t byteOf(int rank, uint64_t round, size_t i) {
  uint64_t x = uint64_t(rank) * 0x9e3779b97f4a7c15ull + round * 0xbf58476d1ce4e5b9ull + i;
  x = (x ^ (x >> 31)) * 0x94d049bb133111ebull;
  x ^= x >> 29;
  return uint8_t(x % 254u + 1u);
}

/// dst[0, n) = byteOf(rank, *round, i), on `stream`.
void fill(char* dst, size_t n, int rank, const uint64_t* round, void* stream);
/// *bad += number of i in [0, n) with got[i] != byteOf(rank, *round, i), on `stream`.
void check(const char* got, size_t n, int rank, const uint64_t* round, unsigned long long* bad,
           void* stream);
/// *round += 1, on `stream`.
void nextRound(uint64_t* round, void* stream);

}  // namespace wintest
}  // namespace cclx
