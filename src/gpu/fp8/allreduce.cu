// FP8 allreduce on peer memory: one kernel, push model (every NVLink transfer is a remote write).
//
// The message is cut into tiles of `tileBlocks` codec blocks; CTA c handles tiles c, c + grid,
// ... and pairs only with CTA c of the other ranks. Each tile's blocks are split into N shards
// (fp8::shardBlocks); rank q owns shard q. Each rank's staging holds, per CTA, an A-inbox and a
// G-inbox with one slot per peer (slotOf: the N - 1 other ranks in rank order); the own shard
// never passes through staging. Per tile, with epoch e:
//   A: quantize the peers' shards; write shard q's codes+metas into rank q's A-inbox [slot of
//      me]; signal flag[0] = e to every rank; wait flag[0] >= e from every rank.
//   B: reduce the own shard over ranks 0..N-1 in order (float, AVG divides): the peers' codes
//      from the local A-inbox, the own codes quantized again from `send` in registers, with the
//      same lanes, groups and zero fill as phase A, hence the bits a peer would have received;
//      requantize, write into every peer's G-inbox [slot of me] and, decoded, into the own
//      output; signal/wait flag[1] = e.
//   C: dequantize the peers' shards from the local G-inbox into the output, in rounds
//      interleaved with phase A of the CTA's next tile (so its pushes overlap the decoding);
//      flag[0] of the next tile is signalled after both.
// Every rank decodes the same requantized codes+metas for a shard, so all outputs are identical
// and equal to the host twin's. The order of stores inside a phase is free: only the flag after
// the phase's __syncthreads() publishes them. Tiles are balanced over the CTAs (makeParams);
// every rank computes the same tiling and grid from the same inputs.
// In place (send == recv): a tile's elements are read and written only by its CTA; phase A reads
// them before phase B; in phase B a thread writes exactly the 16 elements it read itself before;
// phase C writes only the peers' shards, which no later step of the tile reads.
// Reuse of the (single-buffered) inboxes within a call: rank W writes q's A-inbox for tile i+1
// only after waiting for q's flag[1] of tile i, published after q's last read of its A-inbox
// (phase B of tile i). W writes q's G-inbox for tile i+1 only after waiting for q's flag[0] of
// tile i+1, published after q's phase C of tile i. A of tile i+1 reads other elements than C of
// tile i writes (another tile), so interleaving them is also safe in place. Each (source,
// receiver) pair has its own slot, so the argument holds slot by slot. Across calls (of any FP8
// collective) beginCall() waits for the peers' "done" flag of the previous call.
// Flags are written with st.release.sys after __syncthreads() and read with ld.acquire.sys
// followed by __syncthreads() (gpu/device/sync.cuh). CTAs never wait on other CTAs of the same GPU;
// the grid is at most 128 CTAs of 512 threads and at most one per SM, so all are co-resident.
#include "base/error.h"
#include "gpu/fp8/device.cuh"
#include "gpu/fp8/fp8.h"

