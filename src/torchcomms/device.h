// CUDA facts the torchcomms backend needs from torch (src/torchcomms/device.cc); a build of cclx
// without CUDA reports CUDA devices as unsupported.
#pragma once

#include <c10/core/Device.h>

namespace cclx::tc {

/// The device a comm runs on: CPU as given; CUDA with an index as given, without one
/// LOCAL_RANK (else `rank`) modulo the device count. A CUDA device becomes torch's current one.
at::Device resolveDevice(const at::Device& d, int rank);
/// torch's current stream on `d` as a cudaStream_t (nullptr for CPU).
void* currentStream(const at::Device& d);
/// True while torch's current stream on `d` is being captured into a CUDA graph (CPU: false).
bool capturing(const at::Device& d);
/// Waits until the current stream of `d` is idle (nothing for CPU).
void syncDevice(const at::Device& d);
/// syncDevice, except while the current stream is being captured into a CUDA graph (nothing
/// then: a capture cannot be waited on).
void syncDeviceUnlessCapturing(const at::Device& d);

}  // namespace cclx::tc
