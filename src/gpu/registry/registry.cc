// The GPU algorithm registry (registry.h): one entry per algorithm object.
#include "gpu/registry/registry.h"

#include <iterator>

#include "base/error.h"
#include "gpu/dda/dda.h"
#include "gpu/fp8/fp8.h"
#include "gpu/fused/fused.h"
#include "gpu/quantized/quantized.h"

namespace cclx {

namespace {

constexpr uint32_t kAllReduce = collBit(CollType::AllReduce);
// The exchanges the LL kernel takes (one message per peer, the same length on every rank).
constexpr uint32_t kLLColls =
    collBit(CollType::AllGather) | collBit(CollType::ReduceScatter) | collBit(CollType::AllToAll);
// The pipelined exchange: every collective xchgPlan describes (dda/xchg.h).
constexpr uint32_t kPipeColls = kLLColls | collBit(CollType::AllToAllV) |
                                collBit(CollType::ReduceScatterV) | collBit(CollType::Broadcast) |
                                collBit(CollType::Reduce) | collBit(CollType::SendRecv);

// Each entry: what its object runs, the staging it names, when it accepts a call (its canRun).
constexpr AlgoEntry kRegistry[] = {
    // Allreduce in one step over LL16 packet slots (dda/flat.cu); staging kFlat; accepts a
    // message that fits one slot set, DDA dtypes and ops.
    {Algo::Flat, kAllReduce, false, makeDdaFlat},
    // Allreduce in one shot with the data as its own flag (dda/lamport.cu); staging kLamport;
    // accepts what fits one inbox (lamportFits: float types).
    {Algo::Lamport, kAllReduce, false, makeDdaLamport},
    // Allreduce as reduce-scatter + all-gather at any size (dda/tree.cu); staging kTree.
    {Algo::Tree, kAllReduce, false, makeDdaTree},
    // Barrier over the signal areas (dda/barrier.cu); no staging.
    {Algo::PeerBarrier, collBit(CollType::Barrier), false, makeDdaBarrier},
    // All-gather, reduce-scatter, all-to-all in one shot over the flat allreduce's LL16 slots
    // (dda/xchg_ll.cu); staging kFlat; accepts messages up to one slot per block and peer.
    {Algo::XchgLL, kLLColls, false, makeDdaXchgLL},
    // Every collective xchgPlan describes, chunks through double-buffered inboxes at any size
    // (dda/xchg_pipe.cu); staging kXchg; refuses what has no plan (a batch not cut into rounds).
    {Algo::XchgPipe, kPipeColls, false, makeDdaXchgPipe},
    // All-to-all-v with split sizes in device memory: the pipelined exchange planned by the
    // kernel from the counts it reads (dda/xchg_dev.cu); staging kXchg (the same inboxes and
    // counters as the entry above); any size.
    {Algo::XchgPipe, collBit(CollType::AllToAllVDevice), false, makeDdaXchgDev},
    // FP8 two-shot allreduce (fp8/allreduce.cu); only when the call asks for low precision.
    {Algo::Fp8, kAllReduce, true, makeFp8AllReduce},
    // FP8 one-shot allreduce, one quantization (fp8/oneshot.cu); fits its inboxes.
    {Algo::Fp8OneShot, kAllReduce, true, makeFp8OneShotAllReduce},
    // FP8 all-gather, reduce-scatter, all-to-all (fp8/exchange.cu).
    {Algo::Fp8, collBit(CollType::AllGather), true, makeFp8AllGather},
    {Algo::Fp8, collBit(CollType::ReduceScatter), true, makeFp8ReduceScatter},
    {Algo::Fp8, collBit(CollType::AllToAll), true, makeFp8AllToAll},
    // Fused allreduce + RMSNorm: one shot, the norm as the reduction's epilogue
    // (fused/oneshot.cu); reduce-scatter by token rows, norm, all-gather (fused/twoshot.cu).
    {Algo::RmsOneShot, collBit(CollType::AllReduceRmsNorm), false, makeRmsOneShot},
    {Algo::RmsTwoShot, collBit(CollType::AllReduceRmsNorm), false, makeRmsTwoShot},
    // reduce_scatter_quantized: bf16 stochastic rounding pushed into the FP8 staging, float sums
    // (quantized/peer.cu); staging kFp8; accepts f32 SUM / AVG wherever one FP8 tile fits. Not a
    // low-precision entry: the call itself asks for it.
    {Algo::SrBf16, collBit(CollType::ReduceScatterQuantized), false, makeSrBf16ReduceScatter},
};

// At most one entry per (collective, algorithm), and none for what runs without a kernel.
constexpr bool wellFormed() {
  for (size_t i = 0; i < std::size(kRegistry); ++i) {
    if (kRegistry[i].algo == Algo::Base || kRegistry[i].algo == Algo::RmsUnfused) return false;
    for (size_t j = i + 1; j < std::size(kRegistry); ++j)
      if (kRegistry[i].algo == kRegistry[j].algo && (kRegistry[i].colls & kRegistry[j].colls))
        return false;
  }
  return true;
}
static_assert(wellFormed(), "an algorithm is registered twice for one collective, or Base / "
                            "RmsUnfused is registered");

}  // namespace

std::span<const AlgoEntry> algoRegistry() { return kRegistry; }

AlgoTable::AlgoTable() {
  for (const AlgoEntry& e : kRegistry) {
    objs_.push_back(e.make());
    CCLX_REQUIRE(objs_.back() != nullptr, cclxInternalError, "algorithm '%s' has no object",
                 algoName(e.algo));
  }
}

DeviceAlgo* AlgoTable::find(CollType t, Algo algo) const {
  for (size_t i = 0; i < std::size(kRegistry); ++i)
    if (kRegistry[i].algo == algo && (kRegistry[i].colls & collBit(t))) return objs_[i].get();
  return nullptr;
}

}  // namespace cclx
