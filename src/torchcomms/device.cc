// CUDA facts from torch (device.h).
#include "torchcomms/device.h"

#include <cclx/cclx.hpp>

#include <cstdlib>
#include <string>

#ifdef CCLX_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace cclx::tc {

at::Device resolveDevice(const at::Device& d, int rank) {
  if (d.type() == at::kCPU) return at::Device(at::kCPU);
  if (d.type() != at::kCUDA)
    throw Error(cclxInvalidArgument,
                "unsupported device type '" + d.str() + "' (cclx supports cpu and cuda)");
#ifdef CCLX_HAVE_CUDA
  const int count = int(c10::cuda::device_count());
  if (count == 0) throw Error(cclxUnsupported, "no CUDA device is visible to torch");
  int index = d.has_index() ? d.index() : -1;
  if (index < 0) {
    const char* lr = std::getenv("LOCAL_RANK");
    int local = lr && *lr ? std::atoi(lr) : rank;
    index = local % count;
  } else if (index >= count) {
    throw Error(cclxInvalidArgument, "cuda:" + std::to_string(index) + " does not exist (" +
                                         std::to_string(count) + " devices visible)");
  }
  c10::cuda::set_device(c10::DeviceIndex(index));
  return at::Device(at::kCUDA, c10::DeviceIndex(index));
#else
  (void)rank;
  throw Error(cclxUnsupported, "this libcclx_torchcomms was built without CUDA");
#endif
}

void* currentStream(const at::Device& d) {
#ifdef CCLX_HAVE_CUDA
  if (d.type() == at::kCUDA) return c10::cuda::getCurrentCUDAStream(d.index()).stream();
#endif
  (void)d;
  return nullptr;
}

void syncDevice(const at::Device& d) {
#ifdef CCLX_HAVE_CUDA
  if (d.type() == at::kCUDA) c10::cuda::getCurrentCUDAStream(d.index()).synchronize();
#endif
  (void)d;
}

bool capturing(const at::Device& d) {
#ifdef CCLX_HAVE_CUDA
  if (d.type() != at::kCUDA) return false;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(d.index()).stream(), &st));
  return st != cudaStreamCaptureStatusNone;
#else
  (void)d;
  return false;
#endif
}

void syncDeviceUnlessCapturing(const at::Device& d) {
  if (d.type() != at::kCUDA || capturing(d)) return;
  syncDevice(d);
}

}  // namespace cclx::tc
