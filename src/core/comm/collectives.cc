// The table of collective traits (see collectives.h).
#include "core/comm/collectives.h"

#include <iterator>

#include "core/comm/backend.h"

namespace cclx {

namespace {

constexpr size_t MiB = size_t(1) << 20;
using E = Empty;
using I = Input;

// One row per collective, in CollType order. The DDA sizes of the exchanges are RCCLX's limits
// (measured there with 8 ranks) until cclx-perf retunes them on a multi-GPU host.
constexpr CollTraits kTraits[] = {
    {CollType::AllReduce, "AllReduce", "all_reduce", true, E::IfNoCount, I::OneBlock,
     &Config::lpAllReduce, nullptr, 0},
    {CollType::Reduce, "Reduce", "reduce", true, E::IfNoCount, I::OneBlock, nullptr, nullptr, 0},
    {CollType::Broadcast, "Broadcast", "broadcast", false, E::IfNoCount, I::OneBlock, nullptr,
     nullptr, 0},
    {CollType::AllGather, "AllGather", "all_gather", false, E::IfNoCount, I::OneBlock,
     &Config::lpAllGather, &Config::ddaAllGatherMaxBytes, 16 * MiB},
    {CollType::ReduceScatter, "ReduceScatter", "reduce_scatter", true, E::IfNoCount, I::PerRank,
     &Config::lpReduceScatter, &Config::ddaReduceScatterMaxBytes, 8 * MiB},
    {CollType::AllToAll, "AllToAll", "all_to_all", false, E::IfNoCount, I::PerRank,
     &Config::lpAllToAll, &Config::ddaAllToAllMaxBytes, 2 * MiB},
    {CollType::AllToAllV, "AllToAllV", "all_to_all_v", false, E::Never, I::Counts, nullptr,
     nullptr, 0},
    {CollType::Send, "Send", "send", false, E::IfNoCount, I::OneBlock, nullptr, nullptr, 0},
    {CollType::Recv, "Recv", "recv", false, E::IfNoCount, I::None, nullptr, nullptr, 0},
    {CollType::Barrier, "Barrier", "barrier", false, E::Never, I::None, nullptr, nullptr, 0},
    {CollType::SendRecv, "SendRecv", "batch", false, E::IfNoMessages, I::OneBlock, nullptr,
     nullptr, 0},
    {CollType::ReduceScatterV, "ReduceScatterV", "reduce_scatter_v", true, E::IfNoCount,
     I::OneBlock, nullptr, nullptr, 0},
    {CollType::AllReduceRmsNorm, "AllReduceRmsNorm", "all_reduce_rmsnorm", false, E::IfNoCount,
     I::OneBlock, nullptr, nullptr, 0},
    {CollType::AllToAllVDevice, "AllToAllVDevice", "all_to_all_v_device", false, E::Never,
     I::Rows, nullptr, nullptr, 0},
    {CollType::ReduceScatterQuantized, "ReduceScatterQuantized", "reduce_scatter_quantized", true,
     E::IfNoCount, I::PerRank, nullptr, nullptr, 0},
};

constexpr bool inOrder() {
  if (std::size(kTraits) != size_t(kNumCollTypes)) return false;
  for (size_t i = 0; i < std::size(kTraits); ++i)
    if (int(kTraits[i].type) != int(i)) return false;
  return true;
}
static_assert(inOrder(), "kTraits: one row per CollType, in CollType order");

}  // namespace

const CollTraits& traits(CollType t) { return kTraits[int(t)]; }

const char* collName(CollType t) {
  return int(t) >= 0 && int(t) < kNumCollTypes ? kTraits[int(t)].name : "Unknown";
}

const char* collLabel(const CollArgs& a) { return a.what ? a.what : collName(a.type); }

const char* apiLabel(const CollArgs& a) { return a.what ? a.what : traits(a.type).api; }

bool isEmpty(const CollArgs& a, bool peerKernel) {
  switch (traits(a.type).empty) {
    case Empty::IfNoCount: return a.count == 0;
    case Empty::IfNoMessages: return a.count == 0 && !peerKernel;
    case Empty::Never: return false;
  }
  return false;
}

size_t inputBytes(const CollArgs& a, int size) {
  const size_t es = dtypeSize(a.dtype);
  switch (traits(a.type).input) {
    case Input::OneBlock: return a.count * es;
    case Input::PerRank: return a.count * es * size_t(size);
    case Input::Counts: {
      size_t n = 0;
      for (size_t c : a.sendCounts) n += c;
      return n * es;
    }
    case Input::Rows: return a.rows.sendCap * a.rows.rowElems * es;
    case Input::None: return 0;
  }
  return 0;
}

}  // namespace cclx
