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

}  // namespace ncclstream
}  // namespace cclx
