// The MoE combine kernel (docs/design/moe.md, "Combine"): one launch sends, for every slot this
// rank received in the last dispatch, the weighted f32 sum of its local experts' output rows
// (rounded once to the dtype) straight into the token owner's combine slot, and sums, for every
// token of this rank, the rows its expert ranks sent back (f32, top-k order, rounded once),
// writing [T, H] in token order. The CPU twin (host/moe.cc) does the same arithmetic in the
// same order, so both give the same bits.
//
// Contract of the kernel (every block, all threads; grid G fixed per buffer):
//   0. reads its call counter c (per block); dev::peerCall: an abort word raised at entry
//      poisons this block's share of the output [T, H] (all-ones bytes), pushes nothing and
//      advances the counter.
//   1. block 0 grants every rank the credit "this rank's combine slots for you are free for call
//      c" (credits[1][rank] in that rank's memory := c + 1): its previous combine has completed.
//   2. threads d < N wait (Waiter) for rank d's credit c + 1.
//   3. expert side: each warp takes (received slot, piece) items (recvCounts and the entries
//      of the last dispatch; a row in lay.yParts pieces of lay.yPartUnits 16-byte units):
//      sum_x w_x * expert_out[entry_x] per element in f32 (products and sums rounded once,
//      entries in top-k order; an entry at or past the rows given makes the row all-ones bytes),
//      rounded once to the dtype, stored into the source's yrows[rank][position], then the
//      piece's flag c + 1 (dev::warpPublish).
//   4. owner side: each warp takes (token t < T, piece) items: waits for the piece's flag of
//      each of the token's rows (tokRows: the first slot of each destination rank, in top-k
//      order), adds them in f32 in that order and rounds once into out[t]; a token with an id
//      out of range gets an all-ones row; a stopped wait fails the block.
//   5. counters advance (c + 1) on every path; a block that stopped poisons the output whole.
#include "gpu/moe/common.cuh"

namespace cclx {
namespace moegpu {
namespace {

/// Step 3 for piece q of received slot `slot` of source s at position pIdx (the whole warp).
template <class T>
__device__ void sendBack(const Params& p, int s, int pIdx, int q, uint64_t flag) {
  const moe::Layout& l = p.lay;
  const int lane = dev::laneId(), kk = l.kk;
  const size_t slot = size_t(s) * l.B + size_t(pIdx);
  // The slot's entries and weights, entry x in lane x: the leading entries >= 0.
  const int32_t e = lane < kk ? localAt<int32_t>(p, l.slotEntries)[slot * size_t(kk) + lane] : -1;
  const float ew = lane < kk ? localAt<float>(p, l.slotW)[slot * size_t(kk) + lane] : 0.f;
  const uint32_t stop = dev::ballot32(lane < kk && e < 0);
  const int n = stop ? __ffs(int(stop)) - 1 : kk;
  const bool bad = dev::ballot32(lane < n && size_t(e) >= p.eoutRows) != 0;
  const size_t bytes = size_t(l.H) * sizeof(T), lo = size_t(q) * l.yPartUnits;
  const size_t units = min((bytes + 15) / 16, lo + l.yPartUnits);  // the piece: [lo, units)
  char* dst = p.peer[s] + l.yrowAt(size_t(l.rank) * l.B + size_t(pIdx));
  if (bad) {
    for (size_t u = lo + size_t(lane); u < units; u += 32)
      *reinterpret_cast<uint4*>(dst + 16 * u) = make_uint4(~0u, ~0u, ~0u, ~0u);
  } else if (rowsAligned(p.eout, bytes)) {
    // whole aligned units: kX entries' loads of a unit in flight per round (a slot has k
    // entries or fewer, often 8)
    constexpr int kU = 1, kX = kCopyBatch;
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
  const size_t ySlot = size_t(l.rank) * l.B + size_t(pIdx);
  dev::warpPublish(reinterpret_cast<uint64_t*>(p.peer[s] + l.yflagAt(ySlot, q)), flag, lane == 0);
}

/// Step 4 for piece q of token t (the whole warp); false when a wait stopped.
template <class T>
__device__ bool gatherToken(const Params& p, int t, int q, uint64_t flag, dev::Waiter& wait) {
  const moe::Layout& l = p.lay;
  const int lane = dev::laneId(), k = l.k;
  const int32_t r = lane < k ? localAt<int32_t>(p, l.tokRows)[size_t(t) * k + lane] : -1;
  const bool nan = dev::ballot32(r == -2) != 0;
  if (!nan)
    for (int j = 0; j < k; ++j) {
      const int32_t rj = dev::shfl32(r, j);
      if (rj < 0) continue;
      const uint64_t* f = reinterpret_cast<const uint64_t*>(mine(p) + l.yflagAt(size_t(rj), q));
      if (!dev::warpAwait(f, flag, wait, rj / l.B)) return false;
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
        const uint4* row =
            reinterpret_cast<const uint4*>(mine(p) + l.yrowAt(size_t(rj < 0 ? 0 : rj)));
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

/// Steps 1 to 4 (every thread); true in a thread that stopped waiting.
template <class T>
__device__ bool combineBody(const Params& p, uint64_t flag) {
  __shared__ int cnt[kMaxRanks + 1];
  const moe::Layout& l = p.lay;
  const int N = l.N, me = l.rank, tid = int(threadIdx.x);
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  if (blockIdx.x == 0 && tid < N)
    dev::stReleaseSys(reinterpret_cast<uint64_t*>(p.peer[tid] + l.creditAt(1, me)), flag);
  if (tid < N) cnt[tid] = localAt<int32_t>(p, l.recvCounts)[tid];
  int failed = 0;
  if (tid < N)
    failed = !dev::waitFlagGE(reinterpret_cast<const uint64_t*>(mine(p) + l.creditAt(1, tid)),
                              flag, wait, tid);
  if (dev::syncThreadsOr(failed)) return true;
  dev::fenceAfterWait();
  const int total = blockScan(cnt, N), P = l.yParts;
  const int gw = int(blockIdx.x) * kWarps + (tid >> 5), nw = int(gridDim.x) * kWarps;
  // work items: (received slot, piece), then (token, piece); a slot's pieces on adjacent warps
  for (int g = gw; g < total * P; g += nw) {
    const int x = g / P;
    int s = N - 1;
    while (s > 0 && cnt[s] > x) --s;
    sendBack<T>(p, s, x - cnt[s], g % P, flag);
  }
  for (int g = gw; g < p.tokens * P; g += nw)
    if (!gatherToken<T>(p, g / P, g % P, flag, wait)) {
      failed = 1;
      break;
    }
  return failed != 0;
}

/// The combine. Contract: the file's comment (steps 0 to 5).
template <class T>
__global__ void __launch_bounds__(kThreads) combineKernel(Params p) {
  const uint64_t flag = p.counters[blockIdx.x] + 1;
  const size_t outBytes = size_t(p.tokens) * size_t(p.lay.H) * sizeof(T);
  dev::peerCall(p.fail, p.counters + blockIdx.x, flag, dev::PoisonBuf{p.out, outBytes},
                [&] { return combineBody<T>(p, flag); });
}

}  // namespace

void launchCombine(const Params& p, int grid, void* stream) {
  dev::dispatchDtype(dev::RowTypes{}, DataType(p.lay.dtype), "moe combine", [&]<class T>() {
    dev::launchKernel("moe combine", &combineKernel<T>, grid, kThreads, stream, p);
    return 0;
  });
}

}  // namespace moegpu
}  // namespace cclx
