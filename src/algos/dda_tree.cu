// DDA tree allreduce: reduce-scatter then all-gather, both by pushes into peers' staging, in one
// kernel that walks the message in chunks, pipelined by two teams of warps per block.
//
// Synchronization contract. The grid is always ddaTreeBlocks() blocks, identical on every rank;
// block b only ever synchronizes with block b of the peers (no grid-wide dependency). Every rank's
// tree region holds, per block b, two RS inboxes and two AG inboxes (buffer = epoch % 2), each
// with one slot [src] of capV 16-byte vectors for every *other* rank src (a rank's own data never
// goes through staging). A message is cut into chunks of chunkV <= N*G*capV vectors; each chunk
// into N slices (balanced, 16-byte boundaries, so count < N works: some slices are empty), each
// slice into G block parts (each <= capV). Chunk c of a call has epoch e = counter[b] + 1 + c
// (values only increase across calls, never reset). Flag rows per block: 0 = RS data pushed,
// 1 = slice reduced (AG data pushed, RS inbox read), 2 = AG inbox read.
//   push(c)   (producer): after row 1 >= e - 2 from every rank (every rank finished reducing the
//             chunk that last used this RS buffer), push my part of every slice s != rank of
//             `send` into rank s's RS inbox [buf][me]; row 0 = e to every rank.
//   reduce(c) (producer): after row 0 >= e and row 2 >= e - 2 from every rank (the AG buffer's
//             last readers are done), reduce my part of slice `rank` in rank order 0..N-1 (rank
//             r's contribution from RS inbox [buf][r], the own one straight from `send`), write it
//             to `recv` and push it into every other rank's AG inbox [buf][me]; row 1 = e.
//   copy(c)   (consumer): after row 1 >= e from every rank, copy my part of every slice s != rank
//             from AG inbox [buf][s] to `recv`; row 2 = e.
// The producer runs push(c + 1) before reduce(c), so the wait before reduce(c) finds the peers'
// data there, and the consumer copies chunk c out while the producer pushes chunk c + 1. With a
// single chunk the whole block runs push, reduce and copy in turn (one team). The waits on e - 2
// also cover the calls before (epochs continue), so no extra handshake is needed between calls.
// In place (send == recv): a vector of slice s != rank is read from `send` by push(c) before the
// producer's row-1 signal of chunk c, which copy(c), its only writer, waits for (the own rank's
// row included); a vector of the own slice is read from `send` and written to `recv` in reduce(c)
// by the same thread, the write after all of its reads (peers never read this rank's `send`).
// Each thread moves kUnroll independent vectors per iteration (all loads, then all stores) for
// memory-level parallelism; the one partial vector at the end of the message (if any) is handled
// by thread 0 of the team with byte-exact accesses. Waits carry a %globaltimer deadline; on
// expiry the team records the missing rank and stops (writes no more).
#include "algos/dda_common.cuh"