namespace cclx {
namespace fp8dev {
namespace {

/// Inbox slot of source `src` at receiver `dst` (src != dst): the N - 1 peers in rank order.
__device__ __forceinline__ size_t slotOf(int src, int dst) {
  return size_t(src < dst ? src : src - 1);
}

/// One tile of the message: its first codec block and its shards (fp8::shardBlocks).
struct ArTile {
  size_t tb0, sq, sr, len0;  // shard q = blocks [q*sq + min(q, sr), +sq + (q < sr)); len0: longest
  __device__ ArTile(const Params& p, size_t tile) {
    tb0 = tile * p.tileBlocks;
    const size_t nb = p.tileBlocks < p.nbAll - tb0 ? p.tileBlocks : p.nbAll - tb0;
    sq = nb / size_t(p.size);
    sr = nb % size_t(p.size);
    len0 = sq + (sr > 0 ? 1 : 0);
  }
  __device__ void shard(int q, size_t& b0, size_t& len) const {
    b0 = size_t(q) * sq + (size_t(q) < sr ? size_t(q) : sr);
    len = sq + (size_t(q) < sr ? 1 : 0);
  }
};

/// Contract (dev::peerCall, device/peer_kernel.cuh): poison `recv`; body beginCall, then phases
/// A, B, C of every tile of this CTA, true once a wait stopped; advance endCall: "done" only when
/// the call completed, the CTA's counter moves from e0 to e0 + its tiles on every path.
template <class T, int B>
__global__ void __launch_bounds__(kThreads, 1) fp8AllReduceKernel(Params p) {
  constexpr int G = B / kEPT, GPC = kThreads / G;
  const int lane = threadIdx.x % G, grp = threadIdx.x / G, N = p.size, cta = blockIdx.x;
  const uint64_t e0 = p.counters[cta];
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  const size_t cap = (p.tileBlocks + N - 1) / N, S = fp8::packedBytes(cap, B);
  const size_t mo = fp8::metaOffset(cap, B);
  const size_t nIt = (p.nTiles - size_t(cta) + gridDim.x - 1) / gridDim.x;  // tiles of this CTA
  const T* send = reinterpret_cast<const T*>(p.send);
  T* recv = reinterpret_cast<T*>(p.recv);
  auto body = [&] {
    if (!beginCall(p, e0, wait)) return true;
    // A, one round (CTA-uniform u0): quantize units u0 + grp and u0 + GPC + grp of every peer's
    // shard (both units' loads in flight together) and push shard q to rank q's A-inbox.
    auto pushA = [&](const ArTile& t, size_t u0) {
      const size_t ua = u0 + grp, ub = u0 + GPC + grp;
      for (int k = 1; k < N; ++k) {
        const int q = (p.rank + k) % N;
        size_t b0, bl;
        t.shard(q, b0, bl);
        const bool actA = ua < bl, actB = ub < bl;
        float va[kEPT], vb[kEPT];
        loadBlock16x2<T, B>(send, t.tb0 + b0 + ua, actA ? p.count : 0, t.tb0 + b0 + ub,
                            actB ? p.count : 0, lane, va, vb);
        fp8::Meta ma, mb;
        const uint4 ca = quantize16(va, G, ma);
        const uint4 cb = quantize16(vb, G, mb);
        char* dst = p.staging[q] + size_t(cta) * p.ctaBytes + slotOf(p.rank, q) * S;
        if (actA) putUnit<B>(dst, mo, ua, lane, ca, ma);
        if (actB) putUnit<B>(dst, mo, ub, lane, cb, mb);
      }
    };
    // C, one round: dequantize units u0 + grp and u0 + GPC + grp of every peer's shard from the
    // local G-inbox into the output (both loaded before either is decoded; no shuffles).
    auto decodeC = [&](const ArTile& t, size_t u0) {
      const char* g = p.staging[p.rank] + size_t(cta) * p.ctaBytes + size_t(N - 1) * S;
      for (int k = 1; k < N; ++k) {
        const int q = (p.rank + k) % N;
        size_t b0, bl;
        t.shard(q, b0, bl);
        const char* src = g + slotOf(q, p.rank) * S;
        uint4 c[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
        fp8::Meta m[2] = {0, 0};
  #pragma unroll
        for (int h = 0; h < 2; ++h) {
          const size_t u = u0 + grp + size_t(h) * GPC;
          if (u < bl) getUnit<B>(src, mo, u, lane, c[h], m[h]);
        }
  #pragma unroll
        for (int h = 0; h < 2; ++h) {
          const size_t u = u0 + grp + size_t(h) * GPC;
          if (!(u < bl)) continue;
          float v[kEPT];
          dequantize16(c[h], m[h], v);
          storeBlock16<T, B>(recv, t.tb0 + b0 + u, p.count, lane, v);
        }
      }
    };
    ArTile cur(p, size_t(cta));
    for (size_t u0 = 0; u0 < cur.len0; u0 += 2 * size_t(GPC)) pushA(cur, u0);
    for (size_t i = 0; i < nIt; ++i) {
      const uint64_t epoch = e0 + 1 + i;
      signalAll(p, 0, epoch);
      if (!waitAll(p, 0, epoch, wait)) return true;
      // B: reduce the own shard: the peers' codes come from the local A-inbox, the own codes are
      // quantized here from `send` exactly as phase A quantizes a shard for a peer (same elements
      // per lane, same zero fill, same group), so they are the bits a peer would have received.
      // Sources are added in rank order. The requantized result goes to every peer's G-inbox and,
      // decoded like phase C decodes it, straight to the own output.
      {
        size_t sb0, sl;
        cur.shard(p.rank, sb0, sl);
        const char* in = p.staging[p.rank] + size_t(cta) * p.ctaBytes;
        for (size_t u0 = 0; u0 < sl; u0 += GPC) {
          const size_t u = u0 + grp;
          const bool act = u < sl;
          float vo[kEPT];
          loadBlock16<T, B>(send, cur.tb0 + sb0 + u, act ? p.count : 0, lane, vo);
          fp8::Meta mOwn;
          const uint4 cOwn = quantize16(vo, G, mOwn);  // all lanes (shuffles)
          float acc[kEPT];
  #pragma unroll
          for (int j = 0; j < kEPT; ++j) acc[j] = 0.f;
          if (act) {
            for (int s0 = 0; s0 < N; s0 += 2) {  // sources in order; two loads in flight
              const bool two = s0 + 1 < N;
              uint4 c0 = cOwn, c1 = cOwn;
              fp8::Meta m0 = mOwn, m1 = mOwn;
              if (s0 != p.rank) getUnit<B>(in + slotOf(s0, p.rank) * S, mo, u, lane, c0, m0);
              if (two && s0 + 1 != p.rank)
                getUnit<B>(in + slotOf(s0 + 1, p.rank) * S, mo, u, lane, c1, m1);
              float v[kEPT];
              dequantize16(c0, m0, v);
  #pragma unroll
              for (int j = 0; j < kEPT; ++j) acc[j] = s0 == 0 ? v[j] : __fadd_rn(acc[j], v[j]);
              if (two) {
                dequantize16(c1, m1, v);
  #pragma unroll
                for (int j = 0; j < kEPT; ++j) acc[j] = __fadd_rn(acc[j], v[j]);
              }
            }
            if (p.avg) {
  #pragma unroll
              for (int j = 0; j < kEPT; ++j) acc[j] = __fdiv_rn(acc[j], float(N));
            }
          }
          fp8::Meta meta;
          uint4 c = quantize16(acc, G, meta);
          if (act) {
            for (int k = 1; k < N; ++k) {
              const int q = (p.rank + k) % N;
              putUnit<B>(p.staging[q] + size_t(cta) * p.ctaBytes +
                             (size_t(N - 1) + slotOf(p.rank, q)) * S,
                         mo, u, lane, c, meta);
            }
            float v[kEPT];
            dequantize16(c, meta, v);
            storeBlock16<T, B>(recv, cur.tb0 + sb0 + u, p.count, lane, v);
          }
        }
      }
      signalAll(p, 1, epoch);
      if (!waitAll(p, 1, epoch, wait)) return true;
      // C of this tile, interleaved round by round with A of the next one: the next tile's pushes
      // overlap this tile's local decoding. Legal here: every peer has finished phase B of this
      // tile (flag[1]), so its A-inbox is free; the peers refill this rank's G-inbox only after
      // its flag[0] of the next tile, signalled after these rounds.
      if (i + 1 < nIt) {
        const ArTile next(p, size_t(cta) + (i + 1) * gridDim.x);
        const size_t rounds = next.len0 > cur.len0 ? next.len0 : cur.len0;
        for (size_t u0 = 0; u0 < rounds; u0 += 2 * size_t(GPC)) {
          if (u0 < next.len0) pushA(next, u0);  // CTA-uniform condition: shuffles stay uniform
          decodeC(cur, u0);
        }
        cur = next;
      } else {
        for (size_t u0 = 0; u0 < cur.len0; u0 += 2 * size_t(GPC)) decodeC(cur, u0);
      }
    }
    return false;
  };
  dev::peerCall(p.fail, dev::PoisonBuf{p.recv, p.outBytes}, body,
                [&](bool ok) { endCall(p, e0 + nIt, ok); });
}

/// Staging one CTA needs for a tile of tb blocks: A-inbox and G-inbox, one shard per peer.
struct AllReduceNeed {
  int n;
  size_t operator()(size_t tb, size_t B) const {
    return 2 * size_t(n - 1) * fp8::packedBytes((tb + n - 1) / n, B);
  }
};

class Fp8AllReduce : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFp8); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    if (a.type != CollType::AllReduce) return false;
    if (a.dtype != DataType::f32 && a.dtype != DataType::bf16 && a.dtype != DataType::f16)
      return false;
    if (a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG) return false;
    Params p;
    return makeParams(a, ctx, AllReduceNeed{ctx.size}, p, false);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    constexpr const char* kWhat = "fp8 allreduce";
    const auto kernel = kernelFor(a.dtype, ctx.cfg.fp8BlockSize, kWhat,
                                  [&]<class T, int B>() { return &fp8AllReduceKernel<T, B>; });
    Params p;
    CCLX_REQUIRE(makeParams(a, ctx, AllReduceNeed{ctx.size}, p, false), cclxInternalError,
                 "fp8 allreduce launched without usable peer memory");
    if (p.nTiles == 0) return;
    const int grid = gridFor(p, ctx);
    dev::launchKernel(kWhat, kernel, grid, kThreads, stream, p);
  }
};

}  // namespace
}  // namespace fp8dev

std::unique_ptr<DeviceAlgo> makeFp8AllReduce() { return std::make_unique<fp8dev::Fp8AllReduce>(); }

}  // namespace cclx
