// Fused allreduce + residual add + RMSNorm (+ FP8), two shot: reduce-scatter by token rows, the
// norm on the owner, all-gather of the finished rows. The norm needs a whole row, so rows (not
// bytes) are what is scattered: rank s owns rows [first(s), first(s + 1)) (fused::firstRow, the
// first tokens % N ranks one row more); it runs only with at least one row per rank.
//
// Synchronization contract (the region and its halves: gpu/fused/shared.cuh). The grid is
// fusedBlocks() blocks; block b handles rows i = b, b + G, ... in every phase on every rank, and
// its call counter e gives parity par = e & 1. Half par of rank r holds N - 1 reduce-scatter
// inboxes [src] (rsSlot bytes: rows of r, padded to 16-byte vectors) and then N - 1 all-gather
// inboxes [owner] (agSlot bytes: agRow bytes per row of the owner: r, then y when wanted, then
// with FP8 the codes padded to 16 bytes and a 16-byte scale piece: the scale's bits, the word 1, 8
// zero bytes). Every rank passes the same kinds of outputs (y or not, FP8 or not). Block b:
//   0. abort word raised at entry: poisons its share of every output, advances its counter, ends;
//   1. for its rows owned by another rank s: pushes x (canonicalized, lamport::canon) into s's
//      reduce-scatter inbox [rank] (16-byte volatile stores);
//   2. for its own rows: reduces ranks 0..N-1 in order (its x again from the user buffer, a
//      peer's polled from the reduce-scatter inbox until no element is all ones, then refilled),
//      computes r, y, the codes and the scale (gpu/fused/row.cuh) into its outputs and pushes each
//      piece (r and y canonicalized; codes never 0xFF; the scale piece a positive float and
//      zeros) into the all-gather inbox [rank] of every peer;
//   3. for its rows owned by another rank s: polls each piece from all-gather inbox [s] until it
//      holds no empty element (r, y) / no 0xFF byte (codes) / no all-ones word (scale), writes it
//      to the outputs and refills it with ones.
// Block b waits only for block b of the peers (the same rows), whose pushes of step 1 precede
// every wait and whose pushes of step 2 follow waits on step-1 data only: no cycle. In place
// (out == x): a row's x is read in steps 1/2 by block b, which writes the row's outputs in step 2
// (same thread per vector) or step 3 (after a block barrier); residualOut == residual: only the
// owner reads the residual of a row, each vector before it writes it. A wait that stops (abort,
// host request, deadline; recorded by the Waiter) ends the block's work after a block-wide vote;
// the block poisons every output and advances its counter.
#include "gpu/fused/shared.cuh"

