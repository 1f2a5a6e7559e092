// The MoE kernels of CUDA comms (docs/design/moe.md): dispatch (dispatch.cu) and combine
// (combine.cu), one kernel each, over the MoeBuffer memory of every rank (core/moe/layout.h), and
// the engine that owns that memory and launches them (engine.cc). Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/moe/engine.h"
#include "core/moe/layout.h"
#include "gpu/algo.h"

namespace cclx {
namespace moegpu {

constexpr int kThreads = 512;  // threads per block
constexpr int kWarps = kThreads / 32;

/// A kernel's parameters (by value).
struct Params {
  char* peer[kMaxRanks];   // every rank's buffer as mapped here (peer[rank]: this rank's)
  moe::Layout lay;
  FailParams fail;
  uint64_t* counters;      // this kernel's call counter per block (local)
  int tokens;              // this rank's T (combine: the last dispatch's)
  // dispatch
  const char* x;
  const void* ids;
  int ids64;
  const float* w;
  int cached;              // ids / w from the buffer's copy (tokIds / tokW)
  int phase;               // MoePhase (core/moe/engine.h): send, receive or both
  int chunk;               // tokens per routing chunk (core/moe/tables.h)
  // combine
  const char* eout;
  size_t eoutRows;
  char* out;
};

/// Largest dynamic shared memory the kernels may ask for.
constexpr size_t kMaxSmem = 160u << 10;

/// Host side: raises the dispatch kernels' shared-memory limit to `smem` (all instances of the
/// layout's dtype); throws cclxCudaError when the device refuses.
void prepareDispatch(const moe::Layout& lay, size_t smem);
/// Enqueue one call on `stream` (exactly one kernel).
void launchDispatch(const Params& p, int grid, size_t smem, void* stream);
void launchCombine(const Params& p, int grid, void* stream);

}  // namespace moegpu
}  // namespace cclx
