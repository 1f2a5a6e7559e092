// Fused allreduce + residual add + RMSNorm (+ FP8), one shot: every rank pushes all of x into
// every peer's inbox and reduces every row itself, with the norm as the reduction's epilogue.
//
// Synchronization contract (the region and its halves: gpu/fused/shared.cuh). The grid is
// fusedBlocks() blocks on every rank; block b handles the token rows i = b, b + G, ... on every
// rank. Its call counter e gives parity par = e & 1. Rank r's half par holds inboxes [src] for
// every src != r, `slot` bytes each; row i's vector v sits at (i * V + v) * 16 of an inbox (rows
// padded to whole 16-byte vectors, the padding zero). Block b:
//   0. abort word raised at entry: poisons its share of every output, advances its counter, ends;
//   1. pushes its rows: each thread loads its vectors of x, replaces all-ones elements
//      (lamport::canon) and stores them with 16-byte volatile stores into inbox [rank] of every
//      peer;
//   2. per row: each thread reduces its vectors over ranks 0..N-1 in order (its own again from x,
//      canonicalized the same way; a peer's polled from the local inbox until no element is all
//      ones, then refilled with ones), then r, the norm and the codes (gpu/fused/row.cuh).
// No flag, fence or barrier between ranks: the data is its own flag. Block b only waits for block
// b of the peers, which pushes before it waits. In place (out == x): row i's x is read only by
// block b (pushes, own contribution) before the same block writes row i's outputs;
// residualOut == residual: a thread reads a residual vector before it writes the same vector. A
// wait that stops (abort, host request, deadline; the Waiter records it) ends the block's rows
// after a block-wide vote; the block then poisons every output and advances its counter.
#include "gpu/fused/shared.cuh"

namespace cclx {

namespace fused {

int fusedBlocks(const DeviceCtx& ctx) { return ddaTreeBlocks(ctx); }

PeerParams peerParams(const CollArgs& a, DeviceCtx& ctx) {
  PeerParams p{};
  for (int r = 0; r < ctx.size; ++r) p.region[r] = ctx.peer->region(r, StagingRegion::kFused);
  p.half = fusedHalf(ctx);
  const RmsNormArgs& m = a.rms;
  p.row = RowArgs{static_cast<const char*>(m.x), static_cast<const char*>(m.residual),
                  static_cast<char*>(m.residualOut), static_cast<const char*>(m.weight),
                  static_cast<char*>(m.out), static_cast<uint8_t*>(m.fp8Out), m.scales,
                  m.staticScale, m.tokens, m.hidden, m.eps};
  p.counters = ctx.counters + kCounterFused;
  p.fail = failParams(a, ctx);
  p.rank = ctx.rank;
  p.size = ctx.size;
  return p;
}

}  // namespace fused

namespace {

using namespace fused;

/// Bytes of one one-shot inbox (a 16-byte multiple).
size_t oneShotSlot(const DeviceCtx& ctx) {
  return (fusedHalf(ctx) / size_t(ctx.size - 1)) & ~size_t(15);
}

/// Contract (dev::peerCall, device/peer_kernel.cuh): poison every output of the rows
/// (rowPoison); body steps 1-2 above, true once the block stopped; the block's counter moves from
/// e to e + 1 on every path.
template <class T>
__global__ void __launch_bounds__(512) rmsOneShotKernel(PeerParams p) {
  __shared__ RowShared sh;
  constexpr int S = int(sizeof(T));
  const uint64_t epoch = p.counters[blockIdx.x];
  dev::peerCall(p.fail, p.counters + blockIdx.x, epoch + 1, rowPoison(p.row, S), [&] {
    dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));  // from the kernel's start
    const RowOps<T> ops(p.row);
    const int N = p.size, me = p.rank, par = int(epoch & 1);
    const size_t V = ops.V, slot = (p.half / size_t(N - 1)) & ~size_t(15);
    auto box = [&](int owner, int src) { return halfOf(p, owner, par) + size_t(slotOf(src, owner)) * slot; };
    const size_t G = gridDim.x, Tb = blockDim.x;
    for (size_t row = blockIdx.x; row < p.row.tokens; row += G)
      for (size_t v = threadIdx.x; v < V; v += Tb) {
        const dev::V16 x = ops.own(row, v);
        for (int r = 0; r < N; ++r)
          if (r != me) dev::stVolatile16(box(r, me) + (row * V + v) * 16, x);
      }
    bool failed = false, stopped = false;
    for (size_t row = blockIdx.x; row < p.row.tokens && !stopped; row += G) {
      float acc[kMaxAcc] = {};
      int i = 0;
      for (size_t v = threadIdx.x; v < V && !failed; v += Tb, ++i) {
        Words ar, rv;
        if (!reduceUnit(ops, row, v, N, me, [&](int r) { return box(me, r); }, (row * V + v) * 16,
                        wait, ar)) {
          failed = true;
          break;
        }
        ops.residual(row, v, i, ar, rv, acc);
      }
      if (dev::syncThreadsOr(failed)) {
        stopped = true;
        break;
      }
      ops.finishRow(row, acc, sh, [](size_t, const Words&) {}, [](size_t, const uint32_t*) {},
                    [](float) {});
    }
    return stopped;
  });
}

class FusedOneShot final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFused); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    return fusedEligible(a, ctx) && a.rms.tokens * rowVectors(a) * 16 <= oneShotSlot(ctx);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    constexpr const char* kWhat = "fused one-shot allreduce + RMSNorm";
    const auto kernel = dev::dispatchDtype(dev::RowTypes{}, a.dtype, kWhat,
                                           [&]<class T>() { return &rmsOneShotKernel<T>; });
    const PeerParams p = peerParams(a, ctx);
    const int G = fusedBlocks(ctx), threads = rowThreads(rowVectors(a));
    dev::launchKernel(kWhat, kernel, G, threads, stream, p);
  }
};

}  // namespace

std::unique_ptr<DeviceAlgo> makeFusedOneShot() { return std::make_unique<FusedOneShot>(); }

}  // namespace cclx
