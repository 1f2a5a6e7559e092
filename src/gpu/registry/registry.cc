// The GPU backend's objects (registry.h): the factories the catalogue names, each defined in its
// kernel's file (src/gpu/dda, fp8, fused, quantized).
#include "gpu/registry/registry.h"

namespace cclx {

#define CCLX_BIND_OBJ DeviceAlgo
#define CCLX_BIND_FACTORY(device, host) device
#define CCLX_BIND_MAKE makeDeviceAlgorithms
#include "core/select/algo_bindings.inc"

}  // namespace cclx
