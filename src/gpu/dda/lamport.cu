// DDA one-shot allreduce with the data as its own flag (the protocol of gpu/device/lamport.cuh
// with the float element rules of core/elements/lamport.h): every rank pushes its whole input into every
// peer's inbox and reduces all inputs locally. No flags and no barriers, so the link streams from
// the first vector to the last.
//
// Synchronization contract. The grid is always ddaTreeBlocks() blocks on every rank (the call
// counters of device/lamport.cuh). Pushing a vector: load it from `send`, replace all-ones
// elements (lamport::canon), store it with a 16-byte volatile store into inbox [e & 1][rank] of
// every peer. Consuming a vector: combine ranks 0..N-1 in order, the own vector loaded from `send`
// again and canonicalized the same way, a peer's polled from the local inbox until no element is
// all ones; write the result to `recv`, then refill the inbox vectors with all ones. Two ways to
// schedule this (same bits):
//   interleaved: thread g of T handles the vectors g + (j * kUnroll + k) * T and, in iteration j,
//     pushes group j and consumes group j - kLag;
//   teams (large messages): dev::teamRounds with rounds of one vector per thread of the block.
// In place: a vector is read from `send` (push, then its own contribution) before it is written to
// `recv` (interleaved: by the same thread; teams: the consumers start a round only after the
// producers pushed it), and no other thread touches it. Failure model (device/fail.cuh): a block
// that finds the abort word raised at entry poisons its share of `recv` and only advances its
// call counter; a wait that stops (abort, host request, deadline; recorded by the Waiter) ends
// that thread's consumption and its block poisons all of `recv`. Such a rank has raised the abort
// word, so it never pushes or consumes again and its half-refilled inboxes are never read.
#include "gpu/device/units.cuh"
#include "core/elements/lamport.h"
#include "gpu/device/lamport.cuh"

namespace cclx {
namespace {

constexpr int kUnroll = 2;          // vectors per thread and push (and interleaved consume)
constexpr int kLag = 3;             // interleaved: groups between a vector's push and its use
constexpr int kProducerWarps = 4;   // teams: pushing warps per block (the rest consume)
constexpr int kConsumeUnroll = 4;   // teams: vectors per consumer thread and step
// Teams above this size (docs/PERF.md, run 13).
constexpr size_t kTeamsMinBytes = size_t(12) << 20;

struct LamportParams {
  char* region[kMaxRanks];  // Lamport region base of every rank
  const char* send;
  char* recv;
  size_t bytes;
  size_t slotBytes;         // one inbox [parity][src]
  uint64_t* counters;       // one per block
  FailParams fail;
  int rank, size;
  RedOpKind op;
  double factor;
  bool aligned;             // send and recv both 16-byte aligned
  bool teams;               // producer / consumer warps instead of interleaved threads
};

using dev::V16;

template <int S>
__device__ __forceinline__ bool empty(V16 v) {
  return lamport::hasEmpty<S>(v.lo) || lamport::hasEmpty<S>(v.hi);
}

/// Vector v of the user buffer at `base` (the partial last one byte-exact, zero-padded).
template <bool Al>
__device__ __forceinline__ V16 ldUser(const char* base, size_t v, size_t fullV, int tail) {
  uint32_t w[4];
  if (Al && v < fullV) {
    uint4 x = *reinterpret_cast<const uint4*>(base + v * 16);
    w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
  } else {
    dev::loadUnit<16>(base + v * 16, v < fullV ? 16 : tail, w);
  }
  return {uint64_t(w[0]) | uint64_t(w[1]) << 32, uint64_t(w[2]) | uint64_t(w[3]) << 32};
}
template <bool Al>
__device__ __forceinline__ void stUser(char* base, size_t v, size_t fullV, int tail,
                                       const uint32_t (&w)[4]) {
  if (Al && v < fullV) *reinterpret_cast<uint4*>(base + v * 16) = make_uint4(w[0], w[1], w[2], w[3]);
  else dev::storeUnit<16>(base + v * 16, v < fullV ? 16 : tail, w);
}

/// What both schedules share: the inbox addressing, the own contribution, pushing and consuming
/// KC vectors v0 + k * stride (those below hi).
template <class T, RedOpKind Op, bool Al>
struct Lamport {
  static constexpr int S = int(sizeof(T));
  const LamportParams& p;
  dev::RedRt<T, Op> rt;
  int N, me, par;
  size_t totalV, fullV;
  int tail;
  uint64_t deadline;
  bool& failed;  // this thread stopped waiting

