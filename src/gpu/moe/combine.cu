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
//   3. expert side: each warp takes received slots (recvCounts and the entries of the last
//      dispatch): sum_x w_x * expert_out[entry_x] per element in f32 (products and sums rounded
//      once, entries in top-k order; an entry at or past the rows given makes the row all-ones
//      bytes), rounded once to the dtype, stored into the source's yrows[rank][position], then
//      the slot's flag c + 1 (dev::warpPublish).
//   4. owner side: each warp takes tokens t < T: waits for the flag of each of the token's rows
//      (tokRows: the first slot of each destination rank, in top-k order), adds them in f32 in
//      that order and rounds once into out[t]; a token with an id out of range gets an all-ones
//      row; a stopped wait fails the block.
//   5. counters advance (c + 1) on every path; a block that stopped poisons the output whole.
#include "gpu/moe/common.cuh"

namespace cclx {
namespace moegpu {
namespace {

/// Step 3 for received slot `slot` of source s at position pIdx (the whole warp).
template <class T>
__device__ void sendBack(const Params& p, int s, int pIdx, uint64_t flag) {
  const moe::Layout& l = p.lay;
  const int lane = dev::laneId(), kk = l.kk;
  const size_t slot = size_t(s) * l.B + size_t(pIdx);
  const int32_t* se = localAt<int32_t>(p, l.slotEntries) + slot * size_t(kk);
  const float* sw = localAt<float>(p, l.slotW) + slot * size_t(kk);
  int n = 0;
  bool bad = false;
  while (n < kk && se[n] >= 0) {
    bad = bad || size_t(se[n]) >= p.eoutRows;
    ++n;
  }
  const size_t bytes = size_t(l.H) * sizeof(T), units = (bytes + 15) / 16;
  char* dst = p.peer[s] + l.yrowAt(size_t(l.rank) * l.B + size_t(pIdx));
  for (size_t u = size_t(lane); u < units; u += 32) {
    uint4 out = make_uint4(~0u, ~0u, ~0u, ~0u);
    if (!bad) {
      float acc[kPerUnit<T>];
#pragma unroll
      for (int i = 0; i < kPerUnit<T>; ++i) acc[i] = 0.f;
      for (int x = 0; x < n; ++x) {
        const char* row = p.eout + size_t(se[x]) * bytes;
        float v[kPerUnit<T>];
        unpackUnit<T>(loadUserUnit(row, u, unitValid(bytes, u)), v);
        const float wt = sw[x];
#pragma unroll
        for (int i = 0; i < kPerUnit<T>; ++i) {
          const float prod = __fmul_rn(wt, v[i]);
          acc[i] = x == 0 ? prod : __fadd_rn(acc[i], prod);
        }
      }
      out = packUnit<T>(acc);
    }
    *reinterpret_cast<uint4*>(dst + 16 * u) = out;
  }
  dev::warpPublish(reinterpret_cast<uint64_t*>(p.peer[s] + l.yflagAt(size_t(l.rank) * l.B +
                                                                     size_t(pIdx))),
                   flag, lane == 0);
}

/// Step 4 for token t (the whole warp); false when a wait stopped.
template <class T>
__device__ bool gatherToken(const Params& p, int t, uint64_t flag, dev::Waiter& wait) {
  const moe::Layout& l = p.lay;
  const int lane = dev::laneId(), k = l.k;
  const int32_t r = lane < k ? localAt<int32_t>(p, l.tokRows)[size_t(t) * k + lane] : -1;
  const bool nan = dev::ballot32(r == -2) != 0;
  int rows[moe::kMaxTopK];
  for (int j = 0; j < moe::kMaxTopK; ++j) rows[j] = j < k ? dev::shfl32(r, j) : -1;
  if (!nan)
    for (int j = 0; j < k; ++j) {
      if (rows[j] < 0) continue;
      const uint64_t* f = reinterpret_cast<const uint64_t*>(mine(p) + l.yflagAt(size_t(rows[j])));
      if (!dev::warpAwait(f, flag, wait, rows[j] / l.B)) return false;
    }
  const size_t bytes = size_t(l.H) * sizeof(T), units = (bytes + 15) / 16;
  char* dst = p.out + size_t(t) * bytes;
  for (size_t u = size_t(lane); u < units; u += 32) {
    uint4 out = make_uint4(~0u, ~0u, ~0u, ~0u);
    if (!nan) {
      float acc[kPerUnit<T>];
#pragma unroll
      for (int i = 0; i < kPerUnit<T>; ++i) acc[i] = 0.f;
      bool first = true;
      for (int j = 0; j < k; ++j) {
        if (rows[j] < 0) continue;
        const uint4 x = dev::ldCg(reinterpret_cast<const uint4*>(mine(p) + l.yrowAt(size_t(rows[j])) + 16 * u));
        float v[kPerUnit<T>];
        unpackUnit<T>(x, v);
#pragma unroll
        for (int i = 0; i < kPerUnit<T>; ++i) acc[i] = first ? v[i] : __fadd_rn(acc[i], v[i]);
        first = false;
      }
      out = packUnit<T>(acc);
    }
    storeUserUnit(dst, u, unitValid(bytes, u), out);
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
  const int total = blockScan(cnt, N);
  const int gw = int(blockIdx.x) * kWarps + (tid >> 5), nw = int(gridDim.x) * kWarps;
  for (int g = gw; g < total; g += nw) {
    int s = N - 1;
    while (s > 0 && cnt[s] > g) --s;
    sendBack<T>(p, s, g - cnt[s], flag);
  }
  for (int t = gw; t < p.tokens; t += nw)
    if (!gatherToken<T>(p, t, flag, wait)) {
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
