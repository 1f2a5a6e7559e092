// The MoE combine kernel (docs/design/moe.md, "Combine"): one launch sends, for every slot this
// rank received in the last dispatch, the weighted f32 sum of its local experts' output rows
// (rounded once to the dtype) straight into the token owner's combine ring, and sums, for every
// token of this rank, the rows its expert ranks sent back (f32, top-k order, rounded once),
// writing [T, H] in token order. The CPU twin (host/moe.cc) does the same arithmetic in the
// same order, so both give the same bits.
//
// Rounds (core/moe/layout.h): round r is the owners' tokens [r*W, (r+1)*W), W = lay.ringW; the
// ring holds D = lay.ringD rounds (one round of the whole batch when it fits, D = 1). Token t's
// row from expert rank d lands in the owner's ring row ySlot(d, t); its flags carry
// roundFlag(c + 1, round of t).
//
// Contract of the kernel (every block, all threads; grid G fixed per buffer):
//   0. reads its call counter c (per block); dev::peerCall: an abort word raised at entry
//      poisons this block's share of the output [T, H] (all-ones bytes), pushes nothing and
//      advances the counter.
//   1. block 0 grants every rank the credit "this rank's combine ring is free for call c"
//      (credits[1][rank] in that rank's memory := c + 1): its previous combine has completed.
//   2. the block finds, for every source s and round r, the first received slot of s in round
//      r (its slots are in s's token order: a binary search over the slot records' token index;
//      one round: 0 and the count).
//   3. steps ph = 0 .. R (R rounds: this rank's tokens' and the received ones'): send round ph,
//      then consume round ph - 1, each a list of work items over the grid's warps:
//      a. send (round ph): when ph >= D, threads d < N first wait for owner d's credit of round
//         ph - D (its ring rows are free again). Items (received slot, piece) of the round: sum_x
//         w_x * expert_out[entry_x] per element in f32 (products and sums rounded once, entries
//         in top-k order; an entry at or past the rows given makes the row all-ones bytes),
//         rounded once to the dtype, stored into the owner's ring row, then the piece's flag
//         (dev::warpPublish). Before its first store into owner s's ring a warp waits (once per
//         owner) for s's call credit c + 1, with the item's first loads already in flight.
//      b. consume (round ph - 1; the warp's first item's tokRows loaded before the round's
//         sends): items (token t, piece): wait for the piece's flag of each of
//         the token's rows (tokRows: the first slot of each destination rank, in top-k order),
//         add them in f32 in that order, round once into out[t]; a token with an id out of
//         range gets an all-ones row; a stopped wait fails the block.
//      c. with D > 1: the block arrives at round ph - 1 (ringArrive[round]: a fetch-add); the
//         grid's last arrival resets the count to 0 and grants every expert rank the round's
//         credit (ringCredits[rank][round % D] in its memory := roundFlag(c + 1, round)).
//      No cycle (every block of every rank resident): a block sends round ph once it has
//      consumed round ph - 2 and needs the credit of round ph - D <= ph - 2; the block furthest
//      behind is either sending (every block has consumed what its credits need) or consuming
//      a round every block has sent, so it never waits forever.
//   4. counters advance (c + 1) on every path; a block that stopped poisons the output whole.
#include "gpu/moe/common.cuh"

