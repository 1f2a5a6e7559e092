// The MoE dispatch kernel (docs/design/moe.md, "Dispatch"): one launch reads the router output,
// sends every (token, destination rank) pair once, straight into the destination's receive slots
// (rank-major, core/moe/layout.h), FP8-quantized in registers when the buffer says so (cclx's
// block codec through fp8/device.cuh: the host codec's bits), and builds this rank's per-expert
// entries from what it receives. The CPU twin (host/moe.cc) does the same steps in the same
// order of arithmetic.
//
// Contract of the kernel (every block of the grid, all threads; grid G fixed per buffer):
//   0. reads its call counter e (per block; every block of every rank counts the same calls);
//      a tiled send launch's blocks each take a ticket (tileSums[0] += 1) first, on every path;
//      dev::peerCall: an abort word raised at entry poisons this block's share of the outputs
//      (the receive rows and scales all-ones bytes, the counts 0), nothing is pushed, the
//      counter advances.
//   1. block 0 grants every rank the credit "this rank's slots for you are free for call e"
//      (credits[0][rank] in that rank's memory := e + 1): the previous dispatch has completed on
//      this rank (stream order), and the caller read its outputs before this call.
//   2. routing tables in shared memory from topk_ids (ids outside 0..E-1 dropped), a chunk of
//      p.chunk tokens at a time (core/moe/tables.h): per expert and per destination rank, a
//      bit mask of the chunk's tokens that chose it (first slot of each expert / rank only); a
//      token's position at rank d = base[d] (the tokens before the chunk) + the chunk's tokens
//      before it in d's mask. moe::sendPlan says how the blocks share the batch: whole (every
//      block builds it, block 0 counts it for the headers) or tiles (the block of ticket v
//      builds and counts tile v only, publishes its column sums in tileSums (flag e + 1,
//      release at GPU scope), waits for tiles 0..v-1's flags and adds their sums into its
//      bases; it waits only for blocks that started before it).
//   3. threads d < N wait (Waiter) for rank d's credit e + 1; a stopped wait fails the block.
//   4. the header block (block 0 of a whole batch, the last tile's block) writes its header
//      (token count, per-expert counts: the totals) into every rank, flag last.
//   5. warps take (token, piece) items, Px = lay.xParts pieces a token (a whole batch: item i
//      to warp i mod all warps of the grid; tiles: the tile's items round its block's warps,
//      chunk by chunk). A piece loads its values of the row once, quantizes them (FP8) and
//      stores them into every destination rank's slot [rank][position]. Piece 0 also keeps the
//      token's routing (tokRows for combine, the ids and weights for cached mode), then writes
//      the slot record (token index, the k ids, weights, per-expert positions) and, after
//      __syncwarp, the slot flag e + 1 (release, system scope; dev::warpPublish); piece q >= 1
//      publishes its own flag xflags[slot][q] := e + 1 the same way.
//   6. threads s < N wait for every source's header; every block computes the expert offsets
//      (expert-major, then source rank: the same order as the twin); block 0 writes recvCounts,
//      expertCounts, expertOffsets. Each warp takes received slots, waits for each flag
//      (dev::warpAwait) and its row's later pieces' flags (a lane each) and writes the slot's
//      entries (entryRows, slotEntries, slotW).
//   7. counters advance (e + 1) on every path. A stopped wait poisons the block's outputs whole.
// Split dispatch (p.phase, MoePhase): a send kernel runs steps 0 to 5 and advances the counters
// (e + 1); the receive kernel, launched later on every rank, runs step 6 of the same call (its
// flag: the counter as the send left it, which it stores back unchanged). The steps are those of
// the whole kernel; only the launch boundary between 5 and 6 is new. A receive's deadline counts
// from its own launch.
#include "core/moe/tables.h"
#include "gpu/moe/common.cuh"
#include "gpu/moe/send_row.cuh"

