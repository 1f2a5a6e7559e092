// A copy by a group of threads (plain loads and stores; no ordering of its own): the window put
// kernel's (gpu/window/kernels.cu) and the device windows' put (gpu/devwin/ops.cuh). The caller
// orders the stores for their readers (a kernel boundary, or a barrier of the group followed by
// one thread's release).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/runtime.h"

namespace cclx {
namespace dev {

/// Copies [src, src + bytes) to dst in units of T, src and dst being equally aligned modulo
/// sizeof(T): a byte head up to dst's alignment, the body in T, a byte tail. Thread t of
/// `threads` takes every threads-th unit (grid- or group-stride as the caller numbers them).
template <typename T>
__device__ __forceinline__ void copyAs(const char* src, char* dst, size_t bytes, size_t t,
                                       size_t threads) {
  const size_t mis = (sizeof(T) - (reinterpret_cast<uintptr_t>(dst) & (sizeof(T) - 1))) & (sizeof(T) - 1);
  const size_t head = mis < bytes ? mis : bytes;
  for (size_t i = t; i < head; i += threads) dst[i] = src[i];
  const size_t n = (bytes - head) / sizeof(T);
  const T* s = reinterpret_cast<const T*>(src + head);
  T* d = reinterpret_cast<T*>(dst + head);
  size_t i = t;
  for (; i + 3 * threads < n; i += 4 * threads) {  // four loads in flight before the stores
    const T a = s[i], b = s[i + threads], c = s[i + 2 * threads], e = s[i + 3 * threads];
    d[i] = a;
    d[i + threads] = b;
    d[i + 2 * threads] = c;
    d[i + 3 * threads] = e;
  }
  for (; i < n; i += threads) d[i] = s[i];
  for (size_t j = head + n * sizeof(T) + t; j < bytes; j += threads) dst[j] = src[j];
}

/// copyAs in the widest unit (16, 8, 4, 2 or 1 bytes) that src and dst share the alignment of.
/// Source and destination must not overlap.
__device__ __forceinline__ void copyBytes(const char* src, char* dst, size_t bytes, size_t t,
                                          size_t threads) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(src) ^ reinterpret_cast<uintptr_t>(dst);
  if ((x & 15) == 0) copyAs<uint4>(src, dst, bytes, t, threads);
  else if ((x & 7) == 0) copyAs<uint2>(src, dst, bytes, t, threads);
  else if ((x & 3) == 0) copyAs<uint32_t>(src, dst, bytes, t, threads);
  else if ((x & 1) == 0) copyAs<uint16_t>(src, dst, bytes, t, threads);
  else copyAs<uint8_t>(src, dst, bytes, t, threads);
}

}  // namespace dev
}  // namespace cclx
