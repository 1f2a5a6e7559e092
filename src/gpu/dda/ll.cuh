// The LL16 slot protocol of the DDA one-shot kernels, written once for the two that share it: the
// flat allreduce (flat.cu) and the LL exchange (xchg_ll.cu: all-gather, reduce-scatter,
// all-to-all). Both run kFlatBlocks blocks and count their calls with the same per-block counters
// (kCounterFlat), so for the protocol they are one kernel family: every call of either is epoch e
// of every block, whatever the collective.
//
// Slots. Rank dst's kFlat region holds packet slots [set][src][block], llSlotBytes() each (a
// multiple of 16: slotBytes / 16 packets). Call e of block b pushes its 8-byte units as LL16
// packets {d0, f, d1, f} (f = lamport::llFlag(e), never 0, the value of zeroed slots) into set
// e & 1, source = this rank, of every peer; the reader polls its local packet until both flag
// words equal f.
//
// Reuse (for the family): rank A writes set s again at call e + 2 only after its call e + 1
// finished, which needed a packet of call e + 1 from every peer B (every call of the family moves
// at least one unit between every pair of ranks), and B pushes call e + 1 packets only after its
// call e kernel finished reading set s (peer kernels are stream-ordered on each rank). A stale
// packet (call e - 2 or older) carries another flag.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/dda/dda.h"
#include "gpu/device/prims.cuh"

namespace cclx {
namespace dev {

/// Packet i of slot [set][src][blockIdx.x] in the region `region` (rank dst's kFlat region) of a
/// world of `size` ranks.
__device__ __forceinline__ uint4* llSlot(char* region, int size, int set, int src, size_t slotBytes,
                                         size_t i) {
  char* base = region + ((size_t(set) * size + src) * kFlatBlocks + blockIdx.x) * slotBytes;
  return reinterpret_cast<uint4*>(base) + i;
}

}  // namespace dev
}  // namespace cclx