  __device__ Lamport(const LamportParams& q, uint64_t epoch, bool& f)
      : p(q),
        rt(q.op, q.factor),
        N(q.size),
        me(q.rank),
        par(int(epoch & 1)),
        totalV((q.bytes + 15) / 16),
        fullV(q.bytes / 16),
        tail(int(q.bytes % 16)),
        deadline(dev::deadlineAfter(q.fail.timeoutNs)),
        failed(f) {}

  __device__ char* box(int owner, int src) const {  // inbox [par][src] in owner's region
    return dev::inbox(p, owner, src, par, [&] { return N; });
  }
  __device__ V16 own(size_t v) const {
    V16 x = ldUser<Al>(p.send, v, fullV, tail);
    return V16{lamport::canon<S>(x.lo), lamport::canon<S>(x.hi)};
  }
  /// Pushes vectors v0 + k * stride (k < KC, those < hi) to every peer.
  template <int KC>
  __device__ void push(size_t v0, size_t stride, size_t hi) const {
    V16 x[KC];
#pragma unroll
    for (int k = 0; k < KC; ++k)
      if (v0 + k * stride < hi) x[k] = own(v0 + k * stride);
    for (int r = 0; r < N; ++r) {
      if (r == me) continue;
      char* dst = box(r, me);
#pragma unroll
      for (int k = 0; k < KC; ++k)
        if (v0 + k * stride < hi) dev::stVolatile16(dst + (v0 + k * stride) * 16, x[k]);
    }
  }
  /// Consumes vectors v0 + k * stride (k < KC, those < hi); false when a wait stopped (recorded).
  template <int KC>
  __device__ bool consume(size_t v0, size_t stride, size_t hi) const {
    dev::Waiter wait(p.fail, deadline);
    dev::UnitAcc<T, Op, 16> acc[KC];
    for (int r = 0; r < N; ++r) {
      V16 x[KC];
      if (r == me) {
#pragma unroll
        for (int k = 0; k < KC; ++k)
          if (v0 + k * stride < hi) x[k] = own(v0 + k * stride);
      } else {
        const char* src = box(me, r);
#pragma unroll
        for (int k = 0; k < KC; ++k)
          if (v0 + k * stride < hi) x[k] = dev::ldVolatile16(src + (v0 + k * stride) * 16);
#pragma unroll
        for (int k = 0; k < KC; ++k) {
          if (v0 + k * stride >= hi) continue;
          while (empty<S>(x[k])) {
            if (!wait.again(r)) {
              failed = true;
              return false;
            }
            x[k] = dev::ldVolatile16(src + (v0 + k * stride) * 16);
          }
        }
      }
#pragma unroll
      for (int k = 0; k < KC; ++k) {
        if (v0 + k * stride >= hi) continue;
        const uint32_t w[4] = {uint32_t(x[k].lo), uint32_t(x[k].lo >> 32), uint32_t(x[k].hi),
                               uint32_t(x[k].hi >> 32)};
        acc[k].add(w, r == 0, rt);
      }
    }
#pragma unroll
    for (int k = 0; k < KC; ++k) {
      const size_t v = v0 + k * stride;
      if (v >= hi) continue;
      uint32_t o[4];
      acc[k].result(N, rt, o);
      stUser<Al>(p.recv, v, fullV, tail, o);
      for (int r = 0; r < N; ++r)
        if (r != me) dev::stFill16(box(me, r) + v * 16, lamport::kEmpty);
    }
    return true;
  }

  /// Interleaved: every thread pushes group j and consumes group j - kLag.
  __device__ void interleaved() const {
    const size_t T_ = size_t(gridDim.x) * blockDim.x;
    const size_t g = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t step = kUnroll * T_;
    const size_t groups = g < totalV ? (totalV - g + step - 1) / step : 0;
    for (size_t j = 0; j < groups + kLag; ++j) {
      if (j < groups) push<kUnroll>(g + j * step, T_, totalV);
      if (j >= kLag && !consume<kUnroll>(g + (j - kLag) * step, T_, totalV)) return;
    }
  }