namespace cclx {
namespace moegpu {
namespace {

/// The owner's token index of received slot pIdx of source s (its slot record), -1 when out of
/// range (a record no dispatch wrote whole: nothing is sent for it).
__device__ __forceinline__ int tokenOf(const Params& p, int s, int pIdx) {
  const moe::Layout& l = p.lay;
  const int t = int(dev::ldRecord4(mine(p) + l.metaAt(size_t(s) * l.B + size_t(pIdx)) + 8));
  return t >= 0 && t < l.B ? t : -1;
}

/// Step 2: the first of source s's n received slots whose token is at or past `t0`.
__device__ int firstSlotFrom(const Params& p, int s, int n, int t0) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (tokenOf(p, s, mid) < t0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// The owner's call credit (step 3a) for a send item of source s (the whole warp): awaited once
/// per warp and source (`seen`, bit s), while the item's first loads are in flight, before any
/// store into s's ring; false when the wait stopped.
__device__ __forceinline__ bool ownerCredit(const Params& p, int s, uint64_t flag,
                                            dev::Waiter& wait, uint32_t& seen) {
  if ((seen >> s) & 1u) return true;
  seen |= 1u << s;
  return dev::warpAwait(reinterpret_cast<const uint64_t*>(mine(p) + p.lay.creditAt(1, s)), flag,
                        wait, s);
}

/// Step 3a for piece q of received slot pIdx of source s (the whole warp); kX: entries' loads
/// in flight per lane (kSendBatch). The slot's token index (nothing is sent for a record out of
/// range), entries and weights are loaded together; false when the owner's credit wait stopped.
template <class T, int kX>
__device__ bool sendBack(const Params& p, int s, int pIdx, int q, uint64_t flag, dev::Waiter& wait,
                         uint32_t& seen) {
  const moe::Layout& l = p.lay;
  const int lane = dev::laneId(), kk = l.kk;
  const size_t slot = size_t(s) * l.B + size_t(pIdx);
  // The slot's entries and weights, entry x in lane x: the leading entries >= 0.
  const int32_t e = lane < kk ? localAt<int32_t>(p, l.slotEntries)[slot * size_t(kk) + lane] : -1;
  const float ew = lane < kk ? localAt<float>(p, l.slotW)[slot * size_t(kk) + lane] : 0.f;
  const int t = tokenOf(p, s, pIdx);
  if (!ownerCredit(p, s, flag, wait, seen)) return false;  // polled with those loads in flight
  if (t < 0) return true;
  const uint32_t stop = dev::ballot32(lane < kk && e < 0);
  const int n = stop ? __ffs(int(stop)) - 1 : kk;
  const bool bad = dev::ballot32(lane < n && size_t(e) >= p.eoutRows) != 0;
  const size_t bytes = size_t(l.H) * sizeof(T), lo = size_t(q) * l.yPartUnits;
  const size_t units = min((bytes + 15) / 16, lo + l.yPartUnits);  // the piece: [lo, units)
  const size_t y = l.ySlot(l.rank, t);
  char* dst = p.peer[s] + l.yrowAt(y);
  if (bad) {
    for (size_t u = lo + size_t(lane); u < units; u += 32)
      *reinterpret_cast<uint4*>(dst + 16 * u) = make_uint4(~0u, ~0u, ~0u, ~0u);
  } else if (rowsAligned(p.eout, bytes)) {
    // whole aligned units: kX entries' loads of a unit in flight per round (a slot has k
    // entries or fewer, often 8)
    constexpr int kU = 1;
    for (size_t b = lo; b < units; b += 32 * kU) {  // warp-uniform rounds (shuffles inside)
      const size_t u0 = b + size_t(lane);
      float acc[kU][kPerUnit<T>];
      zeroUnits<T>(acc);
      for (int x0 = 0; x0 < n; x0 += kX) {
        uint4 v[kX][kU];
#pragma unroll
        for (int j = 0; j < kX; ++j) {
          const int32_t ej = dev::shfl32(e, (x0 + j) & 31);
          const uint4* row = reinterpret_cast<const uint4*>(p.eout + size_t(ej) * bytes);
#pragma unroll
          for (int i = 0; i < kU; ++i)
            if (x0 + j < n && u0 + 32 * i < units) v[j][i] = row[u0 + 32 * i];
        }
#pragma unroll
        for (int j = 0; j < kX; ++j) {
          const float wt = dev::shfl32(ew, (x0 + j) & 31);
          if (x0 + j >= n) break;
#pragma unroll
          for (int i = 0; i < kU; ++i) {
            float f[kPerUnit<T>];
            unpackUnit<T>(v[j][i], f);
#pragma unroll
            for (int c = 0; c < kPerUnit<T>; ++c) {
              const float prod = __fmul_rn(wt, f[c]);
              acc[i][c] = x0 + j == 0 ? prod : __fadd_rn(acc[i][c], prod);
            }
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kU; ++i)
        if (u0 + 32 * i < units)
          *reinterpret_cast<uint4*>(dst + 16 * (u0 + 32 * i)) = packUnit<T>(acc[i]);
    }
  } else {
    for (size_t b = lo; b < units; b += 32) {  // warp-uniform rounds (shuffles inside)
      const size_t u = b + size_t(lane);
      const bool on = u < units;
      float acc[kPerUnit<T>];
#pragma unroll
      for (int i = 0; i < kPerUnit<T>; ++i) acc[i] = 0.f;
      for (int x = 0; x < n; ++x) {
        const char* row = p.eout + size_t(dev::shfl32(e, x)) * bytes;
        float v[kPerUnit<T>];
        unpackUnit<T>(on ? loadUserUnit(row, u, unitValid(bytes, u)) : make_uint4(0, 0, 0, 0), v);
        const float wt = dev::shfl32(ew, x);
#pragma unroll
        for (int i = 0; i < kPerUnit<T>; ++i) {
          const float prod = __fmul_rn(wt, v[i]);
          acc[i] = x == 0 ? prod : __fadd_rn(acc[i], prod);
        }
      }
      if (on) *reinterpret_cast<uint4*>(dst + 16 * u) = packUnit<T>(acc);
    }
  }
  dev::warpPublish(reinterpret_cast<uint64_t*>(p.peer[s] + l.yflagAt(y, q)),
                   moe::roundFlag(flag, l.roundOf(t)), lane == 0);
  return true;
}

/// Token t's row of tokRows, slot j in lane j (-1 past k).
__device__ __forceinline__ int32_t tokRowOf(const Params& p, int t) {
  const int lane = dev::laneId(), k = p.lay.k;
  return lane < k ? localAt<int32_t>(p, p.lay.tokRows)[size_t(t) * k + lane] : -1;
}

/// Step 3b for piece q of token t (the whole warp), r = tokRowOf(p, t); false when a wait
/// stopped.
template <class T>
__device__ bool gatherToken(const Params& p, int t, int q, int32_t r, uint64_t flag,
                            dev::Waiter& wait) {
  const moe::Layout& l = p.lay;
  const int lane = dev::laneId(), k = l.k;
  const bool nan = dev::ballot32(r == -2) != 0;
  const uint64_t want = moe::roundFlag(flag, l.roundOf(t));
  if (!nan)
    for (int j = 0; j < k; ++j) {
      const int32_t rj = dev::shfl32(r, j);
      if (rj < 0) continue;
      const uint64_t* f =
          reinterpret_cast<const uint64_t*>(mine(p) + l.yflagAt(l.ySlot(rj / l.B, t), q));
      if (!dev::warpAwait(f, want, wait, rj / l.B)) return false;
    }
  // The rows (this rank's combine rows: aligned, padded to whole units) in top-k order: kU
  // units of kX slots' rows in flight per round (a token has one row per rank it went to, from
  // 1 to 8, so the units carry the batch when they are few).
  constexpr int kU = 4, kX = 2;
  const size_t bytes = size_t(l.H) * sizeof(T), lo = size_t(q) * l.yPartUnits;
  const size_t units = min((bytes + 15) / 16, lo + l.yPartUnits);  // the piece: [lo, units)
  char* dst = p.out + size_t(t) * bytes;
  for (size_t b = lo; b < units; b += 32 * kU) {  // warp-uniform rounds (shuffles inside)
    const size_t u0 = b + size_t(lane);
    float acc[kU][kPerUnit<T>];
    zeroUnits<T>(acc);
    bool first = true;
    for (int j0 = 0; j0 < k && !nan; j0 += kX) {
      uint4 v[kX][kU];
#pragma unroll
      for (int j = 0; j < kX; ++j) {
        const int32_t rj = j0 + j < k ? dev::shfl32(r, (j0 + j) & 31) : -1;
        const uint4* row = reinterpret_cast<const uint4*>(
            mine(p) + l.yrowAt(l.ySlot(rj < 0 ? 0 : rj / l.B, t)));
#pragma unroll
        for (int i = 0; i < kU; ++i)
          if (rj >= 0 && u0 + 32 * i < units) v[j][i] = dev::ldCg(row + u0 + 32 * i);
      }
#pragma unroll
      for (int j = 0; j < kX; ++j) {
        const int32_t rj = j0 + j < k ? dev::shfl32(r, (j0 + j) & 31) : -1;
        if (rj < 0) continue;
#pragma unroll
        for (int i = 0; i < kU; ++i) {
          float f[kPerUnit<T>];
          unpackUnit<T>(v[j][i], f);
#pragma unroll
          for (int c = 0; c < kPerUnit<T>; ++c)
            acc[i][c] = first ? f[c] : __fadd_rn(acc[i][c], f[c]);
        }
        first = false;
      }
    }
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      const size_t u = u0 + 32 * i;
      if (u >= units) break;
      const uint4 out = nan ? make_uint4(~0u, ~0u, ~0u, ~0u) : packUnit<T>(acc[i]);
      storeUserUnit(dst, u, unitValid(bytes, u), out);
    }
  }
  return true;
}

/// Step 3c (thread 0, after the block's barrier): this block has consumed round r. The count
/// is 0 at a call's start: the last arrival resets it, and a call that stopped part way left
/// the abort word raised, which stops every later call at entry.
__device__ void arriveRound(const Params& p, int r, uint64_t flag) {
  const moe::Layout& l = p.lay;
  uint64_t* w = localAt<uint64_t>(p, l.ringArrive) + r;
  __threadfence();  // the block's reads of the round's ring rows before the arrival
  if (dev::atomAddAcqRelGpu(w, 1) + 1 != gridDim.x) return;
  *w = 0;  // every block has arrived: nothing else touches the word in this call
  dev::fenceSystem();
  const uint64_t v = moe::roundFlag(flag, r);
  for (int d = 0; d < l.N; ++d)
    dev::stReleaseSys(reinterpret_cast<uint64_t*>(p.peer[d] + l.ringCreditAt(l.rank, r)), v);
}

/// Step 3a's loads in flight per lane: kCopyBatch in one round; half in the ring's loop, whose
/// state across rounds left no room for kCopyBatch (ptxas spilled its sums inside the loads' loop).
template <bool Ring>
constexpr int kSendBatch = Ring ? kCopyBatch / 2 : kCopyBatch;

/// Step 3a's items of round r: (received slot, piece), from first[s][r] to first[s][r + 1] of
/// each source s, over the grid's warps; false when a wait stopped.
template <class T, int kX>
__device__ __forceinline__ bool sendRound(const Params& p, const int (*first)[moe::kMaxRounds + 1],
                                          int r, uint64_t flag, dev::Waiter& wait, uint32_t& seen,
                                          int gw, int nw) {
  const int N = p.lay.N, P = p.lay.yParts;
  int sent = 0;
  for (int s = 0; s < N; ++s) sent += first[s][r + 1] - first[s][r];
  for (int g = gw; g < sent * P; g += nw) {
    int x = g / P, s = 0;
    while (x >= first[s][r + 1] - first[s][r]) x -= first[s][r + 1] - first[s][r], ++s;
    if (!sendBack<T, kX>(p, s, first[s][r] + x, g % P, flag, wait, seen)) return false;
  }
  return true;
}

/// Step 3b's items of round r: (token, piece) over the grid's warps; false when a wait stopped.
/// `r0`: tokRowOf the warp's first item, loaded before the round's sends.
template <class T>
__device__ __forceinline__ bool gatherRound(const Params& p, int r, uint64_t flag,
                                            dev::Waiter& wait, int gw, int nw, int32_t r0) {
  const int P = p.lay.yParts, t0 = r * p.lay.ringW;
  const int n = min(p.tokens - t0, p.lay.ringW) * P;
  for (int g = gw; g < n; g += nw) {
    const int t = t0 + g / P;
    if (!gatherToken<T>(p, t, g % P, g == gw ? r0 : tokRowOf(p, t), flag, wait)) return false;
  }
  return true;
}

/// tokRowOf the warp's first item of round r (-1 lanes when it has none).
__device__ __forceinline__ int32_t firstTokRow(const Params& p, int r, int gw) {
  const int P = p.lay.yParts, t0 = r * p.lay.ringW;
  const int n = min(p.tokens - t0, p.lay.ringW) * P;
  return gw < n ? tokRowOf(p, t0 + gw / P) : -1;
}

/// Steps 1 to 3 (every thread); true in a thread that stopped waiting. Ring: the layout's ring
/// has D > 1 rounds (else one round holds the batch: send it, then consume it).
template <class T, bool Ring>
__device__ bool combineBody(const Params& p, uint64_t flag) {
  __shared__ int cnt[kMaxRanks];
  __shared__ int first[kMaxRanks][moe::kMaxRounds + 1];  // [s][r]: s's first slot of round r
  __shared__ int rounds;
  const moe::Layout& l = p.lay;
  const int N = l.N, me = l.rank, tid = int(threadIdx.x), W = l.ringW, D = l.ringD;
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  if (blockIdx.x == 0 && tid < N)
    dev::stReleaseSys(reinterpret_cast<uint64_t*>(p.peer[tid] + l.creditAt(1, me)), flag);
  if (tid == 0) rounds = (p.tokens + W - 1) / W;
  __syncthreads();
  if (tid < N) {
    const int n = min(max(localAt<int32_t>(p, l.recvCounts)[tid], 0), l.B);
    cnt[tid] = n;
    // one round: any token or received slot makes it; a ring: the last received token's round
    if (n > 0) atomicMax(&rounds, Ring ? l.roundOf(max(tokenOf(p, tid, n - 1), 0)) + 1 : 1);
  }
  __syncthreads();
  const int R = min(rounds, Ring ? moe::kMaxRounds : 1);
  for (int i = tid; i < N * (R + 1); i += kThreads) {
    const int s = i / (R + 1), r = i % (R + 1);
    first[s][r] = r == 0 ? 0 : r == R ? cnt[s] : firstSlotFrom(p, s, cnt[s], r * W);
  }
  __syncthreads();
  // Items are dealt warp-major (warp w of block b is gw = w * G + b), so that a round with fewer
  // items than warps still has every block, and so every SM's memory pipe, at work.
  const int gw = (tid >> 5) * int(gridDim.x) + int(blockIdx.x), nw = int(gridDim.x) * kWarps;
  uint32_t seen = 0;  // the owners whose call credit this warp has seen (ownerCredit)
  if constexpr (!Ring) {
    if (R == 0) return false;
    const int32_t r0 = firstTokRow(p, 0, gw);  // in flight during the sends
    return !sendRound<T, kSendBatch<false>>(p, first, 0, flag, wait, seen, gw, nw) ||
           !gatherRound<T>(p, 0, flag, wait, gw, nw, r0);
  } else {
#pragma unroll 1
    for (int ph = 0; ph <= R; ++ph) {  // send round ph, consume round ph - 1
      if (ph < R && ph >= D) {  // round ph reuses round ph - D's ring rows: the owners' credits
        int f = 0;
        if (tid < N && first[tid][ph + 1] > first[tid][ph])
          f = !dev::waitFlagGE(
              reinterpret_cast<const uint64_t*>(mine(p) + l.ringCreditAt(tid, ph - D)),
              moe::roundFlag(flag, ph - D), wait, tid);
        if (dev::syncThreadsOr(f)) return true;
        dev::fenceAfterWait();
      }
      const int32_t r0 = ph > 0 ? firstTokRow(p, ph - 1, gw) : -1;
      int failed =
          ph < R && !sendRound<T, kSendBatch<true>>(p, first, ph, flag, wait, seen, gw, nw);
      if (ph > 0 && !failed) failed = !gatherRound<T>(p, ph - 1, flag, wait, gw, nw, r0);
      if (dev::syncThreadsOr(failed)) return true;
      if (ph > 0 && tid == 0) arriveRound(p, ph - 1, flag);
    }
    return false;
  }
}

/// The combine. Contract: the file's comment (steps 0 to 5).
template <class T, bool Ring>
__global__ void __launch_bounds__(kThreads) combineKernel(Params p) {
  const uint64_t flag = p.counters[blockIdx.x] + 1;
  const size_t outBytes = size_t(p.tokens) * size_t(p.lay.H) * sizeof(T);
  dev::peerCall(p.fail, p.counters + blockIdx.x, flag, dev::PoisonBuf{p.out, outBytes},
                [&] { return combineBody<T, Ring>(p, flag); });
}

}  // namespace

void launchCombine(const Params& p, int grid, void* stream) {
  dev::dispatchDtype(dev::RowTypes{}, DataType(p.lay.dtype), "moe combine", [&]<class T>() {
    if (p.lay.ringD > 1)
      dev::launchKernel("moe combine", &combineKernel<T, true>, grid, kThreads, stream, p);
    else
      dev::launchKernel("moe combine", &combineKernel<T, false>, grid, kThreads, stream, p);
    return 0;
  });
}

}  // namespace moegpu
}  // namespace cclx
