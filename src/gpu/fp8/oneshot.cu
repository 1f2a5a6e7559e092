// FP8 one-shot allreduce: every rank quantizes its whole input once, pushes the codes and block
// metas into every peer's inbox, and reduces all ranks' decoded values locally. With 2 ranks it
// moves the same bytes per direction as reduce-scatter + all-gather, with one quantization
// instead of two and no flags: the data is its own flag (the protocol of gpu/device/lamport.cuh).
//
// Result (host twin: host/algos/fp8.cc, HostFp8OneShot): out = T(sum_r deq(q(x_r))), the
// sum in float over ranks 0..N-1 in order, AVG dividing the float sum by N. Every rank adds the
// same decoded values in the same order, so all outputs are identical.
//
// Inbox layout. Rank r's kFp8OneShot region holds inboxes [parity][src] (src != r) of slotBytes
// each, filled with 0xFF bytes at init. An inbox holds the codes of block gb at gb * B (unit u =
// 16 codes at u * 16, the collectives' lane mapping), then, from the next 256-byte boundary, one
// 32-bit meta per block. The codec never emits code 0xFF and a meta is never all ones (its scale
// is a positive finite float), so an 8-byte piece of codes that is all ones, or a meta that is,
// has not arrived yet.
//
// Synchronization contract (device/lamport.cuh: call counters, inbox parity, rounds). Work unit
// u (16 values of block u / G, lane u % G, G = B / 16) belongs to round r of CTA b when u is in
// [(r * grid + b) * RU, + RU). The producer warps quantize round after round and store each unit's
// codes with a 16-byte volatile store and its block's meta into inbox [e & 1][rank] of every peer.
// The consumer warps take a round once it has been pushed: quantize the own values again (the
// same bits the peers received), poll each peer's codes and meta until no 8-byte piece of codes
// and no meta is all ones, decode, add in rank order, store the output, and refill what they read
// with all ones. A 16-byte store reaches a peer as 8-byte pieces, each atomic, so a piece that is
// not all ones is complete; a meta is 4 bytes inside one piece.
// In place: a consumer reads the own values of a unit (again) before it writes that unit's output,
// and the producers read a round before the consumers start it; no other thread touches the unit.
// Failure model (device/fail.cuh): a CTA that finds the abort word raised at entry poisons its
// share of `recv` and only advances its call counter; a poll that stops (abort, host request,
// deadline; recorded) ends that warp's consumption and its CTA poisons all of `recv`. Such a rank
// has raised the abort word, so it never pushes or consumes again and its half-refilled inboxes
// are never read.
#include "gpu/device/lamport.cuh"
#include "gpu/fp8/device.cuh"
#include "gpu/fp8/fp8.h"
#include "base/error.h"

namespace cclx {
namespace fp8dev {
namespace {

// Producer warps and round size: the fastest measured (docs/PERF.md, run 16).
constexpr int kOsProducerWarps = 4;  // of kWarps
constexpr int kOsRoundUnits = 1024;  // units per CTA and round
constexpr uint32_t kMetaEmpty = 0xffffffffu;
constexpr uint64_t kPieceEmpty = ~uint64_t(0);

struct OneShotParams {
  char* region[kMaxRanks];  // kFp8OneShot region base of every rank
  const char* send;
  char* recv;
  size_t count;
  size_t slotBytes;         // one inbox [parity][src]
  size_t metaOff;           // metas inside an inbox
  uint64_t* counters;       // one per CTA
  FailParams fail;
  int rank, size, avg;
};

__device__ __forceinline__ bool codesEmpty(uint4 c) {
  return (uint64_t(c.x) | uint64_t(c.y) << 32) == kPieceEmpty ||
         (uint64_t(c.z) | uint64_t(c.w) << 32) == kPieceEmpty;
}

template <class T, int B>
struct OneShot {
  static constexpr int G = B / kEPT;  // lanes per codec block
  const OneShotParams& p;
  int par;
  size_t nb, units;
  uint64_t deadline;
  bool& failed;  // this thread stopped waiting

  __device__ OneShot(const OneShotParams& q, uint64_t epoch, bool& f)
      : p(q),
        par(int(epoch & 1)),
        nb((q.count + B - 1) / B),
        units(nb * G),
        deadline(dev::deadlineAfter(q.fail.timeoutNs)),
        failed(f) {}

  __device__ char* box(int owner, int src) const {  // inbox [par][src] in owner's region
    return dev::inbox(p, owner, src, par, [&] { return p.size; });
  }