namespace cclx {
namespace {

constexpr int kUnroll = 2;  // independent 16-byte vectors in flight per thread
constexpr int kTreeThreads = 512;
constexpr int kRowRS = 0, kRowReduced = 1, kRowAGRead = 2;

struct TreeParams {
  dev::PeerPtrs peers;  // staging: tree region bases; signal: tree flag region bases
  const char* send;
  char* recv;
  size_t bytes;
  size_t capV;          // 16-byte vectors per inbox [kind][buf][src][block]
  size_t chunkV;        // 16-byte vectors per chunk (<= N * G * capV)
  uint64_t* counters;   // one per block
  uint32_t* err;
  uint64_t timeoutNs;
  int rank, size;
  int producerThreads;  // with several chunks: threads [0, producerThreads) push and reduce
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

/// Calls f(v0, stride, hi) for the team thread's groups of kUnroll vectors v0 + k * stride (k <
/// kUnroll; f skips those >= hi) covering lo + tid + i * nth < hi.
template <class F>
__device__ __forceinline__ void forGroups(size_t lo, size_t hi, int tid, int nth, F&& f) {
  for (size_t v0 = lo + tid; v0 < hi; v0 += size_t(kUnroll) * nth) f(v0, size_t(nth), hi);
}

template <class T, RedOpKind Op, bool Al>
__device__ void treeBody(const TreeParams& p, uint64_t seq0, uint64_t* seqOut) {
  using A = typename math::AccOf<T>::type;
  using Acc = dev::UnitAcc<T, Op, 16>;
  const A factor = Op == RedOpKind::PREMUL_SUM ? A(p.factor) : A(1);
  const int b = blockIdx.x, G = gridDim.x, N = p.size, me = p.rank;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const size_t totalV = (p.bytes + 15) / 16;
  const size_t fullV = p.bytes / 16;                  // vectors with all 16 bytes valid
  const int tailBytes = int(p.bytes % 16);            // valid bytes of vector fullV (0: none)
  const size_t nChunks = (totalV + p.chunkV - 1) / p.chunkV;
  const size_t inbox = p.capV * 16;                   // bytes of one inbox [kind][buf][src][block]
  uint64_t* rows[3][kMaxRanks];
  for (int r = 0; r < N; ++r) {
    uint64_t* f = reinterpret_cast<uint64_t*>(p.peers.signal[r]);
    for (int k = 0; k < 3; ++k) rows[k][r] = f + (size_t(k) * kMaxBlocks + b) * kMaxRanks;
  }
  // Inbox [kind 0 = RS, 1 = AG][buf][src][b] in owner's region (src != owner): slots are numbered
  // over the other ranks.
  auto box = [&](int owner, int kind, uint64_t epoch, int src) -> uint4* {
    const size_t slot = size_t(src < owner ? src : src - 1);
    const size_t buf = size_t(kind) * 2 + size_t(epoch & 1u);
    return reinterpret_cast<uint4*>(p.peers.staging[owner] +
                                    ((buf * size_t(N - 1) + slot) * G + b) * inbox);
  };
  auto chunkOf = [&](size_t c) { return Range{c * p.chunkV, min((c + 1) * p.chunkV, totalV)}; };
  auto partOf = [&](Range ch, int s) {
    Range sl = split(ch.lo, ch.hi - ch.lo, N, s);
    return split(sl.lo, sl.hi - sl.lo, G, b);
  };
  // This team thread handles the partial last vector when it lies in `part`.
  auto tailHere = [&](const dev::Team& tm, Range part) {
    return tailBytes != 0 && tm.tid() == 0 && fullV >= part.lo && fullV < part.hi;
  };

  // push(c): my part of every other slice s to rank s's RS inbox [buf][me].
  auto push = [&](const dev::Team& tm, size_t c, uint64_t e) {
    const Range ch = chunkOf(c);
    for (int s = 0; s < N; ++s) {
      if (s == me) continue;
      const Range part = partOf(ch, s);
      uint4* dst = box(s, 0, e, me);
      forGroups(part.lo, min(part.hi, fullV), tm.tid(), tm.threads,
                [&](size_t v0, size_t st, size_t hi) {
        uint4 x[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) x[k] = ldUser<Al>(p.send, v0 + k * st);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) dst[v0 + k * st - part.lo] = x[k];
      });
      if (tailHere(tm, part)) dst[fullV - part.lo] = ldTail(p.send, fullV, tailBytes);
    }
  };
  // reduce(c): my part of slice `me` (own data from send) to recv and every other rank's AG
  // inbox [buf][me].
  auto reduce = [&](const dev::Team& tm, size_t c, uint64_t e) {
    const Range part = partOf(chunkOf(c), me);
    forGroups(part.lo, min(part.hi, fullV), tm.tid(), tm.threads,
              [&](size_t v0, size_t st, size_t hi) {
      Acc acc[kUnroll];
      for (int r = 0; r < N; ++r) {
        uint4 x[kUnroll];
        if (r == me) {
#pragma unroll
          for (int k = 0; k < kUnroll; ++k)
            if (v0 + k * st < hi) x[k] = ldUser<Al>(p.send, v0 + k * st);
        } else {
          const uint4* in = box(me, 0, e, r);
#pragma unroll
          for (int k = 0; k < kUnroll; ++k)
            if (v0 + k * st < hi) x[k] = __ldcg(in + (v0 + k * st - part.lo));
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) {
            uint32_t w[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
            acc[k].add(w, r == 0, factor);
          }
      }
      uint4 out[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        if (v0 + k * st < hi) {
          uint32_t o[4];
          acc[k].result(N, o);
          out[k] = make_uint4(o[0], o[1], o[2], o[3]);
        }
      for (int r = 0; r < N; ++r) {
        if (r == me) {
#pragma unroll
          for (int k = 0; k < kUnroll; ++k)
            if (v0 + k * st < hi) stUser<Al>(p.recv, v0 + k * st, out[k]);
        } else {
          uint4* ag = box(r, 1, e, me);
#pragma unroll
          for (int k = 0; k < kUnroll; ++k)
            if (v0 + k * st < hi) ag[v0 + k * st - part.lo] = out[k];
        }
      }
    });
    if (tailHere(tm, part)) {
      Acc acc;
      for (int r = 0; r < N; ++r) {
        uint4 x = r == me ? ldTail(p.send, fullV, tailBytes)
                          : __ldcg(box(me, 0, e, r) + (fullV - part.lo));
        uint32_t w[4] = {x.x, x.y, x.z, x.w};
        acc.add(w, r == 0, factor);
      }
      uint32_t o[4];
      acc.result(N, o);
      uint4 out = make_uint4(o[0], o[1], o[2], o[3]);
      for (int r = 0; r < N; ++r) {
        if (r == me) stTail(p.recv, fullV, tailBytes, out);
        else box(r, 1, e, me)[fullV - part.lo] = out;
      }
    }
  };
  // copy(c): my part of every other slice s from my AG inbox [buf][s] to recv.
  auto copy = [&](const dev::Team& tm, size_t c, uint64_t e) {
    const Range ch = chunkOf(c);
    for (int s = 0; s < N; ++s) {
      if (s == me) continue;
      const Range part = partOf(ch, s);
      const uint4* src = box(me, 1, e, s);
      forGroups(part.lo, min(part.hi, fullV), tm.tid(), tm.threads,
                [&](size_t v0, size_t st, size_t hi) {
        uint4 x[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) x[k] = __ldcg(src + (v0 + k * st - part.lo));
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (v0 + k * st < hi) stUser<Al>(p.recv, v0 + k * st, x[k]);
      });
      if (tailHere(tm, part)) stTail(p.recv, fullV, tailBytes, __ldcg(src + (fullV - part.lo)));
    }
  };
  auto wait = [&](const dev::Team& tm, int row, uint64_t v) {
    return dev::teamWaitRows(tm, rows[row], me, N, v, deadline, p.err);
  };
  auto signal = [&](const dev::Team& tm, int row, uint64_t v) {
    dev::teamSignalRows(tm, rows[row], me, N, v);
  };

  const bool teams = nChunks > 1;
  const int nth = int(blockDim.x);
  const dev::Team prod{1, 0, teams ? p.producerThreads : nth};
  const dev::Team cons = teams ? dev::Team{2, p.producerThreads, nth - p.producerThreads} : prod;
  const bool isProd = !teams || int(threadIdx.x) < p.producerThreads;
  const bool isCons = !teams || !isProd;
  bool ok = true;
  if (isProd) {
    auto pushStep = [&](size_t c) {
      const uint64_t e = seq0 + 1 + c;
      if (e > 2 && !wait(prod, kRowReduced, e - 2)) return false;  // RS buffer free everywhere
      push(prod, c, e);
      signal(prod, kRowRS, e);
      return true;
    };
    ok = pushStep(0);
    for (size_t c = 0; ok && c < nChunks; ++c) {
      const uint64_t e = seq0 + 1 + c;
      if (c + 1 < nChunks && !(ok = pushStep(c + 1))) break;
      if (!(ok = wait(prod, kRowRS, e))) break;                           // every push(c) arrived
      if (e > 2 && !(ok = wait(prod, kRowAGRead, e - 2))) break;          // AG buffer free
      reduce(prod, c, e);
      signal(prod, kRowReduced, e);
    }
  }
  if (isCons) {
    for (size_t c = 0; ok && c < nChunks; ++c) {
      const uint64_t e = seq0 + 1 + c;
      if (!(ok = wait(cons, kRowReduced, e))) break;                      // every reduce(c) arrived
      copy(cons, c, e);
      signal(cons, kRowAGRead, e);
    }
  }
  *seqOut = seq0 + nChunks;
}

template <class T>
struct TreeRun {
  const TreeParams& p;
  uint64_t seq0;
  uint64_t* out;
  template <RedOpKind Op> __device__ void operator()() {
    if (p.aligned) treeBody<T, Op, true>(p, seq0, out);
    else treeBody<T, Op, false>(p, seq0, out);
  }
};

template <class T>
__global__ void __launch_bounds__(kTreeThreads) ddaTreeKernel(TreeParams p) {
  const uint64_t seq0 = p.counters[blockIdx.x];
  uint64_t next = seq0;
  dev::dispatchOp<T>(p.op, TreeRun<T>{p, seq0, &next});
  __syncthreads();  // every thread has read the counter
  if (threadIdx.x == 0) p.counters[blockIdx.x] = next;
}

}  // namespace

// Default grid: with fewer blocks a single H200 cannot keep enough stores in flight to fill NVLink
// (2 ranks, 16 MiB: 32 blocks 101 us, 64 blocks 78 us, 128 blocks 71 us before the rework).
constexpr int kTreeDefaultBlocks = 128;
// Pipelined chunks keep at least this many 16-byte vectors per block part (8 KiB).
constexpr size_t kTreeMinPartV = 512;
// Warps of a 16-warp block that push and reduce when the tree pipelines; the rest copy out.
constexpr int kTreeProducerWarps = 12;

int ddaTreeBlocks(const DeviceCtx& ctx) {
  int g = ctx.cfg.ddaMaxBlocks > 0 ? ctx.cfg.ddaMaxBlocks : kTreeDefaultBlocks;
  g = std::min(g, kMaxBlocks);
  if (ctx.smCount > 0) g = std::min(g, ctx.smCount);
  return std::max(g, 1);
}

void ddaTreeLaunch(const DdaArgs& a, DeviceCtx& ctx, void* stream) {
  CCLX_REQUIRE(ctx.peerUsable() && ctx.size >= 2 && a.count > 0, cclxInternalError,
               "DDA tree cannot run");
  const int G = ddaTreeBlocks(ctx);
  TreeParams p{};
  for (int r = 0; r < ctx.size; ++r) {
    p.peers.staging[r] = ctx.peer->region(r, StagingRegion::kTree);
    p.peers.signal[r] = ctx.peer->signalRegion(r, SignalRegion::kTree);
  }
  p.send = static_cast<const char*>(a.send);
  p.recv = static_cast<char*>(a.recv);
  p.bytes = a.count * dtypeSize(a.dtype);
  // Two kinds (RS, AG) x two buffers x (N - 1) source inboxes per block: the own slice never
  // goes through staging.
  const size_t N = size_t(ctx.size);
  p.capV = ctx.peer->regionBytes(StagingRegion::kTree) / (4 * (N - 1) * G * 16);
  CCLX_REQUIRE(p.capV > 0, cclxInternalError, "DDA tree: staging too small");
  p.counters = ctx.counters + kCounterTree;
  p.err = ctx.errorFlagDev;
  p.timeoutNs = a.timeoutNs;
  p.rank = ctx.rank;
  p.size = ctx.size;
  p.op = a.op.kind;
  p.factor = a.op.factor;
  p.aligned = ((reinterpret_cast<uintptr_t>(a.send) | reinterpret_cast<uintptr_t>(a.recv)) & 15) == 0;
  // Chunks: as few as the staging allows, but at least cfg.ddaTreeChunks (a deeper pipeline
  // overlaps more) while a block's part of a slice keeps kTreeMinPartV vectors.
  const size_t totalV = (p.bytes + 15) / 16;
  const size_t maxChunkV = N * G * p.capV;
  size_t nC = (totalV + maxChunkV - 1) / maxChunkV;
  nC = std::max(nC, std::min(size_t(ctx.cfg.ddaTreeChunks), totalV / (N * G * kTreeMinPartV)));
  nC = std::max<size_t>(nC, 1);
  p.chunkV = (totalV + nC - 1) / nC;
  const bool teams = (totalV + p.chunkV - 1) / p.chunkV > 1;
  int warps = ctx.cfg.ddaTreeProducerWarps > 0 ? ctx.cfg.ddaTreeProducerWarps : kTreeProducerWarps;
  p.producerThreads = 32 * std::min(warps, kTreeThreads / 32 - 1);
  // One chunk: a single team, as many threads as a block part needs (64..512).
  size_t perBlock = p.chunkV / (N * G) + 1;
  int threads = teams ? kTreeThreads
                      : int(std::min<size_t>(kTreeThreads,
                                             std::max<size_t>(64, (perBlock + 31) / 32 * 32)));
  auto s = static_cast<cudaStream_t>(stream);
  dev::dispatchType(a.dtype, [&]<class T>() { ddaTreeKernel<T><<<G, threads, 0, s>>>(p); });
  CCLX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cclx
