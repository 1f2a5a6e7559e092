// The collectives: their kinds (CollType) and one table of traits per collective that every layer
// reads instead of switching on the kind: the names in messages, whether it reduces, when a call
// moves nothing on any rank, how its counts become a rank's input bytes, and its rows of the
// per-collective settings (low precision, the direct-access size). Of cclx, only the public header.
#pragma once

#include <cclx/cclx.hpp>

#include <cstddef>
#include <cstdint>

namespace cclx {

struct Config;
struct CollArgs;

enum class CollType : int {
  AllReduce,
  Reduce,
  Broadcast,
  AllGather,      // recv = concat of sends (recvList non-empty: list variant)
  ReduceScatter,  // sendList non-empty: list variant
  AllToAll,
  AllToAllV,
  Send,
  Recv,
  Barrier,
  SendRecv,        // grouped point to point (sends/recvs); scatter, gather, all-gather-v and
                   // all-to-all (lists) are lowered onto it by Comm (`what` names them)
  ReduceScatterV,  // sendList (size() entries of recvCounts[r] elements); recv gets recvCounts[rank]
  AllReduceRmsNorm,  // fused allreduce + residual add + RMSNorm (+ FP8): CollArgs::rms
  AllToAllVDevice,   // split sizes in rows where the data is (CollArgs::rows)
  ReduceScatterQuantized,  // f32 in/out, bf16 stochastic rounding on the wire (CollArgs::seed)
};
inline constexpr int kNumCollTypes = int(CollType::ReduceScatterQuantized) + 1;

/// A set of collectives (bit t: CollType t).
using CollSet = uint32_t;
constexpr CollSet collBit(CollType t) { return CollSet(1) << int(t); }
/// One-collective sets by name, for tables: coll::AllGather | coll::ReduceScatter.
namespace coll {
#define CCLX_COLL_SET(t) inline constexpr CollSet t = collBit(CollType::t);
CCLX_COLL_SET(AllReduce) CCLX_COLL_SET(Reduce) CCLX_COLL_SET(Broadcast) CCLX_COLL_SET(AllGather)
CCLX_COLL_SET(ReduceScatter) CCLX_COLL_SET(AllToAll) CCLX_COLL_SET(AllToAllV) CCLX_COLL_SET(Send)
CCLX_COLL_SET(Recv) CCLX_COLL_SET(Barrier) CCLX_COLL_SET(SendRecv) CCLX_COLL_SET(ReduceScatterV)
CCLX_COLL_SET(AllReduceRmsNorm) CCLX_COLL_SET(AllToAllVDevice) CCLX_COLL_SET(ReduceScatterQuantized)
#undef CCLX_COLL_SET
}  // namespace coll

/// When a call has nothing to move on any rank, so that every rank skips it alike.
enum class Empty : uint8_t {
  IfNoCount,     // count 0: the count is the same on every rank of the call
  IfNoMessages,  // count 0 (this rank's messages), unless a peer kernel runs it on every rank
  Never,         // counts differ per rank or are not known on the host, or there is no count
};

/// How a rank's input is laid out, for its size in bytes (inputBytes).
enum class Input : uint8_t {
  OneBlock,   // count elements
  PerRank,    // count elements per rank (size blocks)
  Counts,     // the sum of sendCounts
  Rows,       // rows.sendCap rows of rows.rowElems elements
  None,       // nothing is read (Recv, Barrier)
};

/// The traits of one collective. Contract: one row per CollType, in CollType order (checked at
/// compile time); a new collective is its CollType, one row here, its Comm method and its rows
/// in the algorithm catalogue (core/select/algorithms.def).
struct CollTraits {
  CollType type;
  const char* name;  // in the library's messages ("AllReduce")
  const char* api;   // the Python / torchcomms method ("all_reduce")
  bool reduction;    // takes a reduction op (checked against the dtype)
  Empty empty;
  Input input;
  bool Config::*lowPrecision;  // CCLX_LOW_PRECISION_<COLL>, or nullptr: never FP8
  size_t Config::*ddaMax;      // CCLX_DDA_<COLL>_MAX_BYTES (0 = ddaMaxDefault), or nullptr
  size_t ddaMaxDefault;        // bytes of a rank's larger buffer auto runs on DDA (0 = never)
};

/// The bitwise reductions (NCCL has none; the direct-access kernels take them for integers).
inline bool isBitwise(RedOpKind k) {
  return k == RedOpKind::BAND || k == RedOpKind::BOR || k == RedOpKind::BXOR;
}

/// The row of `t`.
const CollTraits& traits(CollType t);
/// traits(t).name; "Unknown" for a value outside CollType.
const char* collName(CollType t);
/// The name of a call in messages: the lowered collective's (`what`) when set, else collName.
const char* collLabel(const CollArgs& a);
/// The name of a call in the Python API's words: `what` when set, else traits(t).api.
const char* apiLabel(const CollArgs& a);
/// True when `a` moves nothing on any rank: every rank skips it alike. `peerKernel`: the call
/// runs on a peer kernel, which every rank of a grouped call joins whatever its own count.
bool isEmpty(const CollArgs& a, bool peerKernel);
/// Bytes of this rank's input (traits(a.type).input) with `size` ranks.
size_t inputBytes(const CollArgs& a, int size);

}  // namespace cclx
