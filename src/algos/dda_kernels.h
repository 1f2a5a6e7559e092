// Host-side entry points of the DDA kernels (dda_flat.cu, dda_lamport.cu, dda_tree.cu,
// dda_barrier.cu). Plain C++: no CUDA headers needed by callers. Every launcher enqueues exactly
// one kernel on `stream` and does nothing else (no allocation, no synchronization): legal inside
// CUDA-graph capture.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algos/device_ctx.h"

namespace cclx {

struct DdaArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements (> 0)
  DataType dtype = DataType::f32;
  ReduceOp op{};
  uint64_t timeoutNs = 0;
};

/// Element types and ops the DDA allreduce kernels implement.
bool ddaTypeSupported(DataType t);
bool ddaOpSupported(RedOpKind op, DataType t);

/// Flat (one-shot LL16) allreduce: fits when the message fits one packet slot set.
bool ddaFlatFits(size_t bytes, const DeviceCtx& ctx);
void ddaFlatLaunch(const DdaArgs& a, DeviceCtx& ctx, void* stream);
/// Lamport (one-shot, the data as its own flag; f16/bf16/f32/f64): fits when the message fits one
/// inbox of the Lamport region.
bool ddaLamportFits(size_t bytes, DataType t, const DeviceCtx& ctx);
void ddaLamportLaunch(const DdaArgs& a, DeviceCtx& ctx, void* stream);
/// Tree (reduce-scatter + all-gather through the staging areas): any size, chunked.
void ddaTreeLaunch(const DdaArgs& a, DeviceCtx& ctx, void* stream);
/// Peer barrier: returns once every rank has launched it (1 block).
void ddaBarrierLaunch(DeviceCtx& ctx, uint64_t timeoutNs, void* stream);

/// Grid sizes (identical on every rank: they define the slot layout).
constexpr int kFlatBlocks = 32;
int ddaTreeBlocks(const DeviceCtx& ctx);

}  // namespace cclx
