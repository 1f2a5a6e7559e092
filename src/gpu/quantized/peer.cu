// reduce_scatter_quantized on peer memory: one kernel, push model, two teams per CTA, on the FP8
// collectives' staging region, flags and epoch counters (gpu/fp8/device.cuh: Params, makeParams,
// beginCall / teamWait / teamSignal / endCall), so its calls and theirs share one protocol and
// follow each other in any order. Element rules: core/elements/stochastic.h (bitwise equal to
// the CPU twin host/algos/quantized.cc).
//
// The count elements of each destination segment are cut into tiles of tileElems (a whole number
// of the FP8 tiling's blocks); CTA c handles tiles c, c + grid, ... (its i-th tile has epoch
// e_i = counter[c] + 1 + i) and pairs only with CTA c of the other ranks. Each rank's staging
// holds, per CTA, two inbox buffers (b = e_i % 2) of tileElems bf16 per source rank.
//   A (producer): after flag[3] >= e_(i-2) from every rank (every consumer finished reading
//      buffer b, tile i - 2), for each destination q (peers first, the own inbox last): round the
//      tile of segment q to bf16 (sr::srBf16 with this rank's seed, the element's index
//      q * count + i in the send buffer and this rank) and store it into rank q's inbox
//      [b][source = me]; then flag[0] = e_i to every rank.
//   B (consumer): after flag[0] >= e_i from every rank, sum inbox [b][0..N-1] in rank order in
//      float (the first term is the value itself; AVG divides once, __fdiv_rn) into the output;
//      then flag[3] ("consumed") = e_i to every rank.
// In place (recv at the own segment of send) a tile's output is written only after flag[0] of
// that tile from every rank, i.e. after this rank's producer read that tile's input; no later
// tile reads it. The seed is read from device memory by the kernel (graph replays see its
// current value). Every unit is 8 elements: two 16-byte loads of floats, one 16-byte store of
// bf16 into an inbox (tileElems is a multiple of 8, so inbox units are aligned).
#include "core/elements/stochastic.h"
#include "gpu/fp8/device.cuh"
#include "gpu/quantized/quantized.h"
#include "base/error.h"

