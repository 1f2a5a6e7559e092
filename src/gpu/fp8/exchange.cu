// FP8 all-gather, reduce-scatter and all-to-all on peer memory: one kernel each (one template),
// push model, two teams per CTA. Count is per rank segment; codec blocks are aligned to each
// segment's start.
//
// CTA c handles tiles c, c + grid, ... (tileBlocks codec blocks of the segment; its i-th tile has
// epoch e_i = counter[c] + 1 + i) and pairs only with CTA c of the other ranks. Each rank's
// staging holds, per CTA, two inbox buffers (b = e_i % 2) with one slot per source rank.
//   A (producer): after flag[3] >= e_(i-2) from every rank (every consumer finished reading
//      buffer b, tile i - 2), quantize and write into the inboxes [b][source = me]:
//      AllGather: the own tile once, stored into every rank's inbox (peers first);
//      ReduceScatter / AllToAll: segment q's tile into rank q's inbox (each round: units u and
//      u + GPC of every segment, peers' first); AllToAll pushes only the peers' segments.
//      Then flag[0] = e_i to every rank.
//   B (consumer): AllToAll first quantizes the own segment's tile and decodes it in registers
//      straight into the output (the bits a peer's copy decodes to; no wait needed, so it
//      overlaps the peers' pushes). After flag[0] >= e_i from every rank: AllGather / AllToAll
//      dequantize inbox [b][s] into output segment s for every s (AllToAll: s != me);
//      ReduceScatter reduces inbox [b][0..N-1] in rank order (float, AVG divides) into the
//      output. Then flag[3] ("consumed") = e_i to every rank.
// The producer runs up to two tiles ahead of the consumer, so NVLink pushes overlap the local
// decoding. The first two tiles of a call need no wait: beginCall() waited for the peers' "done"
// flag of their previous FP8 call, published after both teams' last reads. In place, a tile's
// output is written by the consumer only after flag[0] of that tile from every rank, i.e. after
// every producer read its input; an AllToAll own-segment element is read and then written by
// the same consumer thread, and no producer or peer reads it. Flags: st.release.sys
// after the team's named barrier, ld.acquire.sys then the team's barrier (fp8_device.cuh). CTAs
// never wait on CTAs of the same GPU; at most 128 CTAs of 512 threads and one per SM, all
// co-resident.
#include "gpu/fp8/fp8.h"
#include "gpu/fp8/device.cuh"
#include "base/error.h"

