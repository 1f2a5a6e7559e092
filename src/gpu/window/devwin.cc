// Device windows on CUDA IPC windows (core/window/device_window.cc; docs/design/device-window.md):
// the memory of a device window's resource area and of its handle, on the comm's device. Each
// helper runs with the comm's device current and this thread's capture mode relaxed, so that a
// device window can be made or released while another thread captures a CUDA graph (the calls
// below run eagerly, never into a graph).
#include <cclx/device_window.h>

#include "gpu/window/window.h"

#include "base/log.h"
#include "gpu/backend.h"
#include "gpu/runtime.h"

namespace cclx {

namespace {

// The comm's device current and this thread's capture mode relaxed, both restored at exit.
class EagerScope {
 public:
  explicit EagerScope(int device) : dev_(device) {
    mode_ = cudaStreamCaptureModeRelaxed;
    CCLX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_));
  }
  ~EagerScope() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }

 private:
  DeviceGuard dev_;
  cudaStreamCaptureMode mode_;
};

// `bytes` of new device memory holding `src` (null: zeros), ready when this returns; freed again
// and thrown on a failure (`what` names the memory).
void* newDeviceBytes(int device, size_t bytes, const void* src, void* stream, const char* what) {
  EagerScope g(device);
  const auto st = static_cast<cudaStream_t>(stream);
  void* p = nullptr;
  CCLX_CUDA_CHECK(cudaMalloc(&p, bytes));
  cudaError_t e = src ? cudaMemcpyAsync(p, src, bytes, cudaMemcpyHostToDevice, st)
                      : cudaMemsetAsync(p, 0, bytes, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(p);
    CCLX_THROW(cclxCudaError, "%s a device window's %s: %s", src ? "placing" : "zeroing", what,
               cudaGetErrorString(e));
  }
  return p;
}

}  // namespace

void* devWinAllocZeroed(int device, size_t bytes, void* stream) {
  return newDeviceBytes(device, bytes, nullptr, stream, "resources");
}

void* devWinPlace(int device, const DeviceWindowHandle& h, void* stream) {
  return newDeviceBytes(device, sizeof(h), &h, stream, "handle");
}

void devWinFree(int device, void* p) {
  if (!p) return;
  try {
    EagerScope g(device);
    if (cudaFree(p) != cudaSuccess) {
      CCLX_WARN("device window: cudaFree: %s", cudaGetErrorString(cudaGetLastError()));
    }
  } catch (const std::exception& e) {
    CCLX_WARN("device window: %s", e.what());
  }
}

void devWinQuiesce(int device) {
  try {
    EagerScope g(device);
    if (cudaDeviceSynchronize() != cudaSuccess) {
      CCLX_WARN("device window: waiting for this rank's device work: %s",
                cudaGetErrorString(cudaGetLastError()));
    }
  } catch (const std::exception& e) {
    CCLX_WARN("device window: %s", e.what());
  }
}

}  // namespace cclx
