// The GPU backend's objects (registry.h): the factories the catalogue names, each defined in its
// kernel's file (src/gpu/dda, fp8, fused, quantized).
#include "gpu/registry/registry.h"

namespace cclx {

// A line whose algorithm the GPU backend runs without an object of its own (NCCL, the unfused
// sequence).
static std::unique_ptr<DeviceAlgo> noDevice() { return nullptr; }

#define CCLX_ALGO(...)
#define CCLX_SERVES(id, colls, device, host) std::unique_ptr<DeviceAlgo> device();
#include "core/select/algorithms.def"
#undef CCLX_SERVES

namespace {

#define CCLX_SERVES(id, colls, device, host) {Algo::id, colls, &device},
const AlgoSet<DeviceAlgo>::Binding kDeviceBindings[] = {
#include "core/select/algorithms.def"
};
#undef CCLX_SERVES
#undef CCLX_ALGO

}  // namespace

AlgoSet<DeviceAlgo> makeDeviceAlgorithms() { return AlgoSet<DeviceAlgo>(kDeviceBindings); }

}  // namespace cclx