namespace cclx {
namespace {

using namespace fused;

/// The all-gather row layout of a call and the slot sizes; false when they do not fit a half.
bool twoShotLayout(const CollArgs& a, const DeviceCtx& ctx, PeerParams* p) {
  const size_t N = size_t(ctx.size), V = rowVectors(a);
  const size_t rows = (a.rms.tokens + N - 1) / N;
  const bool fp8 = a.rms.fp8Out != nullptr;
  const size_t codes = (V * (16 / dtypeSize(a.dtype)) + 15) & ~size_t(15);
  const size_t agY = a.rms.out ? V * 16 : 0;
  const size_t agQ = fp8 ? V * 16 + agY : 0;
  const size_t agScale = fp8 ? agQ + codes : 0;
  const size_t agRow = V * 16 + agY + (fp8 ? codes + 16 : 0);
  const size_t rsSlot = rows * V * 16, agSlot = rows * agRow;
  if ((N - 1) * (rsSlot + agSlot) > fusedHalf(ctx)) return false;
  if (p) {
    p->rsSlot = rsSlot;
    p->agSlot = agSlot;
    p->agRow = agRow;
    p->agY = agY;
    p->agQ = agQ;
    p->agScale = agScale;
  }
  return true;
}

/// 8-byte piece `w` of codes holds an unwritten (0xFF) byte among its low `bytes` bytes.
__device__ __forceinline__ bool codesEmpty(uint64_t w, int bytes) {
  for (int i = 0; i < bytes; ++i)
    if (((w >> (8 * i)) & 0xffu) == 0xffu) return true;
  return false;
}

/// Contract (dev::peerCall, device/peer_kernel.cuh): poison every output of the rows
/// (rowPoison); body steps 1-3 above, true in a thread that stopped or once the block stopped;
/// the block's counter moves from e to e + 1 on every path.
template <class T>
__global__ void __launch_bounds__(512) rmsTwoShotKernel(PeerParams p) {
  __shared__ RowShared sh;
  constexpr int S = int(sizeof(T)), E = 16 / S;
  const uint64_t epoch = p.counters[blockIdx.x];
  dev::peerCall(p.fail, p.counters + blockIdx.x, epoch + 1, rowPoison(p.row, S), [&] {
    dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));  // from the kernel's start
    const RowOps<T> ops(p.row);
    const int N = p.size, me = p.rank, par = int(epoch & 1);
    const size_t V = ops.V, tokens = p.row.tokens, G = gridDim.x, Tb = blockDim.x;
    // Inbox [src] of rank `owner`: reduce-scatter, then all-gather.
    auto rsBox = [&](int owner, int src) {
      return halfOf(p, owner, par) + size_t(slotOf(src, owner)) * p.rsSlot;
    };
    auto agBox = [&](int reader, int owner) {
      return halfOf(p, reader, par) + size_t(N - 1) * p.rsSlot + size_t(slotOf(owner, reader)) * p.agSlot;
    };
    // 1. push x of rows owned by others.
    for (size_t row = blockIdx.x; row < tokens; row += G) {
      const int s = ownerOf(tokens, N, row);
      if (s == me) continue;
      char* dst = rsBox(s, me) + (row - firstRow(tokens, N, s)) * V * 16;
      for (size_t v = threadIdx.x; v < V; v += Tb) dev::stVolatile16(dst + v * 16, ops.own(row, v));
    }
    bool failed = false, stopped = false;
    const size_t mine0 = firstRow(tokens, N, me);
    // 2. reduce, normalize and send the own rows.
    for (size_t row = blockIdx.x; row < tokens && !stopped; row += G) {
      if (ownerOf(tokens, N, row) != me) continue;
      const size_t k = row - mine0;
      auto agAt = [&](int r, size_t off) { return agBox(r, me) + k * p.agRow + off; };
      float acc[kMaxAcc] = {};
      int i = 0;
      for (size_t v = threadIdx.x; v < V && !failed; v += Tb, ++i) {
        Words ar, rv;
        if (!reduceUnit(ops, row, v, N, me, [&](int r) { return rsBox(me, r); }, (k * V + v) * 16,
                        wait, ar)) {
          failed = true;
          break;
        }
        ops.residual(row, v, i, ar, rv, acc);
        const dev::V16 out{lamport::canon<S>(uint64_t(rv[0]) | uint64_t(rv[1]) << 32),
                           lamport::canon<S>(uint64_t(rv[2]) | uint64_t(rv[3]) << 32)};
        for (int r = 0; r < N; ++r)
          if (r != me) dev::stVolatile16(agAt(r, v * 16), out);
      }
      if (dev::syncThreadsOr(failed)) {
        stopped = true;
        break;
      }
      ops.finishRow(
          row, acc, sh,
          [&](size_t v, const Words& y) {
            if (!p.row.y) return;
            const dev::V16 out{lamport::canon<S>(uint64_t(y[0]) | uint64_t(y[1]) << 32),
                               lamport::canon<S>(uint64_t(y[2]) | uint64_t(y[3]) << 32)};
            for (int r = 0; r < N; ++r)
              if (r != me) dev::stVolatile16(agAt(r, p.agY + v * 16), out);
          },
          [&](size_t v, const uint32_t* c) {
            for (int r = 0; r < N; ++r) {
              if (r == me) continue;
              char* dst = agAt(r, p.agQ + v * E);
              if (E == 8) dev::stVolatile8(dst, c[0], c[1]);
              else dev::stVolatile4(dst, c[0]);
            }
          },
          [&](float scale) {
            // The word above the scale is 1: the piece is never all ones, whatever the scale.
            const dev::V16 piece{uint64_t(math::f32Bits(scale)) | uint64_t(1) << 32, 0};
            for (int r = 0; r < N; ++r)
              if (r != me) dev::stVolatile16(agAt(r, p.agScale), piece);
          });
    }
    __syncthreads();  // step 3 writes outputs of rows whose x this block read in step 1
    // 3. take the rows owned by others.
    for (size_t row = blockIdx.x; row < tokens && !stopped; row += G) {
      const int s = ownerOf(tokens, N, row);
      if (s == me) continue;
      const char* in = agBox(me, s) + (row - firstRow(tokens, N, s)) * p.agRow;
      // Polls the 16 bytes at `src` until `full` says they have arrived; then refills them.
      auto take16 = [&](const char* src, auto&& full, dev::V16& x) {
        x = dev::ldVolatile16(src);
        while (!full(x)) {
          if (!wait.again(s)) {
            failed = true;
            return false;
          }
          x = dev::ldVolatile16(src);
        }
        dev::stFill16(const_cast<char*>(src), lamport::kEmpty);
        return true;
      };
      auto elems = [](const dev::V16& x) {
        return !lamport::hasEmpty<S>(x.lo) && !lamport::hasEmpty<S>(x.hi);
      };
      for (size_t v = threadIdx.x; v < V && !failed; v += Tb) {
        dev::V16 x;
        if (!take16(in + v * 16, elems, x)) break;
        Words w = {uint32_t(x.lo), uint32_t(x.lo >> 32), uint32_t(x.hi), uint32_t(x.hi >> 32)};
        ops.store(p.row.rOut, row, v, w);
        if (p.row.y) {
          if (!take16(in + p.agY + v * 16, elems, x)) break;
          Words y = {uint32_t(x.lo), uint32_t(x.lo >> 32), uint32_t(x.hi), uint32_t(x.hi >> 32)};
          ops.store(p.row.y, row, v, y);
        }
        if (p.row.q) {
          const char* src = in + p.agQ + v * E;
          uint32_t c[2];
          for (;;) {
            if (E == 8) {
              const dev::V16 two = dev::ldVolatile16(src - (v & 1) * 8);  // the aligned 16 bytes
              const uint64_t piece = (v & 1) ? two.hi : two.lo;
              c[0] = uint32_t(piece), c[1] = uint32_t(piece >> 32);
            } else {
              c[0] = dev::ldVolatile4(src), c[1] = 0;
            }
            if (!codesEmpty(uint64_t(c[0]) | uint64_t(c[1]) << 32, E)) break;
            if (!wait.again(s)) {
              failed = true;
              break;
            }
          }
          if (failed) break;
          if (E == 8) dev::stVolatile8(const_cast<char*>(src), ~0u, ~0u);
          else dev::stVolatile4(const_cast<char*>(src), ~0u);
          dev::storeUnit<8>(reinterpret_cast<char*>(p.row.q) + row * p.row.hidden + v * E,
                            ops.valid(v), c);
        }
      }
      if (p.row.q && threadIdx.x == 0 && !failed) {
        dev::V16 x;
        if (take16(in + p.agScale, [](const dev::V16& y) { return y.lo != lamport::kEmpty; }, x))
          p.row.scales[row] = math::bitsF32(uint32_t(x.lo));
      }
    }
    return failed || stopped;
  });
}

class FusedTwoShot final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFused); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    return fusedEligible(a, ctx) && a.rms.tokens >= size_t(ctx.size) &&
           twoShotLayout(a, ctx, nullptr);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    constexpr const char* kWhat = "fused two-shot allreduce + RMSNorm";
    const auto kernel = dev::dispatchDtype(dev::RowTypes{}, a.dtype, kWhat,
                                           [&]<class T>() { return &rmsTwoShotKernel<T>; });
    PeerParams p = peerParams(a, ctx);
    twoShotLayout(a, ctx, &p);
    const int G = fusedBlocks(ctx), threads = rowThreads(rowVectors(a));
    dev::launchKernel(kWhat, kernel, G, threads, stream, p);
  }
};

}  // namespace

std::unique_ptr<DeviceAlgo> makeFusedTwoShot() { return std::make_unique<FusedTwoShot>(); }

}  // namespace cclx
