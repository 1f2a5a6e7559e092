// Adapter (cclx's tests): stands in for torchcomms' header of this path so that torchcomms' own
// device-API test kernels (tests/integration/cpp/DeviceApiTestKernels.cu, compiled unmodified from
// an extracted torchcomms tree) run on cclx's backend: their DeviceWindowNCCL and
// RegisteredBufferNCCL name the cclx backend's types. This folder comes before the torchcomms
// tree on the include path; nothing of NCCLX's backend is compiled. Host-safe.
#pragma once

#include <cclx/torchcomms/device_window.hpp>

// torchcomms' own traits header beside ours (it needs NCCL's device headers): the two backends'
// traits live side by side in one translation unit.
#if defined(CCLX_DEVAPI_WITH_NCCL_TRAITS)
#include "comms/torchcomms/device/DeviceBackendTraits.hpp"
#endif

namespace torchcomms::device {

using DeviceWindowNCCL = DeviceWindowCclx;
using RegisteredBufferNCCL = RegisteredBufferCclx;

}  // namespace torchcomms::device