  /// Quantizes units u0 and u1 (each idle, with zeros, at or past hi); the whole warp calls this.
  __device__ void quant2(size_t u0, size_t u1, size_t hi, uint4 (&c)[2], fp8::Meta (&m)[2]) const {
    float v0[kEPT], v1[kEPT];
    const T* x = reinterpret_cast<const T*>(p.send);
    loadBlock16x2<T, B>(x, u0 < hi ? u0 / G : 0, u0 < hi ? p.count : 0, u1 < hi ? u1 / G : 0,
                        u1 < hi ? p.count : 0, int(u0 % G), v0, v1);
    c[0] = quantize16(v0, G, m[0]);
    c[1] = quantize16(v1, G, m[1]);
  }

  /// Stores unit u's codes and its block's meta into inbox `dst` (the whole warp calls this; u -
  /// lane is the warp's first unit). Full warps store the metas of their 32 / G blocks in 16-byte
  /// (G = 16: 8-byte) pieces from the first lanes; a partial warp stores one 4-byte meta per block.
  __device__ void put(char* dst, size_t u, size_t hi, uint4 c, fp8::Meta meta) const {
    const int lane = int(threadIdx.x & 31);
    uint32_t m4[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) m4[i] = dev::shfl32(meta, ((4 * lane + i) * G) & 31);
    if (u < hi) dev::stVolatile16(dst + u * 16, c);
    const size_t wb = (u - size_t(lane)) / G;  // first block of the warp
    if (u - size_t(lane) + 32 <= hi) {
      if (G < 16) {
        if (lane < 32 / G / 4)
          dev::stVolatile16(dst + p.metaOff + 4 * (wb + 4 * size_t(lane)),
                            make_uint4(m4[0], m4[1], m4[2], m4[3]));
      } else if (lane == 0) {
        dev::stVolatile8(dst + p.metaOff + 4 * wb, m4[0], m4[1]);
      }
    } else if (u < hi && u % G == 0) {
      dev::stVolatile4(dst + p.metaOff + 4 * (u / G), meta);
    }
  }

  /// Producer: quantizes units u and u + stride (those below hi) and pushes them to every peer.
  __device__ void push(size_t u, size_t stride, size_t hi) const {
    uint4 c[2];
    fp8::Meta m[2];
    quant2(u, u + stride, hi, c, m);
    for (int r = 0; r < p.size; ++r) {
      if (r == p.rank) continue;
      char* dst = box(r, p.rank);
      put(dst, u, hi, c[0], m[0]);
      put(dst, u + stride, hi, c[1], m[1]);
    }
  }

  /// Polls unit u of rank r's inbox `src` until its codes and meta have arrived. False when the
  /// wait stopped (recorded).
  __device__ bool poll(const char* src, size_t u, uint4& c, fp8::Meta& m, dev::Waiter& w,
                       int r) const {
    while (codesEmpty(c) || m == kMetaEmpty) {
      if (!w.again(r)) return false;
      c = dev::ldVolatile16u4(src + u * 16);
      m = dev::ldVolatile4(src + p.metaOff + 4 * (u / G));
    }
    return true;
  }

  /// Consumer: units u and u + stride (those below hi; the whole warp calls this). False when a
  /// wait stopped (recorded).
  __device__ bool consume(size_t u, size_t stride, size_t hi) const {
    dev::Waiter wait(p.fail, deadline);
    const size_t uu[2] = {u, u + stride};
    uint4 own[2];
    fp8::Meta ownM[2];
    quant2(uu[0], uu[1], hi, own, ownM);
    float acc[2][kEPT];
    bool timedOut = false;
    for (int r = 0; r < p.size; ++r) {
      uint4 c[2] = {own[0], own[1]};
      fp8::Meta m[2] = {ownM[0], ownM[1]};
      if (r != p.rank) {
        const char* src = box(p.rank, r);
#pragma unroll
        for (int k = 0; k < 2; ++k)
          if (uu[k] < hi) {
            c[k] = dev::ldVolatile16u4(src + uu[k] * 16);
            m[k] = dev::ldVolatile4(src + p.metaOff + 4 * (uu[k] / G));
          }
#pragma unroll
        for (int k = 0; k < 2; ++k)
          if (uu[k] < hi && !timedOut && !poll(src, uu[k], c[k], m[k], wait, r)) timedOut = true;
      }
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        float v[kEPT];
        dequantize16(c[k], m[k], v);
#pragma unroll
        for (int j = 0; j < kEPT; ++j) acc[k][j] = r == 0 ? v[j] : __fadd_rn(acc[k][j], v[j]);
      }
    }
    if (dev::any32(timedOut)) {
      failed = true;
      return false;
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (uu[k] >= hi) continue;
      if (p.avg) {
        const float n = float(p.size);
#pragma unroll
        for (int j = 0; j < kEPT; ++j) acc[k][j] = __fdiv_rn(acc[k][j], n);
      }
      const size_t gb = uu[k] / G;
      storeBlock16<T, B>(reinterpret_cast<T*>(p.recv), gb, p.count, int(uu[k] % G), acc[k]);
      for (int r = 0; r < p.size; ++r) {
        if (r == p.rank) continue;
        char* src = box(p.rank, r);
        *reinterpret_cast<uint4*>(src + uu[k] * 16) = make_uint4(~0u, ~0u, ~0u, ~0u);
        if (uu[k] % G == 0) *reinterpret_cast<uint32_t*>(src + p.metaOff + 4 * gb) = kMetaEmpty;
      }
    }
    return true;
  }

