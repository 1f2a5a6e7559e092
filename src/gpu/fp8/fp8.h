// The low-precision (FP8 e4m3, per-block scales) collectives on GPUs, each a DeviceAlgo
// (gpu/algo.h): when they apply is core/select/select.h's rule, their CPU twins are host/algos/fp8.cc.
#pragma once

#include <memory>

#include "gpu/algo.h"

namespace cclx {

std::unique_ptr<DeviceAlgo> makeFp8AllReduce();         // "fp8": two-shot (allreduce.cu)
std::unique_ptr<DeviceAlgo> makeFp8OneShotAllReduce();  // "fp8_oneshot" (oneshot.cu)
std::unique_ptr<DeviceAlgo> makeFp8AllGather();         // "fp8" (exchange.cu)
std::unique_ptr<DeviceAlgo> makeFp8ReduceScatter();     // "fp8" (exchange.cu)
std::unique_ptr<DeviceAlgo> makeFp8AllToAll();          // "fp8" (exchange.cu)

}  // namespace cclx
