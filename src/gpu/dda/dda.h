// The direct-access (DDA) algorithms: allreduce flat (flat.cu), Lamport (lamport.cu) and tree
// (tree.cu), and the peer barrier (barrier.cu), each a DeviceAlgo (gpu/algo.h). Plain C++: no
// CUDA headers needed by callers.
#pragma once

#include <memory>

#include "gpu/algo.h"

namespace cclx {

/// Element types and ops the DDA allreduce kernels implement (f32/f64/f16/bf16 and 8/32/64-bit
/// integers; every op, bitwise ones for integers only).
bool ddaOpSupported(RedOpKind op, DataType t);

std::unique_ptr<DeviceAlgo> makeDdaFlat();     // "flat": one-shot over LL16 packet slots
std::unique_ptr<DeviceAlgo> makeDdaLamport();  // "lamport": one-shot, the data as its own flag
std::unique_ptr<DeviceAlgo> makeDdaTree();     // "tree": reduce-scatter + all-gather, any size
std::unique_ptr<DeviceAlgo> makeDdaBarrier();  // barrier over the signal areas (1 block)

/// Grid sizes (identical on every rank: they define the slot layout).
constexpr int kFlatBlocks = 32;
int ddaTreeBlocks(const DeviceCtx& ctx);

}  // namespace cclx