  /// Teams: rounds of one vector per thread of the block; the first kProducerWarps warps push.
  __device__ void teams(uint32_t* pushed) const {
    constexpr int P = 32 * kProducerWarps;
    dev::teamRounds<false, false>(
        totalV, int(blockDim.x), P, kUnroll * P, pushed,
        [&](size_t v, size_t hi) { push<kUnroll>(v, P, hi); },
        [](int C) { return size_t(kConsumeUnroll * C); },
        [&](size_t v, int C, size_t hi) { return consume<kConsumeUnroll>(v, C, hi); });
  }
};

template <class T, RedOpKind Op, bool Al>
__device__ void lamportBody(const LamportParams& p, uint64_t epoch, uint32_t* pushed,
                            bool& failed) {
  Lamport<T, Op, Al> l(p, epoch, failed);
  if (p.teams) l.teams(pushed);
  else l.interleaved();
}

template <class T>
struct LamportRun {
  const LamportParams& p;
  uint64_t e;
  uint32_t* pushed;
  bool& failed;
  template <RedOpKind Op> __device__ void operator()() {
    if (p.aligned) lamportBody<T, Op, true>(p, e, pushed, failed);
    else lamportBody<T, Op, false>(p, e, pushed, failed);
  }
};

/// Contract (dev::peerCall, device/peer_kernel.cuh; the call counter of device/lamport.cuh):
/// poison `recv`; body lamportBody; the block's counter moves from e to e + 1 on every path.
template <class T>
__global__ void __launch_bounds__(512) ddaLamportAllReduceKernel(LamportParams p) {
  __shared__ uint32_t pushed;  // teams: rounds the producers have pushed
  const uint64_t epoch = dev::lamportBegin(p, &pushed);
  dev::peerCall(p.fail, p.counters + blockIdx.x, epoch + 1, dev::PoisonBuf{p.recv, p.bytes}, [&] {
    bool failed = false;
    dev::dispatchOp<T>(p.op, LamportRun<T>{p, epoch, &pushed, failed});
    return failed;
  });
}

size_t lamportSlotBytes(const DeviceCtx& ctx) {
  return dev::inboxBytes(*ctx.peer, StagingRegion::kLamport, ctx.size, 16);
}

bool lamportFits(size_t bytes, DataType t, const DeviceCtx& ctx) {
  return ctx.peerUsable() && ctx.size >= 2 && bytes > 0 && lamport::typeSupported(t) &&
         (bytes + 15) / 16 * 16 <= lamportSlotBytes(ctx);
}

class DdaLamport final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kLamport); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    return a.type == CollType::AllReduce && ddaOpSupported(a.op.kind, a.dtype) &&
           lamportFits(a.bytes(), a.dtype, ctx);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    constexpr const char* kWhat = "DDA Lamport allreduce";
    const DataType kt = dev::ddaKernelDtype(a.dtype, a.op.kind);
    const auto kernel = dev::dispatchDtype(dev::LamportTypes{}, kt, kWhat,
                                           [&]<class T>() { return &ddaLamportAllReduceKernel<T>; });
    const size_t bytes = a.bytes();
    const int G = ddaTreeBlocks(ctx);
    LamportParams p{};
    for (int r = 0; r < ctx.size; ++r) p.region[r] = ctx.peer->region(r, StagingRegion::kLamport);
    dev::fillCallParams(p, a, ctx, kCounterLamport);
    p.slotBytes = lamportSlotBytes(ctx);
    p.aligned = dev::aligned16(a);
    const size_t perBlock = ((bytes + 15) / 16 + G - 1) / G;
    const size_t want = (perBlock + kUnroll - 1) / kUnroll;
    int threads = int(std::min<size_t>(512, std::max<size_t>(64, (want + 31) / 32 * 32)));
    p.teams = bytes > kTeamsMinBytes;
    if (p.teams) threads = 512;
    dev::launchKernel(kWhat, kernel, G, threads, stream, p);
  }
};

}  // namespace

std::unique_ptr<DeviceAlgo> makeDdaLamport() { return std::make_unique<DdaLamport>(); }

}  // namespace cclx
