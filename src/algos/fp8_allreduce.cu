// FP8 allreduce on peer memory: one kernel, push model (every NVLink transfer is a remote write),
// two teams per CTA so the pushes of one tile overlap the decoding of an earlier one.
//
// The message is cut into tiles of `tileBlocks` codec blocks; CTA c handles tiles c, c + grid,
// ... (its i-th tile has epoch e_i = counter[c] + 1 + i) and pairs only with CTA c of the other
// ranks. Each tile's blocks are split into N shards (fp8::shardBlocks); rank q owns shard q.
// Each rank's staging holds, per CTA, two A-inboxes and two G-inboxes (buffer = e_i % 2), each
// with one slot per peer (slotOf: the N - 1 other ranks in rank order); the own shard never
// passes through staging.
//   A (producer): quantize the peers' shards of tile i; write shard q's codes+metas into rank q's
//      A-inbox; flag[0] = e_i to every rank.
//   B (producer): after flag[0] >= e_i from every rank, reduce the own shard over ranks 0..N-1 in
//      order (float, AVG divides): the peers' codes from the local A-inbox, the own codes
//      quantized again from `send` in registers exactly as A quantizes a shard for a peer (same
//      lanes, groups, zero fill), hence the bits a peer received; requantize, write into every
//      peer's G-inbox and, decoded, into the own output; flag[1] = e_i to every rank.
//   C (consumer): after flag[1] >= e_i from every rank, dequantize the peers' shards from the
//      local G-inbox into the output; flag[3] ("consumed") = e_i to every rank.
// The producer runs A(i + 1) before B(i), so the wait before B(i) finds the peers' data already
// there, and the consumer decodes tile i while the producer pushes tile i + 1.
// Every rank decodes the same requantized codes+metas for a shard, so all outputs are identical
// and equal to the host twin's. The order of stores inside a phase is free: only the flag after
// the team's barrier publishes them.
// Buffer reuse: A(i + 1) writes the A-inbox buffer that the peers' B(i - 1) read: the producer
// first waits flag[1] >= e_(i-1) from every rank. B(i) writes the G-inbox buffer that the peers'
// C(i - 2) read: it first waits flag[3] >= e_(i-2). The first two tiles of a call need no wait:
// beginCall() waited for every peer's "done" flag of its previous FP8 call, which each CTA
// publishes after both teams finished all reads. Flag values only grow across calls.
// In place (send == recv): a tile's elements are read and written only by its CTA; A(i) reads
// the peers' shards before the producer's flag[1] of tile i, which C(i) (the only writer of
// those elements) waits for; in B a thread writes exactly the 16 elements it read itself.
// Flags: st.release.sys after the team's named barrier, ld.acquire.sys then the team's barrier
// (teamSignal/teamWait, fp8_device.cuh). CTAs never wait on other CTAs of the same GPU; the
// grid is at most 128 CTAs of 512 threads and at most one per SM, so all are co-resident.
#include <cuda_runtime.h>

#include "algos/fp8_algos.h"
#include "algos/fp8_device.cuh"
#include "core/error.h"