namespace cclx {
namespace moegpu {
namespace {

using Smem = moe::Tables;

/// Router entry i (token i / k, slot i % k) as given, or as kept by the last dispatch (cached).
__device__ __forceinline__ int64_t loadId(const Params& p, size_t i) {
  if (p.cached) return localAt<int32_t>(p, p.lay.tokIds)[i];
  return p.ids64 ? static_cast<const int64_t*>(p.ids)[i] : static_cast<const int32_t*>(p.ids)[i];
}

/// Token t's k normalized router ids (ids outside 0..E-1: -1), the k loads in flight together
/// (the source's branch taken once, outside them).
__device__ __forceinline__ void tokenIds(const Params& p, int t, int32_t (&ti)[moe::kMaxTopK]) {
  const int k = p.lay.k;
  const size_t i0 = size_t(t) * size_t(k);
  int64_t raw[moe::kMaxTopK];
  auto from = [&](const auto* a) {
#pragma unroll
    for (int j = 0; j < moe::kMaxTopK; ++j) raw[j] = j < k ? int64_t(a[i0 + j]) : -1;
  };
  if (p.cached) from(localAt<int32_t>(p, p.lay.tokIds));
  else if (p.ids64) from(static_cast<const int64_t*>(p.ids));
  else from(static_cast<const int32_t*>(p.ids));
#pragma unroll
  for (int j = 0; j < moe::kMaxTopK; ++j) ti[j] = j < k ? moe::normId(raw[j], p.lay.E) : -1;
}

/// Step 5 for piece q of token t (the whole warp): tl = t - the chunk's first token, mask the
/// chunk's tables, eb / db the counts of the chunks before (per expert, per destination rank).
/// Piece q holds the row's values [q * xPartVals, (q + 1) * xPartVals); piece 0 also keeps the
/// token's routing and writes the slot record under the record's flag, a later piece publishes
/// its own flag (xflags).
template <class T, bool kFp8>
__device__ void sendToken(const Params& p, const Smem& S, const uint32_t* mask, const int* eb,
                          const int* db, int t, int tl, int q, uint64_t flag) {
  const moe::Layout& l = p.lay;
  const int N = l.N, R = S.R, me = l.rank, k = l.k, lane = dev::laneId();
  int pd = -1;  // lane d < N: this token's position at rank d (-1: not sent there)
  if (lane < N && colBit(mask, R, l.E + lane, tl))
    pd = db[lane] + colBitsBelow(mask, R, l.E + lane, tl);
  int pos[kMaxRanks];
#pragma unroll
  for (int d = 0; d < kMaxRanks; ++d) pos[d] = d < N ? dev::shfl32(pd, d) : -1;
  // Piece 0: slot j of the token in lane j: its id and weight, loaded before the row's copy (in
  // flight during it); after the copy, whether it is the first slot of its expert and of its
  // destination rank (moe::firstOfExpert / firstOfRank, across lanes), and the routing this
  // rank keeps (combine's tokRows; cached mode's ids and weights): every token, sent anywhere
  // or not.
  int64_t raw = -1;
  float wt = 0.f;
  if (q == 0 && lane < k) {
    const size_t g = size_t(t) * k + size_t(lane);
    raw = loadId(p, g);
    wt = p.cached ? localAt<float>(p, l.tokW)[g] : p.w[g];
  }
  const bool sends = dev::ballot32(pd >= 0) != 0;
  if (sends) sendPiece<T, kFp8>(p, pos, t, q * l.xPartVals, min(l.H, (q + 1) * l.xPartVals));
  int32_t id = -1;
  bool firstExp = false;
  if (q == 0) {
    id = lane < k ? moe::normId(raw, l.E) : -1;
    firstExp = id >= 0;
    bool firstRank = id >= 0;
    for (int i = 0; i < k; ++i) {
      const int32_t o = dev::shfl32(id, i);
      if (i < lane && o >= 0 && o == id) firstExp = false;
      if (i < lane && o >= 0 && o / l.L == id / l.L) firstRank = false;
    }
    if (lane < k) {
      const size_t g = size_t(t) * k + size_t(lane);
      int32_t row = -2;
      if (id >= 0) {
        const int d = id / l.L;
        int pdd = -1;
#pragma unroll
        for (int x = 0; x < kMaxRanks; ++x)
          if (x == d) pdd = pos[x];
        row = firstRank ? d * l.B + pdd : -1;
      }
      localAt<int32_t>(p, l.tokRows)[g] = row;
      if (!p.cached) {
        localAt<int32_t>(p, l.tokIds)[g] = id;
        localAt<float>(p, l.tokW)[g] = wt;
      }
    }
  }
  if (!sends) return;
  if (q > 0) {  // a later piece: its own flag
    dev::warpPublish(pd >= 0 ? reinterpret_cast<uint64_t*>(
                                   p.peer[lane] + l.xflagAt(size_t(me) * l.B + size_t(pd), q))
                             : nullptr,
                     flag, pd >= 0);
    return;
  }
  // The slot record: token index, ids, weights, per-expert positions; the flag last.
  int32_t ep = -1;
  if (firstExp) ep = eb[id] + colBitsBelow(mask, R, id, tl);
#pragma unroll
  for (int d = 0; d < kMaxRanks; ++d) {
    if (pos[d] < 0) continue;
    char* rec = p.peer[d] + l.metaAt(size_t(me) * l.B + size_t(pos[d]));
    if (lane == 0) *reinterpret_cast<uint2*>(rec + 8) = make_uint2(uint32_t(t), 0u);
    if (lane < k) {
      *reinterpret_cast<int32_t*>(rec + l.recId(lane)) = id;
      *reinterpret_cast<float*>(rec + l.recW(lane)) = wt;
      *reinterpret_cast<int32_t*>(rec + l.recPos(lane)) = ep;
    }
  }
  uint64_t* myFlag = pd >= 0 ? reinterpret_cast<uint64_t*>(
                                   p.peer[lane] + l.metaAt(size_t(me) * l.B + size_t(pd)))
                             : nullptr;
  dev::warpPublish(myFlag, flag, pd >= 0);
}

/// Step 6's entries of one received slot (the whole warp); false when its wait stopped.
__device__ bool takeSlot(const Params& p, const int* base, int s, int pIdx, uint64_t flag,
                         dev::Waiter& wait) {
  const moe::Layout& l = p.lay;
  const int k = l.k, L = l.L, me = l.rank, N = l.N, lane = dev::laneId();
  const size_t slot = size_t(s) * l.B + size_t(pIdx);
  const char* rec = mine(p) + l.metaAt(slot);
  // the record's flag (piece 0) and the row's later pieces' (xflags), 32 at once (lane q % 32)
  for (int q0 = 0; q0 < l.xParts; q0 += 32) {
    const int q = q0 + lane;
    const char* f = q == 0 ? rec : q < l.xParts ? mine(p) + l.xflagAt(slot, q) : nullptr;
    if (!dev::warpAwaitEach(reinterpret_cast<const uint64_t*>(f), flag, wait, s)) return false;
  }
  int32_t id = -1, ep = -1;
  float w = 0.f;
  if (lane < k) {
    id = int32_t(dev::ldRecord4(rec + l.recId(lane)));
    w = __uint_as_float(dev::ldRecord4(rec + l.recW(lane)));
    ep = int32_t(dev::ldRecord4(rec + l.recPos(lane)));
  }
  bool first = id >= 0;
  float sum = w;
  for (int i = 0; i < k; ++i) {  // the rules of core/moe/layout.h, across lanes
    const int32_t o = dev::shfl32(id, i);
    const float ow = dev::shfl32(w, i);
    if (i < lane && o == id) first = false;
    if (i > lane && o == id) sum = __fadd_rn(sum, ow);
  }
  const bool local = first && id / L == me;
  const uint32_t ball = dev::ballot32(local);
  const int c = __popc(ball & ((1u << lane) - 1u)), n = __popc(ball);
  int32_t* se = localAt<int32_t>(p, l.slotEntries) + slot * size_t(l.kk);
  float* sw = localAt<float>(p, l.slotW) + slot * size_t(l.kk);
  if (local) {
    const int entry = base[size_t(id - me * L) * N + s] + ep;
    localAt<int32_t>(p, l.entryRows)[entry] = int32_t(slot);
    se[c] = entry;
    sw[c] = sum;
  }
  for (int x = n + lane; x < l.kk; x += 32) {
    se[x] = -1;
    sw[x] = 0.f;
  }
  return true;
}

/// Step 2 for the chunk of tokens c0 .. c0 + nc (every thread): its per-expert and
/// per-destination token masks (first slot of each expert / rank only). A warp takes 32 tokens
/// (one mask word of every column), a token per lane: its ids from global memory (tokenIds), the
/// expert bits by shared-memory atomics (the lanes' experts' words in different banks but where
/// two experts are 32 columns apart), the destination words by ballot.
__device__ void buildChunk(const Params& p, const Smem& S, uint32_t* sm, int c0, int nc) {
  const moe::Layout& l = p.lay;
  const int N = l.N, k = l.k, L = l.L, E = l.E, R = S.R, tid = int(threadIdx.x), lane = tid & 31;
  uint32_t* mask = sm + S.mask;
  for (size_t i = size_t(tid); i < size_t((nc + 31) >> 5) * R; i += kThreads) mask[i] = 0;
  __syncthreads();
  for (int w0 = tid - lane; w0 < nc; w0 += kThreads) {  // warp-uniform rounds
    const int t = w0 + lane;
    int32_t ti[moe::kMaxTopK];
    if (t < nc) tokenIds(p, c0 + t, ti);
    else
#pragma unroll
      for (int j = 0; j < moe::kMaxTopK; ++j) ti[j] = -1;
    uint32_t* word = mask + size_t(w0 >> 5) * R;
    uint32_t ranks = 0;  // bit d: the token goes to rank d
#pragma unroll
    for (int j = 0; j < moe::kMaxTopK; ++j) {
      if (j < k) {
        if (moe::firstOfExpert(ti, j)) atomicOr(&word[ti[j]], 1u << lane);
        if (ti[j] >= 0) ranks |= 1u << (ti[j] / L);
      }
    }
    for (int d = 0; d < N; ++d) {
      const uint32_t b = dev::ballot32((ranks >> d) & 1u);
      if (lane == 0) word[E + d] = b;
    }
  }
  __syncthreads();
}

/// The chunk's nc tokens (built by buildChunk) added to the bases (every thread; syncs before and
/// after): a column a thread.
__device__ void countChunk(const Smem& S, uint32_t* sm, int nc) {
  __syncthreads();
  const uint32_t* mask = sm + S.mask;
  int* base = reinterpret_cast<int*>(sm + S.expBase);  // [E + N]: eb, then db
  const int W = (nc + 31) >> 5;
  for (int r = int(threadIdx.x); r < S.R; r += kThreads) base[r] += colBitsAll(mask, S.R, r, W);
  __syncthreads();
}

/// Tile v's column sums (this block's bases after counting its tile) into its tileSums record,
/// then the record's flag e + 1 (every thread; bar.sync + release at GPU scope, since only this
/// kernel's blocks read it: every thread's stores first).
__device__ void publishTile(const Params& p, const Smem& S, const int* base, int v,
                            uint64_t flag) {
  char* rec = mine(p) + p.lay.tileAt(v);
  int32_t* sums = reinterpret_cast<int32_t*>(rec + 16);
  for (int r = int(threadIdx.x); r < S.R; r += kThreads) sums[r] = base[r];
  dev::fenceBeforeSignal();
  __syncthreads();
  if (threadIdx.x == 0) dev::stReleaseGpu(reinterpret_cast<uint64_t*>(rec), flag);
}

/// Tiles 0 .. v-1's column sums added into `base` (every thread; syncs after); true in a thread
/// that stopped waiting for one. Threads u < v wait for tile u's flag; then each thread adds a
/// group of tiles' sums for 4 columns (16-byte loads that bypass L1, 16 in flight) and the
/// groups meet in shared memory.
__device__ bool gatherTiles(const Params& p, const Smem& S, int* base, int v, uint64_t flag,
                            dev::Waiter& wait) {
  const moe::Layout& l = p.lay;
  const int tid = int(threadIdx.x);
  int failed = 0;
  for (int u = tid; u < v && !failed; u += kThreads)
    failed = !dev::waitGpuFlagGE(reinterpret_cast<const uint64_t*>(mine(p) + l.tileAt(u)), flag,
                                 wait, l.rank);
  if (dev::syncThreadsOr(failed)) return true;
  dev::fenceAfterWait();
  const int Q = (S.R + 3) / 4, groups = Q >= kThreads ? 1 : kThreads / Q;
  constexpr int kInFlight = 16;
  for (int item = tid; item < groups * Q; item += kThreads) {
    const int q = item % Q, g = item / Q;
    uint4 sum = make_uint4(0, 0, 0, 0);
    for (int u0 = g; u0 < v; u0 += kInFlight * groups) {
      uint4 x[kInFlight];
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const int u = u0 + j * groups;
        x[j] = u < v ? dev::ldCg(reinterpret_cast<const uint4*>(mine(p) + l.tileAt(u) + 16) + q)
                     : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        sum.x += x[j].x, sum.y += x[j].y;
        sum.z += x[j].z, sum.w += x[j].w;
      }
    }
    const uint32_t c[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (4 * q + i < S.R && c[i] != 0) atomicAdd(&base[4 * q + i], int(c[i]));
  }
  __syncthreads();
  return false;
}

/// Steps 1 to 5 (every thread); true in a thread that stopped waiting. `tile`: the tile this
/// block took (tiled launches, moe::sendPlan). A whole batch: every block builds its tables
/// once, block 0 counts them for the header totals, and the tokens are dealt round every warp of
/// the grid. Tiles: the block builds and counts its tile (chunk by chunk when longer than one),
/// publishes the tile's sums and adds the earlier tiles' into its bases; the block of the last
/// tile writes the headers (its bases plus its tile's sums: the totals); its warps send the
/// tile's tokens, chunk by chunk (a tile of one chunk keeps the tables it counted). Each
/// token's warp also keeps the token's routing (tokRows, cached ids and weights).
template <class T, bool kFp8>
__device__ bool sendBody(const Params& p, uint32_t* sm, int tile, uint64_t flag,
                         dev::Waiter& wait) {
  const moe::Layout& l = p.lay;
  const Smem S = moe::tablesOf(l, p.chunk);
  const moe::SendPlan plan = moe::sendPlan(p.tokens, S.chunk, int(gridDim.x));
  const int N = l.N, me = l.rank, L = l.L, R = S.R, P = l.xParts;
  const int tid = int(threadIdx.x), warp = tid >> 5;
  const uint32_t* mask = sm + S.mask;
  int* eb = reinterpret_cast<int*>(sm + S.expBase);  // [E + N]: eb, then db
  int* db = reinterpret_cast<int*>(sm + S.destBase);
  // this block's tokens t0 .. t1 (tiles), in chunks of S.chunk
  const int t0 = plan.whole ? 0 : min(p.tokens, tile * plan.tile);
  const int t1 = plan.whole ? p.tokens : min(p.tokens, t0 + plan.tile);
  const int chunks = (t1 - t0 + S.chunk - 1) / S.chunk;
  auto chunkLen = [&](int c) { return min(S.chunk, t1 - t0 - c * S.chunk); };
  // 1. credits
  if (blockIdx.x == 0 && tid < N)
    dev::stReleaseSys(reinterpret_cast<uint64_t*>(p.peer[tid] + l.creditAt(0, me)), flag);
  for (int i = tid; i < R; i += kThreads) eb[i] = 0;
  // 2. tables; `header`: this block writes the headers, from its bases plus `own` (its tile's
  // sums; null: the bases are the totals)
  bool header = false;
  const int32_t* own = nullptr;
  if (plan.whole) {
    buildChunk(p, S, sm, 0, p.tokens);
    header = blockIdx.x == 0;
    if (header) countChunk(S, sm, p.tokens);
  } else if (tile < plan.tiles) {
    for (int c = 0; c < chunks; ++c) {
      buildChunk(p, S, sm, t0 + c * S.chunk, chunkLen(c));
      countChunk(S, sm, chunkLen(c));
    }
    publishTile(p, S, eb, tile, flag);
    for (int i = tid; i < R; i += kThreads) eb[i] = 0;
    if (gatherTiles(p, S, eb, tile, flag, wait)) return true;
    header = tile == plan.tiles - 1;
    own = reinterpret_cast<const int32_t*>(mine(p) + l.tileAt(tile) + 16);
  }
  // 3. every rank's credit
  int failed = 0;
  if (tid < N)
    failed = !dev::waitFlagGE(reinterpret_cast<const uint64_t*>(mine(p) + l.creditAt(0, tid)),
                              flag, wait, tid);
  if (dev::syncThreadsOr(failed)) return true;
  dev::fenceAfterWait();
  // 4. headers: the totals
  if (header) {
    for (int i = tid; i < N * (L + 1); i += kThreads) {
      const int d = i / (L + 1), x = i % (L + 1), r = x == L ? l.E + d : d * L + x;
      const int v = eb[r] + (own ? own[r] : 0);
      char* h = p.peer[d] + l.headAt(me);
      if (x == L) *reinterpret_cast<uint2*>(h + 8) = make_uint2(uint32_t(v), 0u);
      else *reinterpret_cast<int32_t*>(h + 16 + 4 * size_t(x)) = v;
    }
    dev::fenceBeforeSignal();
    __syncthreads();
    if (tid < N) dev::stReleaseSys(reinterpret_cast<uint64_t*>(p.peer[tid] + l.headAt(me)), flag);
    __syncthreads();
    if (plan.whole) {  // the bases again: no token before the batch
      for (int i = tid; i < R; i += kThreads) eb[i] = 0;
      __syncthreads();
    }
  }
  // 5. tokens
  if (plan.whole) {  // token t: warp t % (all warps of the grid)
    const int nw = int(gridDim.x) * kWarps;
    for (int i = int(blockIdx.x) * kWarps + warp; i < p.tokens * P; i += nw)
      sendToken<T, kFp8>(p, S, mask, eb, db, i / P, i / P, i % P, flag);
    return false;
  }
  for (int c = 0; c < chunks; ++c) {  // the tile's token t: warp (t - t0) % kWarps
    const int c0 = t0 + c * S.chunk, nc = chunkLen(c);
    if (chunks > 1) buildChunk(p, S, sm, c0, nc);
    for (int i = warp; i < nc * P; i += kWarps)
      sendToken<T, kFp8>(p, S, mask, eb, db, c0 + i / P, i / P, i % P, flag);
    if (c + 1 < chunks) countChunk(S, sm, nc);
  }
  return false;
}

/// Step 6 (every thread); true in a thread that stopped waiting.
__device__ bool recvBody(const Params& p, uint32_t* sm, uint64_t flag, dev::Waiter& wait) {
  const moe::Layout& l = p.lay;
  const Smem S = moe::tablesOf(l, p.chunk);
  const int N = l.N, L = l.L;
  const int tid = int(threadIdx.x);
  const int gw = int(blockIdx.x) * kWarps + (tid >> 5), nw = int(gridDim.x) * kWarps;
  int failed = 0;
  // 6. receive: headers, offsets, then the slots
  int* base = reinterpret_cast<int*>(sm + S.base);
  int* cnt = reinterpret_cast<int*>(sm + S.cnt);
  int* ecTot = reinterpret_cast<int*>(sm + S.ecTot);
  if (tid < N)
    failed = !dev::waitFlagGE(reinterpret_cast<const uint64_t*>(mine(p) + l.headAt(tid)), flag,
                              wait, tid);
  if (dev::syncThreadsOr(failed)) return true;
  dev::fenceAfterWait();
  if (tid < N) cnt[tid] = int(dev::ldRecord4(mine(p) + l.headAt(tid) + 8));
  for (int i = tid; i < L * N; i += kThreads)
    base[i] = int(dev::ldRecord4(mine(p) + l.headAt(i % N) + 16 + 4 * size_t(i / N)));
  __syncthreads();
  for (int x = tid; x < L; x += kThreads) {
    int tot = 0;
    for (int s = 0; s < N; ++s) {
      const int v = base[x * N + s];
      base[x * N + s] = tot;
      tot += v;
    }
    ecTot[x] = tot;
    if (blockIdx.x == 0) localAt<int32_t>(p, l.expertCounts)[x] = tot;
  }
  __syncthreads();
  const int entries = blockScan(ecTot, L);
  for (int i = tid; i < L * N; i += kThreads) base[i] += ecTot[i / N];
  if (blockIdx.x == 0) {
    for (int x = tid; x < L; x += kThreads) localAt<int32_t>(p, l.expertOffsets)[x] = ecTot[x];
    if (tid == 0) localAt<int32_t>(p, l.expertOffsets)[L] = entries;
    if (tid < N) localAt<int32_t>(p, l.recvCounts)[tid] = cnt[tid];
  }
  __syncthreads();
  const int total = blockScan(cnt, N);
  for (int g = gw; g < total; g += nw) {
    int s = N - 1;
    while (s > 0 && cnt[s] > g) --s;
    if (!takeSlot(p, base, s, g - cnt[s], flag, wait)) {
      failed = 1;
      break;
    }
  }
  return failed != 0;
}

/// Steps 1 to 6 of the phases p.phase asks for (every thread); true in a thread that stopped.
template <class T, bool kFp8>
__device__ bool dispatchBody(const Params& p, uint32_t* sm, int tile, uint64_t flag) {
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  if ((p.phase & kMoeSend) && sendBody<T, kFp8>(p, sm, tile, flag, wait)) return true;
  return (p.phase & kMoeRecv) && recvBody(p, sm, flag, wait);
}

/// The dispatch. Contract: the file's comment (steps 0 to 7, and the split).
template <class T, bool kFp8>
__global__ void __launch_bounds__(kThreads) dispatchKernel(Params p) {
  extern __shared__ uint32_t sm[];
  const moe::Layout& l = p.lay;
  // A receive-only launch continues the call its send counted.
  const uint64_t flag = p.counters[blockIdx.x] + ((p.phase & kMoeSend) ? 1 : 0);
  // A tiled send launch: every block takes a ticket first, whatever happens next, so each
  // launch adds exactly gridDim.x and the ticket modulo the grid is the block's tile (the order
  // the blocks started in). Read after peerCall's entry barrier.
  __shared__ int tile;
  if (threadIdx.x == 0) {
    const bool tiled =
        (p.phase & kMoeSend) && !moe::sendPlan(p.tokens, p.chunk, int(gridDim.x)).whole;
    tile = tiled ? int(atomicAdd(reinterpret_cast<unsigned long long*>(mine(p) + l.tileSums),
                                 1ull) %
                       gridDim.x)
                 : 0;
  }
  auto poison = [&](bool all) {
    char* b = mine(p);
    auto fill = [&](char* q, size_t n) { all ? dev::poisonAll(q, n) : dev::poisonShare(q, n); };
    fill(b + l.xrows, l.slots() * l.xRow);
    if (l.fp8) fill(b + l.scales, l.slots() * size_t(l.nb) * 4);
    if (all || blockIdx.x == 0) {
      for (int i = int(threadIdx.x); i < l.N; i += kThreads) localAt<int32_t>(p, l.recvCounts)[i] = 0;
      for (int i = int(threadIdx.x); i <= l.L; i += kThreads) {
        if (i < l.L) localAt<int32_t>(p, l.expertCounts)[i] = 0;
        localAt<int32_t>(p, l.expertOffsets)[i] = 0;
      }
    }
  };
  dev::peerCall(p.fail, p.counters + blockIdx.x, flag, poison,
                [&] { return dispatchBody<T, kFp8>(p, sm, tile, flag); });
}

/// f(kernel instance) for the layout's dtype and FP8 flag.
template <class F>
void withKernel(const moe::Layout& l, F&& f) {
  dev::dispatchDtype(dev::RowTypes{}, DataType(l.dtype), "moe dispatch", [&]<class T>() {
    if (l.fp8) f(&dispatchKernel<T, true>);
    else f(&dispatchKernel<T, false>);
    return 0;
  });
}

}  // namespace

void prepareDispatch(const moe::Layout& lay, size_t smem) {
  if (smem <= (48u << 10)) return;
#if defined(CCLX_HAVE_HIP)
  CCLX_THROW(cclxUnsupported, "moe dispatch: %zu bytes of shared memory (HIP: 48 KiB at most)",
             smem);
#else
  withKernel(lay, [&](auto kernel) {
    CCLX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(smem)));
  });
#endif
}

void launchDispatch(const Params& p, int grid, size_t smem, void* stream) {
  withKernel(p.lay, [&](auto kernel) {
    const gpurt::LaunchCheck launched;
    kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(p);
    launched.check("moe dispatch");
  });
}

}  // namespace moegpu
}  // namespace cclx