namespace cclx {
namespace fp8dev {
namespace {

enum Mode : int { kAllGather = 0, kReduceScatter = 1, kAllToAll = 2 };

struct ExTile {
  size_t tb0, nb;
  __device__ ExTile(const Params& p, size_t tile) {
    tb0 = tile * p.tileBlocks;
    nb = p.tileBlocks < p.nbAll - tb0 ? p.tileBlocks : p.nbAll - tb0;
  }
};

/// Inbox [epoch % 2][src] of rank `owner` for this CTA.
__device__ __forceinline__ char* exBox(const Params& p, size_t S, int owner, uint64_t epoch,
                                       int src) {
  return p.staging[owner] + size_t(blockIdx.x) * p.ctaBytes +
         (size_t(epoch & 1u) * size_t(p.size) + size_t(src)) * S;
}

/// A: quantize and push; each round handles units u and u + GPC, both loads in flight together.
/// Destinations peers first, then (AllGather, ReduceScatter) the own inbox: AllGather quantizes
/// its tile once for all of them, ReduceScatter quantizes segment q for rank q, AllToAll pushes
/// only the peers' segments (the consumer handles the own one, exOwnSegment).
template <class T, int B, int M>
__device__ void exPhaseA(const Params& p, const Team& tm, const ExTile& t, uint64_t epoch,
                         size_t S, size_t mo) {
  constexpr int G = B / kEPT;
  const int GPC = tm.threads / G, lane = tm.tid() % G, grp = tm.tid() / G, N = p.size;
  const int nDst = M == kAllToAll ? N - 1 : N;
  const T* send = reinterpret_cast<const T*>(p.send);
  for (size_t u0 = 0; u0 < t.nb; u0 += 2 * size_t(GPC)) {
    const size_t ua = u0 + grp, ub = ua + GPC;
    const bool actA = ua < t.nb, actB = ub < t.nb;
    uint4 ca, cb;
    fp8::Meta ma, mb;
    for (int k = 1; k <= nDst; ++k) {
      const int q = (p.rank + k) % N;
      if (M != kAllGather || k == 1) {
        const T* seg = M == kAllGather ? send : send + size_t(q) * p.count;
        float va[kEPT], vb[kEPT];
        loadBlock16x2<T, B>(seg, t.tb0 + ua, actA ? p.count : 0, t.tb0 + ub, actB ? p.count : 0,
                            lane, va, vb);
        ca = quantize16(va, G, ma);
        cb = quantize16(vb, G, mb);
      }
      char* dst = exBox(p, S, q, epoch, p.rank);
      if (actA) putUnit<B>(dst, mo, ua, lane, ca, ma);
      if (actB) putUnit<B>(dst, mo, ub, lane, cb, mb);
    }
  }
}

/// AllToAll, consumer team: the own segment never passes through staging. Its units are
/// quantized exactly as the producer quantizes a segment for a peer (same lanes, groups and
/// zero fill) and decoded in registers straight into the output, i.e. the bits a peer's copy
/// decodes to. This runs before the team waits for the peers' tile, so it overlaps their pushes.
template <class T, int B>
__device__ void exOwnSegment(const Params& p, const Team& tm, const ExTile& t) {
  constexpr int G = B / kEPT;
  const int GPC = tm.threads / G, lane = tm.tid() % G, grp = tm.tid() / G;
  const T* src = reinterpret_cast<const T*>(p.send) + size_t(p.rank) * p.count;
  T* dst = reinterpret_cast<T*>(p.recv) + size_t(p.rank) * p.count;
  for (size_t u0 = 0; u0 < t.nb; u0 += 2 * size_t(GPC)) {  // uniform trip count: shuffles
    const size_t ua = u0 + grp, ub = ua + GPC;
    const bool actA = ua < t.nb, actB = ub < t.nb;
    float va[kEPT], vb[kEPT];
    loadBlock16x2<T, B>(src, t.tb0 + ua, actA ? p.count : 0, t.tb0 + ub, actB ? p.count : 0, lane,
                        va, vb);
    fp8::Meta ma, mb;
    const uint4 ca = quantize16(va, G, ma);
    const uint4 cb = quantize16(vb, G, mb);
    if (actA) {
      dequantize16(ca, ma, va);
      storeBlock16<T, B>(dst, t.tb0 + ua, p.count, lane, va);
    }
    if (actB) {
      dequantize16(cb, mb, vb);
      storeBlock16<T, B>(dst, t.tb0 + ub, p.count, lane, vb);
    }
  }
}

/// B: unpack (and reduce) from the local inbox; per round two units of two sources are loaded
/// before any is decoded.
template <class T, int B, int M>
__device__ void exPhaseB(const Params& p, const Team& tm, const ExTile& t, uint64_t epoch,
                         size_t S, size_t mo) {
  constexpr int G = B / kEPT;
  const int GPC = tm.threads / G, lane = tm.tid() % G, grp = tm.tid() / G, N = p.size;
  T* recv = reinterpret_cast<T*>(p.recv);
  const char* in = exBox(p, S, p.rank, epoch, 0);  // source s: + s * S
  // AllToAll: the producer already wrote the own segment.
  auto skip = [&](int s) { return M == kAllToAll && s == p.rank; };
  for (size_t u0 = grp; u0 < t.nb; u0 += 2 * size_t(GPC)) {  // no shuffles: per-group loop
    const size_t u[2] = {u0, u0 + GPC};
    bool has[2];  // unit h exists (u[0] does: loop condition)
#pragma unroll
    for (int h = 0; h < 2; ++h) has[h] = u[h] < t.nb;
    float acc[2][kEPT];
    for (int s0 = 0; s0 < N; s0 += 2) {  // sources in order; two at a time
      uint4 c[2][2];
      fp8::Meta m[2][2];
#pragma unroll
      for (int k = 0; k < 2; ++k)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          c[k][h] = make_uint4(0, 0, 0, 0);
          m[k][h] = 0;
          if (s0 + k < N && has[h] && !skip(s0 + k))
            getUnit<B>(in + size_t(s0 + k) * S, mo, u[h], lane, c[k][h], m[k][h]);
        }
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int s = s0 + k;
        if (s >= N || skip(s)) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (!has[h]) continue;
          float v[kEPT];
          dequantize16(c[k][h], m[k][h], v);
          if constexpr (M == kReduceScatter) {
#pragma unroll
            for (int j = 0; j < kEPT; ++j) acc[h][j] = s == 0 ? v[j] : __fadd_rn(acc[h][j], v[j]);
          } else {
            storeBlock16<T, B>(recv + size_t(s) * p.count, t.tb0 + u[h], p.count, lane, v);
          }
        }
      }
    }
    if constexpr (M == kReduceScatter) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!has[h]) continue;
        if (p.avg) {
#pragma unroll
          for (int j = 0; j < kEPT; ++j) acc[h][j] = __fdiv_rn(acc[h][j], float(N));
        }
        storeBlock16<T, B>(recv, t.tb0 + u[h], p.count, lane, acc[h]);
      }
    }
  }
}