namespace cclx {
namespace fp8dev {
namespace {

/// Inbox slot of source `src` at receiver `dst` (src != dst): the N - 1 peers in rank order.
__device__ __forceinline__ size_t slotOf(int src, int dst) {
  return size_t(src < dst ? src : src - 1);
}

/// One tile's geometry: blocks [tb0, tb0 + nb) of the message; shard q = blocks
/// [q*sq + min(q, sr), +sq + (q < sr)) of the tile (= fp8::shardBlocks).
struct ArTile {
  size_t tb0, nb, sq, sr;
  __device__ ArTile(const Params& p, size_t tile) {
    tb0 = tile * p.tileBlocks;
    nb = p.tileBlocks < p.nbAll - tb0 ? p.tileBlocks : p.nbAll - tb0;
    sq = nb / size_t(p.size);
    sr = nb % size_t(p.size);
  }
  __device__ void shard(int q, size_t& b0, size_t& len) const {
    b0 = size_t(q) * sq + (size_t(q) < sr ? size_t(q) : sr);
    len = sq + (size_t(q) < sr ? 1 : 0);
  }
  __device__ size_t len0() const { return sq + (sr > 0 ? 1 : 0); }  // shard 0 is the longest
};

/// Per-CTA staging layout: [A buf 0][A buf 1][G buf 0][G buf 1], each N - 1 slots of S bytes.
struct ArLayout {
  const Params& p;
  size_t S;
  __device__ char* aBox(int owner, uint64_t epoch, size_t slot) const {
    return p.staging[owner] + size_t(blockIdx.x) * p.ctaBytes +
           (size_t(epoch & 1u) * size_t(p.size - 1) + slot) * S;
  }
  __device__ char* gBox(int owner, uint64_t epoch, size_t slot) const {
    return p.staging[owner] + size_t(blockIdx.x) * p.ctaBytes +
           ((2 + size_t(epoch & 1u)) * size_t(p.size - 1) + slot) * S;
  }
};

/// A: quantize the peers' shards of tile `t` and push shard q to rank q's A-inbox. Each round
/// handles units u and u + GPC of one peer shard (both loads in flight); peers in turn.
template <class T, int B>
__device__ void phaseA(const Params& p, const Team& tm, const ArLayout& L, const ArTile& t,
                       uint64_t epoch, size_t mo) {
  constexpr int G = B / kEPT;
  const int GPC = tm.threads / G, lane = tm.tid() % G, grp = tm.tid() / G, N = p.size;
  const T* send = reinterpret_cast<const T*>(p.send);
  const size_t len0 = t.len0();
  for (size_t u0 = 0; u0 < len0; u0 += 2 * size_t(GPC)) {
    const size_t ua = u0 + grp, ub = u0 + GPC + grp;
    for (int k = 1; k < N; ++k) {
      const int q = (p.rank + k) % N;
      size_t b0, bl;
      t.shard(q, b0, bl);
      const bool actA = ua < bl, actB = ub < bl;
      size_t ia = 0, ib = 0;
      const int na = actA ? laneCount(p.count, t.tb0 + b0 + ua, B, lane, ia) : 0;
      const int nbk = actB ? laneCount(p.count, t.tb0 + b0 + ub, B, lane, ib) : 0;
      float va[kEPT], vb[kEPT];
      load16x2(send, ia, na, va, send, ib, nbk, vb);
      fp8::Meta ma, mb;
      const uint4 ca = quantize16(va, G, ma);
      const uint4 cb = quantize16(vb, G, mb);
      char* dst = L.aBox(q, epoch, slotOf(p.rank, q));
      if (actA) putUnit<B>(dst, mo, ua, lane, ca, ma);
      if (actB) putUnit<B>(dst, mo, ub, lane, cb, mb);
    }
  }
}

/// B: reduce the own shard of tile `t` (two units per round, two sources' loads at a time),
/// requantize, push to every peer's G-inbox and write the decoded result to the own output.
template <class T, int B>
__device__ void phaseB(const Params& p, const Team& tm, const ArLayout& L, const ArTile& t,
                       uint64_t epoch, size_t mo) {
  constexpr int G = B / kEPT;
  const int GPC = tm.threads / G, lane = tm.tid() % G, grp = tm.tid() / G, N = p.size;
  const T* send = reinterpret_cast<const T*>(p.send);
  T* recv = reinterpret_cast<T*>(p.recv);
  size_t sb0, sl;
  t.shard(p.rank, sb0, sl);
  const char* in = L.aBox(p.rank, epoch, 0);  // slot s of the local A-inbox: + s * S
  for (size_t u0 = 0; u0 < sl; u0 += 2 * size_t(GPC)) {
    const size_t u[2] = {u0 + grp, u0 + GPC + grp};
    bool act[2];
    size_t io[2] = {0, 0};
    int no[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      act[h] = u[h] < sl;
      no[h] = act[h] ? laneCount(p.count, t.tb0 + sb0 + u[h], B, lane, io[h]) : 0;
    }
    uint4 cOwn[2];
    fp8::Meta mOwn[2];
    {
      float va[kEPT], vb[kEPT];
      load16x2(send, io[0], no[0], va, send, io[1], no[1], vb);
      cOwn[0] = quantize16(va, G, mOwn[0]);  // all lanes (shuffles)
      cOwn[1] = quantize16(vb, G, mOwn[1]);
    }
    float acc[2][kEPT];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < kEPT; ++j) acc[h][j] = 0.f;
    for (int s0 = 0; s0 < N; s0 += 2) {  // sources in rank order, two at a time
      uint4 c[2][2];
      fp8::Meta m[2][2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int s = s0 + k;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          c[k][h] = cOwn[h];
          m[k][h] = mOwn[h];
          if (s < N && s != p.rank && act[h])
            getUnit<B>(in + slotOf(s, p.rank) * L.S, mo, u[h], lane, c[k][h], m[k][h]);
        }
      }
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int s = s0 + k;
        if (s >= N) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (!act[h]) continue;
          float v[kEPT];
          dequantize16(c[k][h], m[k][h], v);
#pragma unroll
          for (int j = 0; j < kEPT; ++j) acc[h][j] = s == 0 ? v[j] : __fadd_rn(acc[h][j], v[j]);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (p.avg && act[h]) {
#pragma unroll
        for (int j = 0; j < kEPT; ++j) acc[h][j] = __fdiv_rn(acc[h][j], float(N));
      }
      fp8::Meta meta;
      const uint4 c = quantize16(acc[h], G, meta);  // all lanes (shuffles)
      if (!act[h]) continue;
      for (int k = 1; k < N; ++k) {
        const int q = (p.rank + k) % N;
        putUnit<B>(L.gBox(q, epoch, slotOf(p.rank, q)), mo, u[h], lane, c, meta);
      }
      if (no[h] > 0) {
        float v[kEPT];
        dequantize16(c, meta, v);
        store16(recv, io[h], no[h], v);
      }
    }
  }
}

/// C: dequantize the peers' shards of tile `t` from the local G-inbox into the output; four
/// units of one shard are loaded before any is decoded and stored.
template <class T, int B>
__device__ void phaseC(const Params& p, const Team& tm, const ArLayout& L, const ArTile& t,
                       uint64_t epoch, size_t mo) {
  constexpr int G = B / kEPT, U = 4;
  const int GPC = tm.threads / G, lane = tm.tid() % G, grp = tm.tid() / G, N = p.size;
  T* recv = reinterpret_cast<T*>(p.recv);
  const size_t len0 = t.len0();
  for (size_t u0 = grp; u0 < len0; u0 += U * size_t(GPC)) {  // no shuffles: per-group loop
    for (int k = 1; k < N; ++k) {
      const int q = (p.rank + k) % N;
      size_t b0, bl;
      t.shard(q, b0, bl);
      const char* src = L.gBox(p.rank, epoch, slotOf(q, p.rank));
      uint4 c[U];
      fp8::Meta m[U];
#pragma unroll
      for (int h = 0; h < U; ++h) {
        const size_t u = u0 + size_t(h) * GPC;
        c[h] = make_uint4(0, 0, 0, 0);
        m[h] = 0;
        if (u < bl) getUnit<B>(src, mo, u, lane, c[h], m[h]);
      }
#pragma unroll
      for (int h = 0; h < U; ++h) {
        const size_t u = u0 + size_t(h) * GPC;
        if (!(u < bl)) continue;
        size_t i0;
        const int n = laneCount(p.count, t.tb0 + b0 + u, B, lane, i0);
        if (n == 0) continue;
        float v[kEPT];
        dequantize16(c[h], m[h], v);
        store16(recv, i0, n, v);
      }
    }
  }
}

template <class T, int B>
__global__ void __launch_bounds__(kThreads, 1) allReduceKernel(Params p) {
  const int N = p.size, cta = blockIdx.x;
  const uint64_t e0 = p.counters[cta];
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const size_t cap = (p.tileBlocks + N - 1) / N;
  const size_t mo = fp8::metaOffset(cap, B);
  const ArLayout L{p, fp8::packedBytes(cap, B)};
  const size_t nIt = (p.nTiles - size_t(cta) + gridDim.x - 1) / gridDim.x;  // tiles of this CTA
  auto tileOf = [&](size_t i) { return ArTile(p, size_t(cta) + i * gridDim.x); };
  if (!beginCall(p, e0, deadline)) return;
  bool ok = true;
  if (int(threadIdx.x) < p.producerThreads) {
    const Team tm{1, 0, p.producerThreads};
    phaseA<T, B>(p, tm, L, tileOf(0), e0 + 1, mo);
    teamSignal(p, tm, 0, e0 + 1);
    for (size_t i = 0; i < nIt && ok; ++i) {
      const uint64_t e = e0 + 1 + i;
      if (i + 1 < nIt) {
        if (i >= 1) ok = teamWait(p, tm, 1, e - 1, deadline);  // peers done with B(i - 1)
        if (!ok) break;
        phaseA<T, B>(p, tm, L, tileOf(i + 1), e + 1, mo);
        teamSignal(p, tm, 0, e + 1);
      }
      ok = teamWait(p, tm, 0, e, deadline);                      // every A(i) arrived
      if (ok && i >= 2) ok = teamWait(p, tm, kPhaseConsumed, e - 2, deadline);  // C(i - 2) done
      if (!ok) break;
      phaseB<T, B>(p, tm, L, tileOf(i), e, mo);
      teamSignal(p, tm, 1, e);
    }
  } else {
    const Team tm{2, p.producerThreads, kThreads - p.producerThreads};
    for (size_t i = 0; i < nIt && ok; ++i) {
      const uint64_t e = e0 + 1 + i;
      ok = teamWait(p, tm, 1, e, deadline);  // every B(i) arrived
      if (!ok) break;
      phaseC<T, B>(p, tm, L, tileOf(i), e, mo);
      teamSignal(p, tm, kPhaseConsumed, e);
    }
  }
  if (__syncthreads_or(!ok)) return;  // a timeout: no "done", the error words say who is missing
  endCall(p, e0 + nIt);
}

// Producer warps of a 16-warp CTA: the producer does every NVLink transfer (phases A and B),
// the consumer only decodes (phase C).
constexpr int kArProducerWarps = 12;

/// Staging one CTA needs for a tile of tb blocks: two A-inboxes and two G-inboxes, one shard per
/// peer each.
struct AllReduceNeed {
  int n;
  size_t operator()(size_t tb, size_t B) const {
    return 4 * size_t(n - 1) * fp8::packedBytes((tb + n - 1) / n, B);
  }
};

template <class T>
void launchT(const Params& p, int grid, int B, cudaStream_t st) {
  dim3 block(kThreads);
  switch (B) {
    case 32: allReduceKernel<T, 32><<<grid, block, 0, st>>>(p); break;
    case 64: allReduceKernel<T, 64><<<grid, block, 0, st>>>(p); break;
    case 128: allReduceKernel<T, 128><<<grid, block, 0, st>>>(p); break;
    default: allReduceKernel<T, 256><<<grid, block, 0, st>>>(p); break;
  }
}

class Fp8AllReduce : public DeviceAlgo {
 public:
  const char* name() const override { return "fp8"; }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    if (a.type != CollType::AllReduce) return false;
    if (a.dtype != DataType::f32 && a.dtype != DataType::bf16 && a.dtype != DataType::f16)
      return false;
    if (a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG) return false;
    Params p;
    return makeParams(a, ctx, AllReduceNeed{ctx.size}, p, kArProducerWarps);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    Params p;
    CCLX_REQUIRE(makeParams(a, ctx, AllReduceNeed{ctx.size}, p, kArProducerWarps), cclxInternalError,
                 "fp8 allreduce launched without usable peer memory");
    if (p.nTiles == 0) return;
    auto st = static_cast<cudaStream_t>(stream);
    int B = ctx.cfg.fp8BlockSize, grid = gridFor(p, ctx);
    switch (a.dtype) {
      case DataType::f32: launchT<float>(p, grid, B, st); break;
      case DataType::bf16: launchT<bf16_t>(p, grid, B, st); break;
      default: launchT<f16_t>(p, grid, B, st); break;
    }
    cudaError_t e = cudaGetLastError();
    CCLX_REQUIRE(e == cudaSuccess, cclxCudaError, "fp8 allreduce launch failed: %s",
                 cudaGetErrorString(e));
  }
};

}  // namespace
}  // namespace fp8dev

std::unique_ptr<DeviceAlgo> makeFp8AllReduce() { return std::make_unique<fp8dev::Fp8AllReduce>(); }

}  // namespace cclx
