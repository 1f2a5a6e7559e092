// cclx's kernel beside torchcomms' device-API test kernels (test_gpu_devapi_torchcomms): what a
// replay of one of their stress kernels needs first. Their kernels wait for monotonic signal
// values 1, 2, ... counted from a fresh window; before running one again (an eager relaunch or a
// CUDA-graph replay) every rank resets its signals and meets the others at a barrier, so that no
// peer's signal of the new run lands before the reset. Written against torchcomms' API names
// (DeviceWindowNCCL, through the adapter: the cclx backend). Host-safe header.
#pragma once

#include <cuda_runtime.h>

#include "comms/torchcomms/device/ncclx/TorchCommDeviceNCCLXTypes.hpp"

namespace cclx::devapitest {

/// On `stream`: reset_signal(s) for s in [0, signals), then barrier(barrierId); *status = the
/// barrier's return value (0, or torchcomms' error codes).
void launchResetSignals(torchcomms::device::DeviceWindowNCCL* win, int signals, int barrierId,
                        int* status, cudaStream_t stream);

/// Calls with one argument out of range (a rank, an id, a byte range, an operation, a scope).
constexpr int kBadArgumentCalls = 12;
/// On `stream`, one thread: status[i] = the return value of bad call i (each must be -1 and do
/// nothing), then status[kBadArgumentCalls] = a barrier(0) of every rank (0: the window works).
void launchBadArguments(torchcomms::device::DeviceWindowNCCL* win,
                        torchcomms::device::RegisteredBufferNCCL src, int* status,
                        cudaStream_t stream);

}  // namespace cclx::devapitest
