// What the fused peer kernels (oneshot.cu, twoshot.cu) share: their parameters, the region layout
// and the host-side set-up. Both use the data-as-flag ("Lamport") protocol of
// gpu/device/lamport.cuh's kernels in a staging region of their own (StagingRegion::kFused, all
// ones at init), and ONE call counter per block (kCounterFused; the grid is always fusedBlocks()
// blocks), so that every fused call of either kind counts in the same sequence and has parity
// e & 1:
//   - the region is cut into two halves, one per parity; a call writes only into its parity's
//     half, so a faster peer's next call (of either kind) never touches what this rank still
//     reads;
//   - within a half each call lays out its inboxes as it needs (the one-shot and the two-shot
//     differently); every byte a call pushes is read and refilled with ones by its receiver in
//     the same call, so the half is all ones again when the call ends on that rank;
//   - a rank writes a half again two calls later only after it has received, in the call in
//     between, data that each peer pushed after its earlier call's kernel had finished (every
//     call moves at least one vector from every rank to every other: the one-shot always, the
//     two-shot because it runs only with at least one row per rank); peer kernels are stream-
//     ordered on every rank (gpu/backend.cc).
// Failure model (device/fail.cuh): every block checks the abort word at entry and polls through a
// dev::Waiter; a block that stops poisons every output and still advances its counter.
#pragma once

#include "gpu/fused/row.cuh"
#include "gpu/device/lamport.cuh"

#include "gpu/fused/fused.h"

namespace cclx {
namespace fused {

struct PeerParams {
  char* region[kMaxRanks];  // kFused region base of every rank
  size_t half;              // bytes of one parity half
  RowArgs row;
  uint64_t* counters;       // kCounterFused, one per block
  FailParams fail;
  int rank, size;
  // two-shot: inbox sizes within a half (bytes)
  size_t rsSlot, agSlot, agRow;
  size_t agY, agQ, agScale;  // offsets in an all-gather row (agY / agQ: 0 when absent)
};

/// Parity half `par` of rank `owner`'s region.
__device__ __forceinline__ char* halfOf(const PeerParams& p, int owner, int par) {
  return p.region[owner] + size_t(par) * p.half;
}
/// Index of src's inbox among owner's N - 1 inboxes.
__host__ __device__ __forceinline__ int slotOf(int src, int owner) {
  return src < owner ? src : src - 1;
}

/// One 16-byte unit of the reduction, the same in both kernels: the sum over ranks 0..N-1 in
/// order of x's vector v of `row` (this rank's own read from x, each peer's taken from
/// inbox(r) + off once no element is all ones, then refilled with ones), written to `ar` as
/// RowOps' words. False, with nothing refilled after the peer that stopped the wait, when a wait
/// stops (the Waiter records why).
template <class T, class Inbox>
__device__ __forceinline__ bool reduceUnit(const RowOps<T>& ops, size_t row, size_t v, int N,
                                           int me, Inbox&& inbox, size_t off, dev::Waiter& wait,
                                           Words& ar) {
  constexpr int S = RowOps<T>::S;
  dev::UnitAcc<T, RedOpKind::SUM, 16> sum;
  const dev::RedRt<T, RedOpKind::SUM> plain(RedOpKind::SUM, 1.0);
  for (int r = 0; r < N; ++r) {
    dev::V16 x;
    if (r == me) x = ops.own(row, v);
    else if (!dev::takeUnit16<S>(inbox(r) + off, wait, r, x)) return false;
    const Words w = {uint32_t(x.lo), uint32_t(x.lo >> 32), uint32_t(x.hi), uint32_t(x.hi >> 32)};
    sum.add(w, r == 0, plain);
  }
  for (int r = 0; r < N; ++r)
    if (r != me) dev::stFill16(inbox(r) + off, lamport::kEmpty);
  sum.result(N, plain, ar);
  return true;
}

/// poison() of the peer-kernel skeleton (device/peer_kernel.cuh): every output of the rows.
struct RowPoison {
  const RowArgs& a;
  size_t esize;
  __device__ __forceinline__ void operator()(bool all) const {
    if (all) poisonAll(a, esize);
    else poisonShare(a, esize);
  }
};
__device__ __forceinline__ RowPoison rowPoison(const RowArgs& a, size_t esize) { return {a, esize}; }

/// Blocks of every fused peer kernel (identical on every rank: the call counters depend on it).
int fusedBlocks(const DeviceCtx& ctx);
/// Bytes of one parity half of the region.
inline size_t fusedHalf(const DeviceCtx& ctx) {
  return (ctx.peer->regionBytes(StagingRegion::kFused) / 2) & ~size_t(255);
}

/// Host: the parameters every fused peer kernel takes.
PeerParams peerParams(const CollArgs& a, DeviceCtx& ctx);

/// Host: rows of x as the kernels see them.
inline size_t rowVectors(const CollArgs& a) { return rms::rowVecs(a.rms.hidden, dtypeSize(a.dtype)); }

/// Host: the fused kernels take these arguments at all (peer memory, 2+ ranks, a row type).
inline bool fusedEligible(const CollArgs& a, const DeviceCtx& ctx) {
  return a.type == CollType::AllReduceRmsNorm && ctx.peerUsable() && ctx.size >= 2 &&
         a.rms.tokens > 0 &&
         (a.dtype == DataType::f32 || a.dtype == DataType::bf16 || a.dtype == DataType::f16);
}

}  // namespace fused
}  // namespace cclx
