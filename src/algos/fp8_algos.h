// Low-precision (FP8 e4m3, per-block scales) collectives: when they apply, and their factories.
// The host backend and the CUDA backend ask lowPrecisionWanted() first and, if it says yes and the
// algorithm's canRun() accepts, run the FP8 algorithm instead of the full-precision one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algos/algo.h"

namespace cclx {

/// True when the call asks for FP8: per-call hint "low_precision" = "fp8" (forces it, any size),
/// or the per-collective setting (CCLX_LOW_PRECISION_ENABLE[_<COLL>]) is on and the message is at
/// least cfg.lpMinBytes. Hint "low_precision" = "off" disables it. Only AllReduce, AllGather,
/// ReduceScatter and AllToAll with f32/bf16/f16 data and SUM/AVG (reductions) qualify.
bool lowPrecisionWanted(const CollArgs& args, const Config& cfg);

/// True when the FP8 allreduce should run one-shot (every rank pushes its whole quantized input to
/// every peer and reduces locally; one quantization) rather than two-shot (reduce-scatter +
/// all-gather; two quantizations): per-call hint "fp8_algo", else CCLX_FP8_ALLREDUCE_ALGO
/// (oneshot|twoshot|auto); auto is one-shot up to CCLX_FP8_ONESHOT_MAX_BYTES (0: the tuned table,
/// fp8OneShotTable). The caller still checks that the one-shot fits. Throws cclxInvalidArgument
/// on an unknown name.
bool fp8OneShotWanted(const CollArgs& args, const Config& cfg, int worldSize);
/// Largest message (bytes) auto runs one-shot with `worldSize` ranks (0 = never).
size_t fp8OneShotTable(int worldSize);

std::unique_ptr<HostAlgo> makeHostFp8OneShotAllReduce();

std::unique_ptr<HostAlgo> makeHostFp8AllReduce();
std::unique_ptr<HostAlgo> makeHostFp8AllGather();
std::unique_ptr<HostAlgo> makeHostFp8ReduceScatter();
std::unique_ptr<HostAlgo> makeHostFp8AllToAll();

#if defined(CCLX_HAVE_CUDA)
std::unique_ptr<DeviceAlgo> makeFp8AllReduce();
std::unique_ptr<DeviceAlgo> makeFp8OneShotAllReduce();
std::unique_ptr<DeviceAlgo> makeFp8AllGather();
std::unique_ptr<DeviceAlgo> makeFp8ReduceScatter();
std::unique_ptr<DeviceAlgo> makeFp8AllToAll();

/// Allreduce phase trace (a diagnostic): while on, thread 0 of every CTA of every FP8 allreduce
/// kernel on this device writes %globaltimer (ns) at its phase boundaries; the last call's values
/// are read as [cta][slot] (kFp8TraceCtas x kFp8TraceSlots, 0 = not reached). Slots: 0 entry,
/// 1 after waiting for the previous call, 2 first tile pushed; tile i < 3 at 3 + 4i: after the
/// quantized-shards wait, 4 + 4i: reduced and pushed, 5 + 4i: after the reduced-shards wait,
/// 6 + 4i: decoded (with the next tile's pushes); 15: end. Turning it on clears the values.
constexpr int kFp8TraceCtas = 128, kFp8TraceSlots = 16;
void fp8AllReduceTrace(bool on);
std::vector<uint64_t> fp8AllReduceTraceRead();
#endif

}  // namespace cclx
