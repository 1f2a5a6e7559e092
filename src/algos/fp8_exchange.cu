// FP8 all-gather, reduce-scatter and all-to-all on peer memory: one kernel each (one template),
// push model. Count is per rank segment; codec blocks are aligned to each segment's start.
//
// CTA c handles tiles c, c + grid, ... (tileBlocks codec blocks of the segment) and pairs only with
// CTA c of the other ranks. Per tile with epoch e, buffer b = e % 2:
//   A: AllGather: quantize the own tile once and write it into every rank's inbox [b][source=me];
//      ReduceScatter / AllToAll: quantize segment q's tile and write it into rank q's inbox
//      [b][source=me] (each round: unit u of two segments, peers' first, so remote and local
//      stores interleave). Then signal flag[0] = e to every rank and wait flag[0] >= e from all.
//   B: AllGather / AllToAll: dequantize inbox [b][s] into output segment s, for every s.
//      ReduceScatter: reduce inbox [b][0..N-1] in rank order (float, AVG divides) into the output.
// Reuse: rank W writes q's inbox buffer b at epoch e after waiting for q's flag[0] of epoch e-1,
// which q published after its phase B of epoch e-2 (the last reader of buffer b). Across calls
// beginCall() waits for the peers' "done" flag of their previous call. Flags: st.release.sys after
// __syncthreads(), ld.acquire.sys then __syncthreads() (dda_sync.cuh). CTAs never wait on CTAs of
// the same GPU; at most 128 CTAs of 512 threads and one per SM, all co-resident.
#include <cuda_runtime.h>

#include "algos/fp8_algos.h"
#include "algos/fp8_device.cuh"
#include "core/error.h"