namespace cclx {
namespace qdev {
namespace {

using fp8dev::Params;
using fp8dev::Team;
constexpr int kUnit = 8;  // elements per thread per unit

struct QParams {
  Params p;                // the FP8 tiling and protocol fields (count = elements per segment)
  const int64_t* seed;     // one int64 in device memory
  size_t tileElems;        // elements per tile (tileBlocks * FP8 block size)
};

/// Inbox [epoch % 2][src] of rank `owner` for this CTA (S bytes each).
__device__ __forceinline__ uint16_t* inbox(const Params& p, size_t S, int owner, uint64_t epoch,
                                           int src) {
  return reinterpret_cast<uint16_t*>(p.staging[owner] + size_t(blockIdx.x) * p.ctaBytes +
                                     (size_t(epoch & 1u) * size_t(p.size) + size_t(src)) * S);
}

/// Elements [i0, i0 + n) of p (n <= 8) as floats; missing ones are 0.
__device__ __forceinline__ void load8(const float* p, size_t i0, int n, float v[kUnit]) {
  const float* q = p + i0;
  if (n == kUnit && (reinterpret_cast<uintptr_t>(q) & 15u) == 0) {
    const float4 a = reinterpret_cast<const float4*>(q)[0], b = reinterpret_cast<const float4*>(q)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < kUnit; ++j) v[j] = j < n ? q[j] : 0.f;
  }
}

/// A: round and push the tile [e0, e0 + n) of every destination segment.
__device__ void phaseA(const QParams& qp, const Team& tm, size_t e0, size_t n, uint64_t epoch,
                       size_t S, uint64_t seed) {
  const Params& p = qp.p;
  const float* send = reinterpret_cast<const float*>(p.send);
  const int N = p.size;
  for (size_t u = size_t(tm.tid()); u * kUnit < n; u += size_t(tm.threads)) {
    const size_t i0 = e0 + u * kUnit;
    const int m = n - u * kUnit < size_t(kUnit) ? int(n - u * kUnit) : kUnit;
    for (int k = 1; k <= N; ++k) {
      const int q = (p.rank + k) % N;
      const size_t base = size_t(q) * p.count + i0;  // index in the send buffer
      float v[kUnit];
      load8(send, base, m, v);
      uint32_t w[kUnit / 2];
#pragma unroll
      for (int j = 0; j < kUnit / 2; ++j) {
        const uint32_t lo = sr::srBf16(v[2 * j], seed, base + 2 * j, uint32_t(p.rank));
        const uint32_t hi = sr::srBf16(v[2 * j + 1], seed, base + 2 * j + 1, uint32_t(p.rank));
        w[j] = lo | (hi << 16);
      }
      uint16_t* dst = inbox(p, S, q, epoch, p.rank) + u * kUnit;
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

/// B: sum the tile [e0, e0 + n) of every source's inbox into the output.
__device__ void phaseB(const QParams& qp, const Team& tm, size_t e0, size_t n, uint64_t epoch,
                       size_t S) {
  const Params& p = qp.p;
  float* recv = reinterpret_cast<float*>(p.recv);
  const int N = p.size;
  for (size_t u = size_t(tm.tid()); u * kUnit < n; u += size_t(tm.threads)) {
    const int m = n - u * kUnit < size_t(kUnit) ? int(n - u * kUnit) : kUnit;
    float acc[kUnit];
    for (int s = 0; s < N; ++s) {
      const uint4 c = *reinterpret_cast<const uint4*>(inbox(p, S, p.rank, epoch, s) + u * kUnit);
      const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int j = 0; j < kUnit; ++j) {
        const float v = math::bf16ToF32(uint16_t(w[j / 2] >> (16 * (j & 1))));
        acc[j] = s == 0 ? v : __fadd_rn(acc[j], v);
      }
    }
    if (p.avg) {
#pragma unroll
      for (int j = 0; j < kUnit; ++j) acc[j] = __fdiv_rn(acc[j], float(N));
    }
    float* out = recv + e0 + u * kUnit;
    if (m == kUnit && (reinterpret_cast<uintptr_t>(out) & 15u) == 0) {
      reinterpret_cast<float4*>(out)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      reinterpret_cast<float4*>(out)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
      for (int j = 0; j < m; ++j) out[j] = acc[j];
    }
  }
}

/// Contract (dev::peerCall, device/peer_kernel.cuh): poison `recv`; body beginCall, then the
/// producer and consumer teams over this CTA's tiles, true in a thread whose wait stopped;
/// advance endCall: "done" only when the call completed, the CTA's counter moves from e0 to
/// e0 + its tiles on every path.
__global__ void __launch_bounds__(fp8dev::kThreads, 1) srReduceScatterKernel(QParams qp) {
  const Params& p = qp.p;
  dev::namedBarriersInit();
  const int cta = blockIdx.x;
  const uint64_t e0 = p.counters[cta];
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  const size_t S = qp.tileElems * sizeof(uint16_t);
  const size_t nIt = (p.nTiles - size_t(cta) + gridDim.x - 1) / gridDim.x;  // tiles of this CTA
  auto tileAt = [&](size_t i, size_t& t0, size_t& tn) {
    t0 = (size_t(cta) + i * gridDim.x) * qp.tileElems;
    tn = p.count - t0 < qp.tileElems ? p.count - t0 : qp.tileElems;
  };
  auto body = [&] {
    if (!fp8dev::beginCall(p, e0, wait)) return true;
    bool ok = true;
    if (int(threadIdx.x) < p.producerThreads) {
      const Team tm{1, 0, p.producerThreads};
      const uint64_t seed = uint64_t(*qp.seed);
      for (size_t i = 0; i < nIt && ok; ++i) {
        const uint64_t e = e0 + 1 + i;
        if (i >= 2) ok = fp8dev::teamWait(p, tm, fp8dev::kPhaseConsumed, e - 2, wait);
        if (!ok) break;
        size_t t0, tn;
        tileAt(i, t0, tn);
        phaseA(qp, tm, t0, tn, e, S, seed);
        fp8dev::teamSignal(p, tm, 0, e);
      }
    } else {
      const Team tm{2, p.producerThreads, fp8dev::kThreads - p.producerThreads};
      for (size_t i = 0; i < nIt && ok; ++i) {
        const uint64_t e = e0 + 1 + i;
        ok = fp8dev::teamWait(p, tm, 0, e, wait);
        if (!ok) break;
        size_t t0, tn;
        tileAt(i, t0, tn);
        phaseB(qp, tm, t0, tn, e, S);
        fp8dev::teamSignal(p, tm, fp8dev::kPhaseConsumed, e);
      }
    }
    return !ok;  // a wait stopped (recorded in the error words)
  };
  dev::peerCall(p.fail, dev::PoisonBuf{p.recv, p.outBytes}, body,
                [&](bool ok) { fp8dev::endCall(p, e0 + nIt, ok); });
}

/// Staging one CTA needs for a tile of tb blocks of B elements: two buffers of tb * B bf16 per
/// source.
struct Need {
  int n;
  size_t operator()(size_t tb, size_t B) const {
    return 2 * size_t(n) * tb * B * sizeof(uint16_t);
  }
};

class SrBf16ReduceScatter final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFp8); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    if (a.type != CollType::ReduceScatterQuantized || a.dtype != DataType::f32 || !a.seed)
      return false;
    if (a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG) return false;
    Params p;
    return fp8dev::makeParams(a, ctx, Need{ctx.size}, p, true);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    QParams qp;
    CCLX_REQUIRE(fp8dev::makeParams(a, ctx, Need{ctx.size}, qp.p, true), cclxInternalError,
                 "sr_bf16 reduce_scatter_quantized launched without usable peer memory");
    if (qp.p.nTiles == 0) return;
    qp.seed = a.seed;
    qp.tileElems = qp.p.tileBlocks * size_t(ctx.cfg.fp8BlockSize);  // the tiles of makeParams
    const int grid = fp8dev::gridFor(qp.p, ctx);
    dev::launchKernel("sr_bf16 reduce_scatter_quantized", &srReduceScatterKernel, grid,
                      fp8dev::kThreads, stream, qp);
  }
};

}  // namespace
}  // namespace qdev

std::unique_ptr<DeviceAlgo> makeSrBf16ReduceScatter() {
  return std::make_unique<qdev::SrBf16ReduceScatter>();
}

}  // namespace cclx
