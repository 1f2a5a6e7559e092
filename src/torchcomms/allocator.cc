// torchcomms.get_mem_allocator("cclx") (CUDA builds): torch's pluggable CUDA allocator over
// cclx::memAlloc / memFree, memory every cclx transport maps (one-host windows map it on the
// peers; NCCL's registration goes zero-copy on it). torchcomms keeps one factory per backend
// name; this library registers cclx's when torchcomms loads it (the first new_comm("cclx")), so
// the allocator is there from the first cclx comm of the process on. One allocator per process.
#ifdef CCLX_HAVE_CUDA
#include <cclx/cclx.hpp>
#include <comms/torchcomms/TorchCommFactory.hpp>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <memory>

namespace cclx::tc {
namespace {

std::shared_ptr<c10::Allocator> cclxAllocator() {
  static const std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> a =
      torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
          [](size_t bytes, int device, cudaStream_t) { return memAlloc(bytes, device); },
          [](void* ptr, size_t, int, cudaStream_t) { memFree(ptr); });
  return a;
}

struct Registration {
  Registration() {
    torch::comms::TorchCommFactory::get().register_allocator_factory("cclx", &cclxAllocator);
  }
} registration;

}  // namespace
}  // namespace cclx::tc
#endif
