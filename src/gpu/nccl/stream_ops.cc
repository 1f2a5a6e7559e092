// stream_ops.h on the GPU runtime.
#include "gpu/nccl/stream_ops.h"

#include "base/log.h"
#include "gpu/runtime.h"

namespace cclx {
namespace ncclstream {

void copy(void* dst, const void* src, size_t bytes, nccl::ncclStream_t stream) {
  CCLX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                  static_cast<cudaStream_t>(stream)));
}

void* allocTemp(size_t bytes, nccl::ncclStream_t stream) {
  void* p = nullptr;
  CCLX_CUDA_CHECK(cudaMallocAsync(&p, bytes, static_cast<cudaStream_t>(stream)));
  return p;
}

void freeTemp(void* p, nccl::ncclStream_t stream) noexcept {
  const cudaError_t e = cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    CCLX_WARN("freeing a temporary of an NCCL call: %s", cudaGetErrorString(e));
  }
}

void copyHost(void* dst, const void* src, size_t bytes, nccl::ncclStream_t stream) {
  CCLX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                  static_cast<cudaStream_t>(stream)));
}

void poison(void* dst, size_t bytes, nccl::ncclStream_t stream) {
  CCLX_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, static_cast<cudaStream_t>(stream)));
}

void* markRecord(nccl::ncclStream_t stream) {
  cudaEvent_t e = nullptr;
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const cudaError_t r = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
  if (r != cudaSuccess) {
    (void)cudaEventDestroy(e);
    CCLX_CUDA_CHECK(r);
  }
  return e;
}

bool markDone(void* marker) {
  const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(marker));
  if (r == cudaErrorNotReady) return false;
  CCLX_CUDA_CHECK(r);
  return true;
}

void markFree(void* marker) noexcept {
  if (marker) (void)cudaEventDestroy(static_cast<cudaEvent_t>(marker));
}

}  // namespace ncclstream
}  // namespace cclx
