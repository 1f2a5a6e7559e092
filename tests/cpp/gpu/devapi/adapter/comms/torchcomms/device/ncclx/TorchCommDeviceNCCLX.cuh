// Adapter (cclx's tests): stands in for torchcomms' NCCLX device implementation header so that
// torchcomms' DeviceApiTestKernels.cu compiles unmodified against the cclx backend's methods
// (<cclx/torchcomms/device_window.cuh>). See TorchCommDeviceNCCLXTypes.hpp beside it.
#pragma once

#include "comms/torchcomms/device/ncclx/TorchCommDeviceNCCLXTypes.hpp"

#include <cclx/torchcomms/device_window.cuh>
