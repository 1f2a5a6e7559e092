// DDA tree allreduce: reduce-scatter then all-gather, both by pushes into peers' staging, in one
// kernel that walks the message in chunks.
//
// Synchronization contract. The grid is always ddaTreeBlocks() blocks, identical on every rank;
// block b only ever synchronizes with block b of the peers (no grid-wide dependency). Every rank's
// tree region holds, per phase (RS, AG), one inbox [src][b] of capV 16-byte vectors for every
// *other* rank src and block b (a rank's own data never goes through staging). A message is cut
// into chunks of at most N*G*capV vectors; each chunk into N slices (balanced, 16-byte boundaries,
// so count < N works: some slices are empty), each slice into G block parts (each <= capV).
// Per chunk, block b with sequence number q (its device counter + chunk index + 1; values only
// increase, never reset):
//   1. pushes its part of every slice s != rank of `send` into rank s's RS inbox [rank][b], then
//      blockBarrier on the RS flag row (release.sys after __syncthreads, acquire.sys wait);
//   2. reduces its part of slice `rank` in rank order 0..N-1, taking rank r's contribution from
//      its RS inbox [r][b] and its own straight from `send`; pushes the result into every other
//      rank's AG inbox [rank][b] and writes it straight to `recv`; then blockBarrier on the AG row;
//   3. copies its part of every slice s != rank from its AG inbox [s][b] to `recv`.
// Every block takes part in every barrier even when its parts are empty, so the chain below holds
// for all blocks. Inbox reuse: rank r pushes chunk k+1 into s's RS inbox only after it passed the
// AG barrier of chunk k, which s's block b entered only after reducing (reading) that inbox; r's
// AG inbox is overwritten for chunk k+1 only after s received r's chunk k+1 RS signal, which r
// gives after copying its chunk k AG inbox out. The same holds across calls (the sequence numbers
// continue). In place (send == recv): a vector of slice s != rank is read from `send` in step 1
// and written to `recv` in step 3 by the same block, with the barrier between; a vector of the own
// slice is read from `send` and written to `recv` in step 2 by the same thread, the write after
// all of its reads (peers never read this rank's `send`). Each thread moves kUnroll independent
// vectors per iteration (all loads, then all stores) for memory-level parallelism; the one partial
// vector at the end of the message (if any) is handled by thread 0 of its block with byte-exact
// accesses. Failure model (device/fail.cuh): a block that finds the abort word raised at entry
// poisons its share of `recv`; a barrier whose wait stops (abort, host request, deadline; recorded)
// ends the block's work and it poisons all of `recv`. Either way the counter advances by the
// call's chunk count, as on success.
#include "gpu/device/units.cuh"

