// The GPU algorithm registry (registry.h): one entry per algorithm object.
#include "gpu/registry/registry.h"

#include <iterator>

#include "base/error.h"
#include "gpu/dda/dda.h"
#include "gpu/fp8/fp8.h"
#include "gpu/fused/fused.h"

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

constexpr AlgoEntry kRegistry[] = {
    // Allreduce, DDA (dda/flat.cu, lamport.cu, tree.cu): one shot over LL16 slots; one shot
    // with the data as its own flag; reduce-scatter + all-gather at any size.
    {Algo::Flat, kAllReduce, false, makeDdaFlat},
    {Algo::Lamport, kAllReduce, false, makeDdaLamport},
    {Algo::Tree, kAllReduce, false, makeDdaTree},
    // Barrier over the signal areas (dda/barrier.cu).
    {Algo::PeerBarrier, collBit(CollType::Barrier), false, makeDdaBarrier},
    // The exchanges (dda/xchg_ll.cu, xchg_pipe.cu): one shot over the flat allreduce's LL16
    // slots; pipelined through double-buffered inboxes at any size.
    {Algo::XchgLL, kLLColls, false, makeDdaXchgLL},
    {Algo::XchgPipe, kPipeColls, false, makeDdaXchgPipe},
    // FP8 (fp8/allreduce.cu, oneshot.cu, exchange.cu).
    {Algo::Fp8, kAllReduce, true, makeFp8AllReduce},
    {Algo::Fp8OneShot, kAllReduce, true, makeFp8OneShotAllReduce},
    {Algo::Fp8, collBit(CollType::AllGather), true, makeFp8AllGather},
    {Algo::Fp8, collBit(CollType::ReduceScatter), true, makeFp8ReduceScatter},
    {Algo::Fp8, collBit(CollType::AllToAll), true, makeFp8AllToAll},
    // Fused allreduce + RMSNorm (fused/oneshot.cu, twoshot.cu).
    {Algo::RmsOneShot, collBit(CollType::AllReduceRmsNorm), false, makeRmsOneShot},
    {Algo::RmsTwoShot, collBit(CollType::AllReduceRmsNorm), false, makeRmsTwoShot},
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