  /// Rounds of kOsRoundUnits units per CTA; producers and consumers take two units per step.
  __device__ void run(uint32_t* pushed) const {
    constexpr int P = 32 * kOsProducerWarps;
    dev::teamRounds<true, true>(
        units, kOsRoundUnits, P, 2 * size_t(P), pushed,
        [&](size_t u, size_t hi) { push(u, P, hi); }, [](int C) { return 2 * size_t(C); },
        [&](size_t u, int C, size_t hi) { return consume(u, C, hi); });
  }
};

/// Contract (dev::peerCall, device/peer_kernel.cuh; the call counter of device/lamport.cuh):
/// poison `recv`; body OneShot::run; the CTA's counter moves from e to e + 1 on every path.
template <class T, int B>
__global__ void __launch_bounds__(kThreads) fp8OneShotAllReduceKernel(OneShotParams p) {
  __shared__ uint32_t pushed;  // rounds the producers have pushed
  const uint64_t epoch = dev::lamportBegin(p, &pushed);
  dev::peerCall(p.fail, p.counters + blockIdx.x, epoch + 1,
                dev::PoisonBuf{p.recv, p.count * sizeof(T)}, [&] {
                  bool failed = false;
                  OneShot<T, B>(p, epoch, failed).run(&pushed);
                  return failed;
                });
}

size_t slotBytesOf(const DeviceCtx& ctx) {
  return dev::inboxBytes(*ctx.peer, StagingRegion::kFp8OneShot, ctx.size, 256);
}

/// Inbox bytes for `count` values: codes (256-aligned), then the metas.
size_t inboxNeed(size_t count, int B, size_t& metaOff) {
  const size_t nb = (count + size_t(B) - 1) / size_t(B);
  metaOff = (nb * size_t(B) + 255) & ~size_t(255);
  return metaOff + fp8::align16(nb * 4);
}

class Fp8OneShotAllReduce : public DeviceAlgo {
 public:
  const char* name() const override { return "fp8_oneshot"; }
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFp8OneShot); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    if (a.type != CollType::AllReduce || !ctx.peerUsable() || ctx.size < 2 ||
        ctx.size > kMaxRanks || a.count == 0)
      return false;
    if (a.dtype != DataType::f32 && a.dtype != DataType::bf16 && a.dtype != DataType::f16)
      return false;
    if (a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG) return false;
    const int B = ctx.cfg.fp8BlockSize;
    if (B < fp8::kMinBlock || B > fp8::kMaxBlock || (B & (B - 1)) != 0) return false;
    size_t metaOff;
    return inboxNeed(a.count, B, metaOff) <= slotBytesOf(ctx);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    constexpr const char* kWhat = "fp8 one-shot allreduce";
    const auto kernel = kernelFor(a.dtype, ctx.cfg.fp8BlockSize, kWhat,
                                  [&]<class T, int B>() { return &fp8OneShotAllReduceKernel<T, B>; });
    OneShotParams p{};
    for (int r = 0; r < ctx.size; ++r)
      p.region[r] = ctx.peer->region(r, StagingRegion::kFp8OneShot);
    p.send = static_cast<const char*>(a.send);
    p.recv = static_cast<char*>(a.recv);
    p.count = a.count;
    p.slotBytes = slotBytesOf(ctx);
    inboxNeed(a.count, ctx.cfg.fp8BlockSize, p.metaOff);
    p.counters = ctx.counters + kCounterFp8OneShot;
    p.fail = failParams(a, ctx);
    p.rank = ctx.rank;
    p.size = ctx.size;
    p.avg = a.op.kind == RedOpKind::AVG ? 1 : 0;
    const int grid = ctaCap(ctx);
    dev::launchKernel(kWhat, kernel, grid, kThreads, stream, p);
  }
};

}  // namespace
}  // namespace fp8dev

std::unique_ptr<DeviceAlgo> makeFp8OneShotAllReduce() {
  return std::make_unique<fp8dev::Fp8OneShotAllReduce>();
}

}  // namespace cclx
