// DDA tree allreduce: reduce-scatter then all-gather, both by pushes into peers' staging, in one
// kernel that walks the message in chunks.
//
// Synchronization contract. The grid is always ddaTreeBlocks() blocks, identical on every rank;
// block b only ever synchronizes with block b of the peers. A message is cut into chunks of at
// most N*G*capV 16-byte vectors; each chunk into N slices (balanced, 16-byte boundaries, so
// count < N works: some slices are empty), each slice into G block parts. Per chunk, block b with
// sequence number q (its device counter + chunk index + 1; values only increase, never reset):
//   1. pushes its part of every slice s of `send` into rank s's reduce-scatter inbox [me][b],
//      then blockBarrier on the RS flag row (release.sys after __syncthreads, acquire.sys wait);
//   2. reduces its part of slice `rank` over inboxes [0..N-1][b] in rank order, pushes the result
//      into every rank's all-gather inbox [me][b], then blockBarrier on the AG flag row;
//   3. copies its part of every slice from its AG inbox to `recv`.
// Every block takes part in every barrier even when its parts are empty, so the chain below holds
// for all blocks. Inbox reuse: rank r pushes chunk k+1 into s's RS inbox only after it passed the
// AG barrier of chunk k, which s's block b entered only after reducing (reading) that inbox; r's
// AG inbox is overwritten for chunk k+1 only after s received r's chunk k+1 RS push, which r makes
// after copying its chunk k AG inbox out. `send` of a chunk is fully read (step 1, before the
// barrier) before `recv` of that chunk is written (step 3): in-place works. Waits carry a
// %globaltimer deadline; on expiry the block records the missing rank and stops (writes no more).
#include "algos/dda_common.cuh"

