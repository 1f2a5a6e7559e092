// Low-precision (FP8 e4m3, per-block scales) collectives: when they apply, and their factories.
// The host backend and the CUDA backend ask lowPrecisionWanted() first and, if it says yes and the
// algorithm's canRun() accepts, run the FP8 algorithm instead of the full-precision one.
#pragma once

#include <memory>

#include "algos/algo.h"

namespace cclx {

/// True when the call asks for FP8: per-call hint "low_precision" = "fp8" (forces it, any size),
/// or the per-collective setting (CCLX_LOW_PRECISION_ENABLE[_<COLL>]) is on and the message is at
/// least cfg.lpMinBytes. Hint "low_precision" = "off" disables it. Only AllReduce, AllGather,
/// ReduceScatter and AllToAll with f32/bf16/f16 data and SUM/AVG (reductions) qualify.
bool lowPrecisionWanted(const CollArgs& args, const Config& cfg);

std::unique_ptr<HostAlgo> makeHostFp8AllReduce();
std::unique_ptr<HostAlgo> makeHostFp8AllGather();
std::unique_ptr<HostAlgo> makeHostFp8ReduceScatter();
std::unique_ptr<HostAlgo> makeHostFp8AllToAll();

#if defined(CCLX_HAVE_CUDA)
std::unique_ptr<DeviceAlgo> makeFp8AllReduce();
std::unique_ptr<DeviceAlgo> makeFp8AllGather();
std::unique_ptr<DeviceAlgo> makeFp8ReduceScatter();
std::unique_ptr<DeviceAlgo> makeFp8AllToAll();
#endif

}  // namespace cclx