namespace cclx {
namespace fp8dev {
namespace {

enum Mode : int { kAllGather = 0, kReduceScatter = 1, kAllToAll = 2 };

template <class T, int B, int M>
__global__ void __launch_bounds__(kThreads, 1) exchangeKernel(Params p) {
  constexpr int G = B / kEPT, GPC = kThreads / G;
  const int lane = threadIdx.x % G, grp = threadIdx.x / G, N = p.size, cta = blockIdx.x;
  const uint64_t e0 = p.counters[cta];
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const size_t S = fp8::packedBytes(p.tileBlocks, B), mo = fp8::metaOffset(p.tileBlocks, B);
  const T* send = reinterpret_cast<const T*>(p.send);
  T* recv = reinterpret_cast<T*>(p.recv);
  if (!beginCall(p, e0, deadline)) return;
  uint64_t it = 0;
  for (size_t tile = cta; tile < p.nTiles; tile += gridDim.x, ++it) {
    const uint64_t epoch = e0 + 1 + it;
    const size_t buf = size_t(epoch & 1u);
    const size_t tb0 = tile * p.tileBlocks;
    const size_t nb = p.tileBlocks < p.nbAll - tb0 ? p.tileBlocks : p.nbAll - tb0;
    const size_t slotOff = size_t(cta) * p.ctaBytes + buf * size_t(N) * S;
    // A: quantize and push; two units per round with all their loads in flight together.
    // AllGather: units u and u + GPC of the own segment, each stored into every rank's inbox
    // (peers first). ReduceScatter / AllToAll: unit u of segments qa and qb (the peers' segments
    // first, the own one last), so remote and local stores interleave over the whole phase.
    if constexpr (M == kAllGather) {
      for (size_t u0 = 0; u0 < nb; u0 += 2 * GPC) {
        const size_t ua = u0 + grp, ub = ua + GPC;
        const bool actA = ua < nb, actB = ub < nb;
        size_t ia = 0, ib = 0;
        const int na = actA ? laneCount(p.count, tb0 + ua, B, lane, ia) : 0;
        const int nbk = actB ? laneCount(p.count, tb0 + ub, B, lane, ib) : 0;
        float va[kEPT], vb[kEPT];
        load16x2(send, ia, na, va, send, ib, nbk, vb);
        fp8::Meta ma, mb;
        const uint4 ca = quantize16(va, G, ma);
        const uint4 cb = quantize16(vb, G, mb);
        for (int k = 1; k <= N; ++k) {
          char* dst = p.staging[(p.rank + k) % N] + slotOff + size_t(p.rank) * S;
          if (actA) putUnit<B>(dst, mo, ua, lane, ca, ma);
          if (actB) putUnit<B>(dst, mo, ub, lane, cb, mb);
        }
      }
    } else {
      for (size_t u0 = 0; u0 < nb; u0 += GPC) {
        const size_t u = u0 + grp;
        const bool act = u < nb;
        size_t i0 = 0;
        const int n = act ? laneCount(p.count, tb0 + u, B, lane, i0) : 0;
        for (int k = 0; k < N; k += 2) {
          const int qa = (p.rank + 1 + k) % N, qb = (p.rank + 2 + k) % N;
          const bool hasB = k + 1 < N;
          float va[kEPT], vb[kEPT];
          load16x2(send + size_t(qa) * p.count, i0, n, va, send + size_t(qb) * p.count, i0,
                   hasB ? n : 0, vb);
          fp8::Meta ma, mb;
          const uint4 ca = quantize16(va, G, ma);
          const uint4 cb = quantize16(vb, G, mb);
          if (act)
            putUnit<B>(p.staging[qa] + slotOff + size_t(p.rank) * S, mo, u, lane, ca, ma);
          if (act && hasB)
            putUnit<B>(p.staging[qb] + slotOff + size_t(p.rank) * S, mo, u, lane, cb, mb);
        }
      }
    }
    signalAll(p, 0, epoch);
    if (!waitAll(p, 0, epoch, deadline)) return;
    // B: unpack (and reduce) from the local inbox; two sources' units are loaded at a time.
    const char* in = p.staging[p.rank] + slotOff;
    for (size_t u = grp; u < nb; u += GPC) {  // no shuffles below: per-group loop
      size_t i0;
      const int n = laneCount(p.count, tb0 + u, B, lane, i0);
      if (n == 0) continue;
      float acc[kEPT];
      for (int s0 = 0; s0 < N; s0 += 2) {  // sources in order; two loads in flight
        const bool two = s0 + 1 < N;
        uint4 c[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
        fp8::Meta m[2] = {0, 0};
        getUnit<B>(in + size_t(s0) * S, mo, u, lane, c[0], m[0]);
        if (two) getUnit<B>(in + size_t(s0 + 1) * S, mo, u, lane, c[1], m[1]);
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          if (k == 1 && !two) continue;
          const int s = s0 + k;
          float v[kEPT];
          dequantize16(c[k], m[k], v);
          if constexpr (M == kReduceScatter) {
#pragma unroll
            for (int j = 0; j < kEPT; ++j) acc[j] = s == 0 ? v[j] : __fadd_rn(acc[j], v[j]);
          } else {
            store16(recv + size_t(s) * p.count, i0, n, v);
          }
        }
      }
      if constexpr (M == kReduceScatter) {
        if (p.avg) {
#pragma unroll
          for (int j = 0; j < kEPT; ++j) acc[j] = __fdiv_rn(acc[j], float(N));
        }
        store16(recv, i0, n, acc);
      }
    }
  }
  endCall(p, e0 + it);
}

/// Staging one CTA needs for a tile of tb blocks: two buffers of one packed run per source.
struct ExchangeNeed {
  int n;
  size_t operator()(size_t tb, size_t B) const { return 2 * size_t(n) * fp8::packedBytes(tb, B); }
};

template <class T, int M>
void launchT(const Params& p, int grid, int B, cudaStream_t st) {
  dim3 block(kThreads);
  switch (B) {
    case 32: exchangeKernel<T, 32, M><<<grid, block, 0, st>>>(p); break;
    case 64: exchangeKernel<T, 64, M><<<grid, block, 0, st>>>(p); break;
    case 128: exchangeKernel<T, 128, M><<<grid, block, 0, st>>>(p); break;
    default: exchangeKernel<T, 256, M><<<grid, block, 0, st>>>(p); break;
  }
}

template <int M>
class Fp8Exchange : public DeviceAlgo {
 public:
  const char* name() const override { return "fp8"; }
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
    return makeParams(a, ctx, ExchangeNeed{ctx.size}, p);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    Params p;
    CCLX_REQUIRE(makeParams(a, ctx, ExchangeNeed{ctx.size}, p), cclxInternalError,
                 "fp8 %s launched without usable peer memory", collName(a.type));
    if (p.nTiles == 0) return;
    auto st = static_cast<cudaStream_t>(stream);
    int B = ctx.cfg.fp8BlockSize, grid = gridFor(p, ctx);
    switch (a.dtype) {
      case DataType::f32: launchT<float, M>(p, grid, B, st); break;
      case DataType::bf16: launchT<bf16_t, M>(p, grid, B, st); break;
      default: launchT<f16_t, M>(p, grid, B, st); break;
    }
    cudaError_t e = cudaGetLastError();
    CCLX_REQUIRE(e == cudaSuccess, cclxCudaError, "fp8 %s launch failed: %s", collName(a.type),
                 cudaGetErrorString(e));
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