namespace cclx {
namespace {

struct TreeParams {
  dev::PeerPtrs peers;  // staging: tree region bases; signal: tree flag region bases
  const char* send;
  char* recv;
  size_t bytes;
  size_t capV;          // 16-byte vectors per inbox [src][block]
  uint64_t* counters;   // one per block
  uint32_t* err;
  uint64_t timeoutNs;
  int rank, size;
  RedOpKind op;
  double factor;
};

struct Range {
  size_t lo, hi;
};
__device__ __forceinline__ Range split(size_t lo, size_t n, int parts, int idx) {
  size_t base = n / parts, rem = n % parts;
  size_t s = lo + idx * base + min(size_t(idx), rem);
  return {s, s + base + (size_t(idx) < rem ? 1 : 0)};
}

template <class T, RedOpKind Op>
__device__ void treeBody(const TreeParams& p, uint64_t seq0, uint64_t* seqOut) {
  using A = typename math::AccOf<T>::type;
  const A factor = Op == RedOpKind::PREMUL_SUM ? A(p.factor) : A(1);
  const int b = blockIdx.x, G = gridDim.x, N = p.size;
  const uint64_t deadline = dev::globalTimerNs() + p.timeoutNs;
  const size_t totalV = (p.bytes + 15) / 16;
  const size_t chunkV = size_t(N) * G * p.capV;
  const size_t nChunks = (totalV + chunkV - 1) / chunkV;
  const size_t inbox = p.capV * 16;                 // bytes of one [src][block] inbox
  const size_t agOff = size_t(N) * G * inbox;       // AG inboxes follow the RS inboxes
  uint64_t* rowsRS[kMaxRanks];
  uint64_t* rowsAG[kMaxRanks];
  for (int r = 0; r < N; ++r) {
    uint64_t* f = reinterpret_cast<uint64_t*>(p.peers.signal[r]);
    rowsRS[r] = f + (0 * kMaxBlocks + b) * kMaxRanks;
    rowsAG[r] = f + (1 * kMaxBlocks + b) * kMaxRanks;
  }
  auto box = [&](int owner, size_t off, int src) -> char* {
    return p.peers.staging[owner] + off + (size_t(src) * G + b) * inbox;
  };

  size_t c = 0;
  for (; c < nChunks; ++c) {
    const uint64_t q = seq0 + c + 1;
    const size_t cv0 = c * chunkV;
    const size_t cV = min(chunkV, totalV - cv0);
    // 1. push my part of every slice s to rank s's RS inbox [rank][b].
    for (int s = 0; s < N; ++s) {
      Range sl = split(cv0, cV, N, s);
      Range part = split(sl.lo, sl.hi - sl.lo, G, b);
      uint4* dst = reinterpret_cast<uint4*>(box(s, 0, p.rank));
      for (size_t v = part.lo + threadIdx.x; v < part.hi; v += blockDim.x) {
        uint32_t w[4];
        dev::loadUnit<16>(p.send + v * 16, dev::validBytes<16>(p.bytes, v), w);
        dst[v - part.lo] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    if (!dev::blockBarrier(rowsRS, p.rank, N, q, deadline, p.err)) break;
    // 2. reduce my part of slice `rank`, push it to every rank's AG inbox [rank][b].
    {
      Range sl = split(cv0, cV, N, p.rank);
      Range part = split(sl.lo, sl.hi - sl.lo, G, b);
      for (size_t v = part.lo + threadIdx.x; v < part.hi; v += blockDim.x) {
        dev::UnitAcc<T, Op, 16> acc;
        for (int r = 0; r < N; ++r) {
          uint4 x = __ldcg(reinterpret_cast<const uint4*>(box(p.rank, 0, r)) + (v - part.lo));
          uint32_t w[4] = {x.x, x.y, x.z, x.w};
          acc.add(w, r == 0, factor);
        }
        uint32_t o[4];
        acc.result(N, o);
        uint4 out = make_uint4(o[0], o[1], o[2], o[3]);
        for (int r = 0; r < N; ++r)
          reinterpret_cast<uint4*>(box(r, agOff, p.rank))[v - part.lo] = out;
      }
    }
    if (!dev::blockBarrier(rowsAG, p.rank, N, q, deadline, p.err)) break;
    // 3. copy every slice's part from my AG inbox to recv.
    for (int s = 0; s < N; ++s) {
      Range sl = split(cv0, cV, N, s);
      Range part = split(sl.lo, sl.hi - sl.lo, G, b);
      const uint4* src = reinterpret_cast<const uint4*>(box(p.rank, agOff, s));
      for (size_t v = part.lo + threadIdx.x; v < part.hi; v += blockDim.x) {
        uint4 x = __ldcg(src + (v - part.lo));
        uint32_t w[4] = {x.x, x.y, x.z, x.w};
        dev::storeUnit<16>(p.recv + v * 16, dev::validBytes<16>(p.bytes, v), w);
      }
    }
  }
  *seqOut = seq0 + nChunks;
}

template <class T>
struct TreeRun {
  const TreeParams& p;
  uint64_t seq0;
  uint64_t* out;
  template <RedOpKind Op> __device__ void operator()() { treeBody<T, Op>(p, seq0, out); }
};

template <class T>
__global__ void __launch_bounds__(512) ddaTreeKernel(TreeParams p) {
  const uint64_t seq0 = p.counters[blockIdx.x];
  uint64_t next = seq0;
  dev::dispatchOp<T>(p.op, TreeRun<T>{p, seq0, &next});
  __syncthreads();  // every thread has read the counter
  if (threadIdx.x == 0) p.counters[blockIdx.x] = next;
}

}  // namespace

int ddaTreeBlocks(const DeviceCtx& ctx) {
  int g = ctx.cfg.ddaMaxBlocks > 0 ? ctx.cfg.ddaMaxBlocks : 32;
  g = std::min(g, kMaxBlocks);
  if (ctx.smCount > 0) g = std::min(g, ctx.smCount);
  return std::max(g, 1);
}

void ddaTreeLaunch(const DdaArgs& a, DeviceCtx& ctx, void* stream) {
  CCLX_REQUIRE(ctx.peerUsable() && a.count > 0, cclxInternalError, "DDA tree cannot run");
  const int G = ddaTreeBlocks(ctx);
  TreeParams p{};
  for (int r = 0; r < ctx.size; ++r) {
    p.peers.staging[r] = ctx.peer->region(r, StagingRegion::kTree);
    p.peers.signal[r] = ctx.peer->signalRegion(r, SignalRegion::kTree);
  }
  p.send = static_cast<const char*>(a.send);
  p.recv = static_cast<char*>(a.recv);
  p.bytes = a.count * dtypeSize(a.dtype);
  p.capV = ctx.peer->regionBytes(StagingRegion::kTree) / (2 * size_t(ctx.size) * G * 16);
  CCLX_REQUIRE(p.capV > 0, cclxInternalError, "DDA tree: staging too small");
  p.counters = ctx.counters + kCounterTree;
  p.err = ctx.errorFlagDev;
  p.timeoutNs = a.timeoutNs;
  p.rank = ctx.rank;
  p.size = ctx.size;
  p.op = a.op.kind;
  p.factor = a.op.factor;
  size_t totalV = (p.bytes + 15) / 16;
  size_t perBlock = std::min(totalV, size_t(ctx.size) * G * p.capV) / (size_t(ctx.size) * G) + 1;
  int threads = int(std::min<size_t>(512, std::max<size_t>(64, (perBlock + 31) / 32 * 32)));
  auto s = static_cast<cudaStream_t>(stream);
  dev::dispatchType(a.dtype, [&]<class T>() { ddaTreeKernel<T><<<G, threads, 0, s>>>(p); });
  CCLX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cclx
