// reduce_scatter_quantized on GPUs (NCCLX's contract; element rules core/elements/stochastic.h,
// CPU twin host/algos/quantized.cc): the peer-memory kernel, a DeviceAlgo (peer.cu), and the NCCL
// sequence the backend runs where it does not (fallback.cu): round into a bf16 temporary, an NCCL
// all-to-all of the bf16 blocks, sum them in float. Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gpu/algo.h"
#include "gpu/nccl/loader.h"

namespace cclx {

/// "sr_bf16": push model over the FP8 collectives' staging, flags and epoch counters.
std::unique_ptr<DeviceAlgo> makeSrBf16ReduceScatter();

/// The NCCL sequence on `stream` (a cudaStream_t), for a call the peer kernel does not run (across
/// hosts, backend "nccl", hint "algo" = "nccl"): launchSrRound of the whole input into a bf16
/// temporary, an NCCL all-to-all of the bf16 blocks (NCCL reduces nothing: a bf16 reduction would
/// round every partial sum), launchSrSum into the output. The input is read before the output is
/// written, so any overlap works; stream-ordered temporaries, legal inside graph capture; the
/// seed is read by the rounding kernel.
void quantizedViaNccl(const CollArgs& a, nccl::ncclComm_t comm, int rank, int size, void* stream);

/// The NCCL sequence's first kernel: out[i] = sr::srBf16(send[i], *seed, i, rank) for the
/// size * count elements of `send` (bf16 bits); *seed is read on the device.
void launchSrRound(const float* send, uint16_t* out, size_t n, const int64_t* seed, uint32_t rank,
                   void* stream);
/// Its last: recv[i] = sum over s = 0..size-1 (in that order, float) of the widened
/// blocks[s * count + i]; divided by size once when avg.
void launchSrSum(const uint16_t* blocks, float* recv, size_t count, int size, bool avg,
                 void* stream);

}  // namespace cclx