namespace cclx {
namespace {

constexpr int kUnroll = 2;  // independent 16-byte vectors in flight per thread (4 spills at 512 threads)

struct TreeParams {
  dev::PeerPtrs peers;  // staging: tree region bases; signal: tree flag region bases
  const char* send;
  char* recv;
  size_t bytes;
  size_t capV;          // 16-byte vectors per inbox [src][block]
  uint64_t* counters;   // one per block
  FailParams fail;
  int rank, size;
  RedOpKind op;
  double factor;
  bool aligned;         // send and recv both 16-byte aligned
};

struct Range {
  size_t lo, hi;
};
__device__ __forceinline__ Range split(size_t lo, size_t n, int parts, int idx) {
  size_t base = n / parts, rem = n % parts;
  size_t s = lo + idx * base + min(size_t(idx), rem);
  return {s, s + base + (size_t(idx) < rem ? 1 : 0)};
}

/// Full 16-byte vector v of a user buffer; Al: the buffer is 16-byte aligned.
template <bool Al>
__device__ __forceinline__ uint4 ldUser(const char* base, size_t v) {
  if constexpr (Al) {
    return *reinterpret_cast<const uint4*>(base + v * 16);
  } else {
    uint32_t w[4];
    dev::loadUnit<16>(base + v * 16, 16, w);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}
template <bool Al>
__device__ __forceinline__ void stUser(char* base, size_t v, uint4 x) {
  if constexpr (Al) {
    *reinterpret_cast<uint4*>(base + v * 16) = x;
  } else {
    uint32_t w[4] = {x.x, x.y, x.z, x.w};
    dev::storeUnit<16>(base + v * 16, 16, w);
  }
}
/// The partial last vector v (valid < 16 bytes) of a user buffer, byte-exact.
__device__ __forceinline__ uint4 ldTail(const char* base, size_t v, int valid) {
  uint32_t w[4];
  dev::loadUnit<16>(base + v * 16, valid, w);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void stTail(char* base, size_t v, int valid, uint4 x) {
  uint32_t w[4] = {x.x, x.y, x.z, x.w};
  dev::storeUnit<16>(base + v * 16, valid, w);
}

/// Calls f(v0, stride, hi) for this thread's groups of kUnroll vectors v0 + k * stride (k <
/// kUnroll; f skips those >= hi) covering lo + threadIdx.x + i * blockDim.x < hi.
template <class F>
__device__ __forceinline__ void forGroups(size_t lo, size_t hi, F&& f) {
  const size_t bd = blockDim.x;
  for (size_t v0 = lo + threadIdx.x; v0 < hi; v0 += kUnroll * bd) f(v0, bd, hi);
}

template <class T, RedOpKind Op, bool Al>
__device__ void treeBody(const TreeParams& p, uint64_t seq0, uint64_t* seqOut, bool* failed) {
  using Acc = dev::UnitAcc<T, Op, 16>;
  const dev::RedRt<T, Op> rt(p.op, p.factor);
  const int b = blockIdx.x, G = gridDim.x, N = p.size, me = p.rank;
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  const size_t totalV = (p.bytes + 15) / 16;
  const size_t fullV = p.bytes / 16;                  // vectors with all 16 bytes valid
  const int tailBytes = int(p.bytes % 16);            // valid bytes of vector fullV (0: none)
  const size_t chunkV = size_t(N) * G * p.capV;
  const size_t nChunks = (totalV + chunkV - 1) / chunkV;
  const size_t inbox = p.capV * 16;                   // bytes of one [src][block] inbox
  const size_t agOff = size_t(N - 1) * G * inbox;     // AG inboxes follow the RS inboxes
  uint64_t* rowsRS[kMaxRanks];
  uint64_t* rowsAG[kMaxRanks];
  for (int r = 0; r < N; ++r) {
    uint64_t* f = reinterpret_cast<uint64_t*>(p.peers.signal[r]);
    rowsRS[r] = f + (0 * kMaxBlocks + b) * kMaxRanks;
    rowsAG[r] = f + (1 * kMaxBlocks + b) * kMaxRanks;
  }
  // Inbox [src][b] in owner's region (src != owner): slots are numbered over the other ranks.
  auto box = [&](int owner, size_t off, int src) -> uint4* {
    const int slot = src < owner ? src : src - 1;
    return reinterpret_cast<uint4*>(p.peers.staging[owner] + off + (size_t(slot) * G + b) * inbox);
  };
  // This thread handles the partial last vector when it lies in `part`.
  auto tailHere = [&](Range part) {
    return tailBytes != 0 && threadIdx.x == 0 && fullV >= part.lo && fullV < part.hi;
  };

  size_t c = 0;
  for (; c < nChunks; ++c) {
    const uint64_t q = seq0 + c + 1;
    const size_t cv0 = c * chunkV;
    const size_t cV = min(chunkV, totalV - cv0);
    // 1. push my part of every other slice s to rank s's RS inbox [me][b].
    for (int s = 0; s < N; ++s) {
      if (s == me) continue;
      Range sl = split(cv0, cV, N, s);
      Range part = split(sl.lo, sl.hi - sl.lo, G, b);
      uint4* dst = box(s, 0, me);
      forGroups(part.lo, min(part.hi, fullV), [&](size_t v0, size_t st, size_t hi) {
        uint4 x[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) x[k] = ldUser<Al>(p.send, v0 + k * st);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) dst[v0 + k * st - part.lo] = x[k];
      });
      if (tailHere(part)) dst[fullV - part.lo] = ldTail(p.send, fullV, tailBytes);
    }
    if (!dev::blockBarrier(rowsRS, me, N, q, wait)) {
      *failed = true;
      break;
    }
    // 2. reduce my part of slice `me` (own data from send), write it to recv and push it to every
    //    other rank's AG inbox [me][b].
    {
      Range sl = split(cv0, cV, N, me);
      Range part = split(sl.lo, sl.hi - sl.lo, G, b);
      forGroups(part.lo, min(part.hi, fullV), [&](size_t v0, size_t st, size_t hi) {
        Acc acc[kUnroll];
        for (int r = 0; r < N; ++r) {
          uint4 x[kUnroll];
          if (r == me) {
#pragma unroll
            for (int k = 0; k < kUnroll; ++k)
              if (v0 + k * st < hi) x[k] = ldUser<Al>(p.send, v0 + k * st);
          } else {
            const uint4* in = box(me, 0, r);
#pragma unroll
            for (int k = 0; k < kUnroll; ++k)
              if (v0 + k * st < hi) x[k] = dev::ldCg(in + (v0 + k * st - part.lo));
          }
#pragma unroll
          for (int k = 0; k < kUnroll; ++k)
            if (v0 + k * st < hi) {
              uint32_t w[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
              acc[k].add(w, r == 0, rt);
            }
        }
        uint4 out[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) {
            uint32_t o[4];
            acc[k].result(N, rt, o);
            out[k] = make_uint4(o[0], o[1], o[2], o[3]);
          }
        for (int r = 0; r < N; ++r) {
          if (r == me) {
#pragma unroll
            for (int k = 0; k < kUnroll; ++k)
              if (v0 + k * st < hi) stUser<Al>(p.recv, v0 + k * st, out[k]);
          } else {
            uint4* ag = box(r, agOff, me);
#pragma unroll
            for (int k = 0; k < kUnroll; ++k)
              if (v0 + k * st < hi) ag[v0 + k * st - part.lo] = out[k];
          }
        }
      });
      if (tailHere(part)) {
        Acc acc;
        for (int r = 0; r < N; ++r) {
          uint4 x = r == me ? ldTail(p.send, fullV, tailBytes)
                            : dev::ldCg(box(me, 0, r) + (fullV - part.lo));
          uint32_t w[4] = {x.x, x.y, x.z, x.w};
          acc.add(w, r == 0, rt);
        }
        uint32_t o[4];
        acc.result(N, rt, o);
        uint4 out = make_uint4(o[0], o[1], o[2], o[3]);
        for (int r = 0; r < N; ++r) {
          if (r == me) stTail(p.recv, fullV, tailBytes, out);
          else box(r, agOff, me)[fullV - part.lo] = out;
        }
      }
    }
    if (!dev::blockBarrier(rowsAG, me, N, q, wait)) {
      *failed = true;
      break;
    }
    // 3. copy my part of every other slice s from my AG inbox [s][b] to recv.
    for (int s = 0; s < N; ++s) {
      if (s == me) continue;
      Range sl = split(cv0, cV, N, s);
      Range part = split(sl.lo, sl.hi - sl.lo, G, b);
      const uint4* src = box(me, agOff, s);
      forGroups(part.lo, min(part.hi, fullV), [&](size_t v0, size_t st, size_t hi) {
        uint4 x[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) x[k] = dev::ldCg(src + (v0 + k * st - part.lo));
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) stUser<Al>(p.recv, v0 + k * st, x[k]);
      });
      if (tailHere(part)) stTail(p.recv, fullV, tailBytes, dev::ldCg(src + (fullV - part.lo)));
    }
  }
  *seqOut = seq0 + nChunks;
}

template <class T>
struct TreeRun {
  const TreeParams& p;
  uint64_t seq0;
  uint64_t* out;
  bool* failed;
  template <RedOpKind Op> __device__ void operator()() {
    if (p.aligned) treeBody<T, Op, true>(p, seq0, out, failed);
    else treeBody<T, Op, false>(p, seq0, out, failed);
  }
};

/// Chunks of a call (as treeBody walks them): the counter advance of a call, failed or not.
__device__ __forceinline__ uint64_t treeChunks(const TreeParams& p) {
  const size_t chunkV = size_t(p.size) * gridDim.x * p.capV;
  return ((p.bytes + 15) / 16 + chunkV - 1) / chunkV;
}

/// Contract (dev::peerCall, device/peer_kernel.cuh): poison `recv`; body treeBody; the block's
/// counter moves from seq0 to `next`: seq0 + treeChunks() unless the body set it.
template <class T>
__global__ void __launch_bounds__(512) ddaTreeAllReduceKernel(TreeParams p) {
  const uint64_t seq0 = p.counters[blockIdx.x];
  uint64_t next = seq0 + treeChunks(p);
  dev::peerCall(p.fail, p.counters + blockIdx.x, next, dev::PoisonBuf{p.recv, p.bytes}, [&] {
    bool failed = false;
    dev::dispatchOp<T>(p.op, TreeRun<T>{p, seq0, &next, &failed});
    return failed;
  });
}

}  // namespace

// Default grid: with fewer blocks one GPU cannot keep enough stores in flight to fill NVLink
// (docs/PERF.md, runs 1-2).
constexpr int kTreeDefaultBlocks = 128;

int ddaTreeBlocks(const DeviceCtx& ctx) {
  int g = ctx.cfg.ddaMaxBlocks > 0 ? ctx.cfg.ddaMaxBlocks : kTreeDefaultBlocks;
  g = std::min(g, kMaxBlocks);
  if (ctx.smCount > 0) g = std::min(g, ctx.smCount);
  return std::max(g, 1);
}

namespace {

class DdaTree final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kTree); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    return a.type == CollType::AllReduce && ctx.peerUsable() && ctx.size >= 2 && a.count > 0 &&
           ddaOpSupported(a.op.kind, a.dtype) &&
           ctx.peer->regionBytes(StagingRegion::kTree) / (2 * size_t(ctx.size - 1) * ddaTreeBlocks(ctx) * 16) > 0;
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    constexpr const char* kWhat = "DDA tree allreduce";
    const DataType kt = dev::ddaKernelDtype(a.dtype, a.op.kind);
    const auto kernel = dev::dispatchDtype(dev::DdaTypes{}, kt, kWhat,
                                           [&]<class T>() { return &ddaTreeAllReduceKernel<T>; });
    const int G = ddaTreeBlocks(ctx);
    TreeParams p{};
    for (int r = 0; r < ctx.size; ++r) {
      p.peers.staging[r] = ctx.peer->region(r, StagingRegion::kTree);
      p.peers.signal[r] = ctx.peer->signalRegion(r, SignalRegion::kTree);
    }
    dev::fillCallParams(p, a, ctx, kCounterTree);
    // Two phases x (N - 1) source inboxes per block: the own slice never goes through staging.
    p.capV = ctx.peer->regionBytes(StagingRegion::kTree) / (2 * size_t(ctx.size - 1) * G * 16);
    p.aligned = dev::aligned16(a);
    size_t totalV = (p.bytes + 15) / 16;
    size_t perBlock = std::min(totalV, size_t(ctx.size) * G * p.capV) / (size_t(ctx.size) * G) + 1;
    int threads = int(std::min<size_t>(512, std::max<size_t>(64, (perBlock + 31) / 32 * 32)));
    dev::launchKernel(kWhat, kernel, G, threads, stream, p);
  }
};

}  // namespace

std::unique_ptr<DeviceAlgo> makeDdaTree() { return std::make_unique<DdaTree>(); }

}  // namespace cclx
