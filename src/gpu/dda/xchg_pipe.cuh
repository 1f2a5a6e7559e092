// The pipelined exchange's device pieces (the synchronization contract, the wire format of a
// chunk and the failure paths are described in xchg_pipe.cu), shared by the kernels that run it:
// the exchange collectives with the plan made on the host (xchg_pipe.cu) and the all-to-all-v
// whose split sizes are read on the device (xchg_dev.cu). Both use the same staging (kXchg),
// signal words, counters and grid, so their calls continue one chunk sequence per pair and block.
// Every function here is internal to the including file (anonymous namespace).
#pragma once

#include <algorithm>
#include <type_traits>

#include "gpu/dda/dda.h"
#include "gpu/dda/xchg.h"
#include "gpu/device/units.cuh"

namespace cclx {
namespace {
constexpr int kUnroll = 2;
// Marks the headers of point-to-point rounds (lengths stay far below 2^56): a chunk of a batch
// that a peer's collective would take (or the reverse: the two ends issued a batch and a
// collective of one comm in different orders) fails the call naming the sender instead of being
// read as the collective's data.
constexpr uint64_t kP2PKind = uint64_t(1) << 56;
// Marks the headers of the all-to-all-v whose split sizes are read on the device (xchg_dev.cu):
// its chunks are never taken for another collective's, nor the reverse.
constexpr uint64_t kDevKind = uint64_t(1) << 57;
constexpr int kThreads = 512;

struct PipeParams {
  char* region[kMaxRanks];        // every rank's kXchg region
  uint64_t* flags[kMaxRanks];     // every rank's kXchg signal region: data [src][b], acks [dst][b]
  const char* src[kMaxRanks];     // XchgPlan
  size_t srcBytes[kMaxRanks];
  char* dst[kMaxRanks];
  size_t dstBytes[kMaxRanks];
  size_t inboxBytes;              // one inbox: a 16-byte header + capV vectors
  size_t capV;
  uint64_t* sent;                 // chunks sent [peer][block] (kMaxRanks * kMaxBlocks)
  uint64_t* recvd;                // chunks received [peer][block]
  FailParams fail;
  int rank, size;
  RedOpKind op;
  double factor;
  uint32_t sendMask, recvMask;    // XchgPlan: the directions that take part
  uint64_t kind;                  // in every header's length word: kP2PKind for a batch's round
  bool reduce;
  bool aligned;
  char* out;                      // non-null: the call's one output buffer (outBytes), poisoned
  size_t outBytes;                //   whole instead of the plan's messages (xchg_dev.cu)
};

struct Range {
  size_t lo, hi;
};
/// Part idx of n items split into `parts` balanced ranges.
__device__ __forceinline__ Range split(size_t n, int parts, int idx) {
  const size_t base = n / parts, rem = n % parts;
  const size_t s = idx * base + min(size_t(idx), rem);
  return {s, s + base + (size_t(idx) < rem ? 1 : 0)};
}

/// Block b's part of a message of `bytes` (in 16-byte vectors) and its chunk count (>= 1).
struct Part {
  Range v;         // vectors [lo, hi)
  size_t chunks;
};
__device__ __forceinline__ Part partOf(size_t bytes, size_t capV) {
  Part p;
  p.v = split((bytes + 15) / 16, gridDim.x, blockIdx.x);
  const size_t n = p.v.hi - p.v.lo;
  p.chunks = n == 0 ? 1 : (n + capV - 1) / capV;
  return p;
}

/// Chunks of the message to rank d / from rank s in this call (0: the direction takes no part).
__device__ __forceinline__ size_t outChunks(const PipeParams& p, int d) {
  return (p.sendMask >> d & 1u) ? partOf(p.srcBytes[d], p.capV).chunks : 0;
}
__device__ __forceinline__ size_t inChunks(const PipeParams& p, int s) {
  return (p.recvMask >> s & 1u) ? partOf(p.dstBytes[s], p.capV).chunks : 0;
}

__device__ __forceinline__ size_t dataFlag(int src) { return size_t(src) * kMaxBlocks + blockIdx.x; }
__device__ __forceinline__ size_t ackFlag(int dst) {
  return size_t(kMaxRanks + dst) * kMaxBlocks + blockIdx.x;
}

/// Inbox [src][blockIdx.x][par] in rank `owner`'s region.
__device__ __forceinline__ char* inbox(const PipeParams& p, int owner, int src, int par) {
  const int slot = src < owner ? src : src - 1;
  return p.region[owner] + ((size_t(slot) * gridDim.x + blockIdx.x) * 2 + par) * p.inboxBytes;
}

/// Vector v (16 bytes, `valid` of them real) of a user buffer. Al: the buffer is 16-byte aligned.
template <bool Al>
__device__ __forceinline__ uint4 ldUser(const char* base, size_t v, int valid) {
  if (Al && valid == 16) return *reinterpret_cast<const uint4*>(base + v * 16);
  uint32_t w[4];
  dev::loadUnit<16>(base + v * 16, valid, w);
  return make_uint4(w[0], w[1], w[2], w[3]);
}
template <bool Al>
__device__ __forceinline__ void stUser(char* base, size_t v, int valid, uint4 x) {
  if (Al && valid == 16) {
    *reinterpret_cast<uint4*>(base + v * 16) = x;
    return;
  }
  uint32_t w[4] = {x.x, x.y, x.z, x.w};
  dev::storeUnit<16>(base + v * 16, valid, w);
}
__device__ __forceinline__ int validOf(size_t bytes, size_t v) {
  const size_t left = bytes - v * 16;
  return left < 16 ? int(left) : 16;
}

/// Chunk k's vectors of a part.
__device__ __forceinline__ Range chunkOf(const Part& pt, size_t k, size_t capV) {
  const size_t lo = min(pt.v.lo + k * capV, pt.v.hi);
  return {lo, min(lo + capV, pt.v.hi)};
}

/// Copies vectors [r.lo, r.hi) of a message of `bytes` from `from` (vector v at from[v - r.lo]
/// when `fromBox`, else the user buffer) to `to` (likewise).
template <bool Al>
__device__ __forceinline__ void moveChunk(const char* from, bool fromBox, char* to, bool toBox,
                                          Range r, size_t bytes) {
  const size_t bd = blockDim.x;
  for (size_t v0 = r.lo + threadIdx.x; v0 < r.hi; v0 += kUnroll * bd) {
    uint4 x[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t v = v0 + k * bd;
      if (v >= r.hi) break;
      x[k] = fromBox ? dev::ldCg(reinterpret_cast<const uint4*>(from) + (v - r.lo))
                     : ldUser<Al>(from, v, validOf(bytes, v));
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t v = v0 + k * bd;
      if (v >= r.hi) break;
      if (toBox) reinterpret_cast<uint4*>(to)[v - r.lo] = x[k];
      else stUser<Al>(to, v, validOf(bytes, v), x[k]);
    }
  }
}

/// Reduce-scatter chunk: output vectors r of the own message, ranks 0..N-1 in order.
template <class T, RedOpKind Op, bool Al>
__device__ __forceinline__ void reduceChunk(const PipeParams& p, Range r, const uint64_t* q0) {
  const dev::RedRt<T, Op> rt(p.op, p.factor);
  const size_t bytes = p.dstBytes[0], bd = blockDim.x;
  const uint4* box[kMaxRanks];
  for (int s = 0; s < p.size; ++s)
    box[s] = s == p.rank ? nullptr
                         : reinterpret_cast<const uint4*>(inbox(p, p.rank, s, int(q0[s] & 1)) + 16);
  for (size_t v0 = r.lo + threadIdx.x; v0 < r.hi; v0 += kUnroll * bd) {
    dev::UnitAcc<T, Op, 16> acc[kUnroll];
    for (int s = 0; s < p.size; ++s) {
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const size_t v = v0 + k * bd;
        if (v >= r.hi) break;
        const uint4 x = s == p.rank ? ldUser<Al>(p.src[s], v, validOf(bytes, v)) : dev::ldCg(box[s] + (v - r.lo));
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
        acc[k].add(w, s == 0, rt);
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t v = v0 + k * bd;
      if (v >= r.hi) break;
      uint32_t o[4];
      acc[k].result(p.size, rt, o);
      stUser<Al>(p.dst[0], v, validOf(bytes, v), make_uint4(o[0], o[1], o[2], o[3]));
    }
  }
}

/// Every output of the call, poisoned by this block's share (entry) or by this block alone.
__device__ void poisonOutputs(const PipeParams& p, bool all) {
  if (p.out) {
    all ? dev::poisonAll(p.out, p.outBytes) : dev::poisonShare(p.out, p.outBytes);
    return;
  }
  for (int s = 0; s < (p.reduce ? 1 : p.size); ++s) {
    if (!(p.recvMask >> s & 1u)) continue;  // a direction without a message has no output
    all ? dev::poisonAll(p.dst[s], p.dstBytes[s]) : dev::poisonShare(p.dst[s], p.dstBytes[s]);
  }
}

/// Block b's whole call. Reduce: T and Op are the element type and op; copies use T = void.
/// Returns true when the block stopped (the caller poisons).
template <class T, RedOpKind Op, bool Al>
__device__ bool pipeBody(const PipeParams& p, const uint64_t* s0, const uint64_t* r0) {
  const int me = p.rank, N = p.size, t = threadIdx.x;
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  uint64_t* const mine = p.flags[me];
  size_t rounds = 0;
  for (int r = 0; r < N; ++r) rounds = max(rounds, max(outChunks(p, r), inChunks(p, r)));
  for (size_t k = 0; k < rounds; ++k) {
    // 1. pushes: wait for the inbox parity to be free, write the chunks, publish them.
    int failed = 0;
    if (t < N && t != me && k < outChunks(p, t)) {
      const uint64_t q = s0[t] + k + 1;
      if (q >= 3 && !dev::waitFlagGE(mine + ackFlag(t), q - 2, wait, t)) failed = 1;
    }
    if (dev::syncThreadsOr(failed)) return true;
    dev::fenceAfterWait();
    for (int d = 0; d < N; ++d) {
      if (d == me || k >= outChunks(p, d)) continue;
      const Part pt = partOf(p.srcBytes[d], p.capV);
      const uint64_t q = s0[d] + k + 1;
      char* box = inbox(p, d, me, int(q & 1));
      const uint64_t len = p.srcBytes[d] | p.kind;
      if (t == 0) *reinterpret_cast<uint4*>(box) = make_uint4(uint32_t(len), uint32_t(len >> 32),
                                                              uint32_t(q), uint32_t(q >> 32));
      moveChunk<Al>(p.src[d], false, box + 16, true, chunkOf(pt, k, p.capV), p.srcBytes[d]);
    }
    dev::fenceBeforeSignal();
    __syncthreads();
    if (t < N && t != me && k < outChunks(p, t))
      dev::stReleaseSys(p.flags[t] + dataFlag(me), s0[t] + k + 1);
    // 2. receives: wait for the chunks, check their headers, take them, acknowledge them.
    if (t < N && t != me && k < inChunks(p, t)) {
      const uint64_t q = r0[t] + k + 1;
      if (!dev::waitFlagGE(mine + dataFlag(t), q, wait, t)) {
        failed = 1;
      } else {
        const uint4 h = dev::ldCg(reinterpret_cast<const uint4*>(inbox(p, me, t, int(q & 1))));
        const uint64_t len = uint64_t(h.x) | uint64_t(h.y) << 32, seq = uint64_t(h.z) | uint64_t(h.w) << 32;
        if (len != (p.dstBytes[t] | p.kind) || seq != q) {
          dev::raiseMismatch(p.fail, t);
          failed = 1;
        }
      }
    }
    if (dev::syncThreadsOr(failed)) return true;
    dev::fenceAfterWait();
    if constexpr (!std::is_void_v<T>) {
      uint64_t q[kMaxRanks];
      for (int s = 0; s < N; ++s) q[s] = r0[s] + k + 1;
      const Part pt = partOf(p.dstBytes[0], p.capV);
      reduceChunk<T, Op, Al>(p, chunkOf(pt, k, p.capV), q);
    } else {
      for (int s = 0; s < N; ++s) {
        if (k >= inChunks(p, s)) continue;
        const Part pt = partOf(p.dstBytes[s], p.capV);
        if (s == me) {
          if (p.src[me] != p.dst[me])
            moveChunk<Al>(p.src[me], false, p.dst[me], false, chunkOf(pt, k, p.capV), p.dstBytes[me]);
          continue;
        }
        const char* box = inbox(p, me, s, int((r0[s] + k + 1) & 1)) + 16;
        moveChunk<Al>(box, true, p.dst[s], false, chunkOf(pt, k, p.capV), p.dstBytes[s]);
      }
    }
    __syncthreads();  // the block's reads of the inboxes happen before the acks
    if (t < N && t != me && k < inChunks(p, t))
      dev::stReleaseSys(p.flags[t] + ackFlag(me), r0[t] + k + 1);
  }
  return false;
}

template <class T, bool Al>
struct PipeRun {
  const PipeParams& p;
  const uint64_t* s0;
  const uint64_t* r0;
  bool& failed;
  template <RedOpKind Op> __device__ void operator()() { failed = pipeBody<T, Op, Al>(p, s0, r0); }
};


/// One call of block blockIdx.x (all threads): reads the block's counters, runs `pre()` and then
/// pipeBody unless pre stopped the block (returned true in every thread, after recording why),
/// under dev::peerCall: poison every output (poisonOutputs) on a stop or an entry abort; on every
/// path thread r (a peer) moves the block's counters of pair r by the pair's chunk counts. T =
/// void: the copies; otherwise the reduce-scatter of T.
template <class T, class Pre>
__device__ __forceinline__ void pipeCall(const PipeParams& p, Pre&& pre) {
  const int b = blockIdx.x, N = p.size;
  uint64_t s0[kMaxRanks], r0[kMaxRanks];
  for (int r = 0; r < N; ++r) {
    s0[r] = p.sent[r * kMaxBlocks + b];
    r0[r] = p.recvd[r * kMaxBlocks + b];
  }
  auto body = [&] {
    if (pre()) return true;
    bool failed = false;
    if constexpr (std::is_void_v<T>) {
      failed = p.aligned ? pipeBody<void, RedOpKind::SUM, true>(p, s0, r0)
                         : pipeBody<void, RedOpKind::SUM, false>(p, s0, r0);
    } else if (p.aligned) {
      dev::dispatchOp<T>(p.op, PipeRun<T, true>{p, s0, r0, failed});
    } else {
      dev::dispatchOp<T>(p.op, PipeRun<T, false>{p, s0, r0, failed});
    }
    return failed;
  };
  auto advance = [&](bool) {
    if (threadIdx.x < unsigned(N) && int(threadIdx.x) != p.rank) {
      const int r = threadIdx.x;
      p.sent[r * kMaxBlocks + b] = s0[r] + outChunks(p, r);
      p.recvd[r * kMaxBlocks + b] = r0[r] + inChunks(p, r);
    }
  };
  dev::peerCall(p.fail, [&](bool all) { poisonOutputs(p, all); }, body, advance);
}

/// Bytes of one inbox [src][block][parity] of the kXchg region (a 16-byte header + vectors).
inline size_t inboxBytesOf(const DeviceCtx& ctx) {
  const size_t G = size_t(ddaTreeBlocks(ctx));
  return (ctx.peer->regionBytes(StagingRegion::kXchg) / (2 * size_t(ctx.size - 1) * G)) & ~size_t(15);
}

/// Threads of a launch whose largest message (sent or received) is `maxBytes`: enough for one
/// round of a block's largest chunk (kUnroll vectors each).
inline int pipeThreads(size_t capV, size_t maxBytes, int G) {
  const size_t perBlock = std::min(capV, (maxBytes + 15) / 16 / size_t(G) + 1);
  const size_t want = (perBlock + kUnroll - 1) / kUnroll;
  return int(std::min<size_t>(kThreads, std::max<size_t>(64, (want + 31) / 32 * 32)));
}

}  // namespace
}  // namespace cclx