/// Contract (dev::peerCall, device/peer_kernel.cuh): poison `recv`; body beginCall, then the
/// producer and consumer teams over this CTA's tiles, true in a thread whose wait stopped;
/// advance endCall: "done" only when the call completed, the CTA's counter moves from e0 to
/// e0 + its tiles on every path.
template <class T, int B, int M>
__global__ void __launch_bounds__(kThreads, 1) exchangeKernel(Params p) {
  dev::namedBarriersInit();  // the teams' barriers (HIP: emulated in shared memory)
  const int cta = blockIdx.x;
  const uint64_t e0 = p.counters[cta];
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  const size_t S = fp8::packedBytes(p.tileBlocks, B), mo = fp8::metaOffset(p.tileBlocks, B);
  const size_t nIt = (p.nTiles - size_t(cta) + gridDim.x - 1) / gridDim.x;  // tiles of this CTA
  auto body = [&] {
    if (!beginCall(p, e0, wait)) return true;
    bool ok = true;
    if (int(threadIdx.x) < p.producerThreads) {
      const Team tm{1, 0, p.producerThreads};
      for (size_t i = 0; i < nIt && ok; ++i) {
        const uint64_t e = e0 + 1 + i;
        if (i >= 2) ok = teamWait(p, tm, kPhaseConsumed, e - 2, wait);
        if (!ok) break;
        exPhaseA<T, B, M>(p, tm, ExTile(p, size_t(cta) + i * gridDim.x), e, S, mo);
        teamSignal(p, tm, 0, e);
      }
    } else {
      const Team tm{2, p.producerThreads, kThreads - p.producerThreads};
      for (size_t i = 0; i < nIt && ok; ++i) {
        const uint64_t e = e0 + 1 + i;
        const ExTile t(p, size_t(cta) + i * gridDim.x);
        if constexpr (M == kAllToAll) exOwnSegment<T, B>(p, tm, t);
        ok = teamWait(p, tm, 0, e, wait);
        if (!ok) break;
        exPhaseB<T, B, M>(p, tm, t, e, S, mo);
        teamSignal(p, tm, kPhaseConsumed, e);
      }
    }
    return !ok;  // a wait stopped (recorded in the error words)
  };
  dev::peerCall(p.fail, dev::PoisonBuf{p.recv, p.outBytes}, body,
                [&](bool ok) { endCall(p, e0 + nIt, ok); });
}

/// Staging one CTA needs for a tile of tb blocks: two buffers of one packed run per source.
struct ExchangeNeed {
  int n;
  size_t operator()(size_t tb, size_t B) const { return 2 * size_t(n) * fp8::packedBytes(tb, B); }
};

template <int M>
class Fp8Exchange : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFp8); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    const CollType want = M == kAllGather       ? CollType::AllGather
                          : M == kReduceScatter ? CollType::ReduceScatter
                                                : CollType::AllToAll;
    if (a.type != want || !a.recvList.empty() || !a.sendList.empty()) return false;
    if (a.dtype != DataType::f32 && a.dtype != DataType::bf16 && a.dtype != DataType::f16)
      return false;
    if (M == kReduceScatter && a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG)
      return false;
    Params p;
    return makeParams(a, ctx, ExchangeNeed{ctx.size}, p, true);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    const std::string what = strFormat("fp8 %s", collName(a.type));
    const auto kernel = kernelFor(a.dtype, ctx.cfg.fp8BlockSize, what.c_str(),
                                  [&]<class T, int B>() { return &exchangeKernel<T, B, M>; });
    Params p;
    CCLX_REQUIRE(makeParams(a, ctx, ExchangeNeed{ctx.size}, p, true), cclxInternalError,
                 "fp8 %s launched without usable peer memory", collName(a.type));
    if (p.nTiles == 0) return;
    const int grid = gridFor(p, ctx);
    dev::launchKernel(what.c_str(), kernel, grid, kThreads, stream, p);
  }
};

}  // namespace
}  // namespace fp8dev

std::unique_ptr<DeviceAlgo> makeFp8AllGather() {
  return std::make_unique<fp8dev::Fp8Exchange<fp8dev::kAllGather>>();
}
std::unique_ptr<DeviceAlgo> makeFp8ReduceScatter() {
  return std::make_unique<fp8dev::Fp8Exchange<fp8dev::kReduceScatter>>();
}
std::unique_ptr<DeviceAlgo> makeFp8AllToAll() {
  return std::make_unique<fp8dev::Fp8Exchange<fp8dev::kAllToAll>>();
}

}  // namespace cclx
