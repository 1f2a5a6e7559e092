// DDA LL exchange: all-gather, reduce-scatter and all-to-all of small messages in one kernel, one
// shot, over the LL16 slots of the flat allreduce (dda/ll.cuh: same region, same counters, same
// grid of kFlatBlocks blocks; the slot-reuse argument there covers both kernels).
//
// Synchronization contract. Every message of a call has the same length M (> 0: calls of size 0
// never launch), so every pair of ranks exchanges ceil(M / 8) >= 1 units per call, as the family's
// reuse argument needs. Block b owns units [b * per, (b + 1) * per) of every message (per =
// ceil(units / kFlatBlocks)) and reads its epoch e from its counter. Then:
//   0. (device/fail.cuh) if the comm's abort word is raised, it poisons its share of every output,
//      advances its counter and returns without touching a peer;
//   1. each thread loads its units of the message for rank d (plan.src[d]) and pushes them as LL16
//      packets with flag llFlag(e) into slot set e & 1, source = this rank, of every peer d;
//   2. each thread, for its same units, takes every rank's message: its own from plan.src[rank],
//      the others by polling its local slots until both flag words equal the flag; a copy writes
//      rank s's unit to plan.dst[s] (its own part straight from src to dst, skipped when they
//      are the same memory), a reduce-scatter combines ranks 0..N-1 in that order
//      (core/elements/dtype_math.h, units.cuh) and writes the result to plan.dst[0].
// No barrier: the data is the flag. In place: the thread that writes unit u of an output block has
// already pushed unit u of every input block (step 1 precedes step 2 in the same thread), and the
// in-place conventions (xchg.h) put the input of a block at the output of the same block or its
// own part at the same memory, so no unit is overwritten before it was read. A wait that stops
// (abort, host request, deadline; recorded) ends the thread's work; its block poisons all outputs.
#include "gpu/device/units.cuh"  // first: the GPU runtime before core/ headers (HIP)
#include "core/elements/lamport.h"
#include "gpu/dda/ll.cuh"
#include "gpu/dda/xchg.h"

namespace cclx {
namespace {

struct LLXParams {
  char* region[kMaxRanks];       // every rank's kFlat region
  const char* src[kMaxRanks];    // XchgPlan
  char* dst[kMaxRanks];
  size_t bytes;                  // every message's length
  size_t per;                    // units per block
  size_t slotBytes;
  uint64_t* counters;            // kFlatBlocks entries (kCounterFlat)
  FailParams fail;
  int rank, size;
  bool reduce;
  bool sameSrc;                  // one message for every rank (all-gather)
  RedOpKind op;
  double factor;
};

/// Every output of the call (copies: one per source; reduce-scatter: dst[0]), poisoned by this
/// block's share (entry) or by this block alone (a stop).
__device__ void poisonOutputs(const LLXParams& p, bool all) {
  for (int s = 0; s < (p.reduce ? 1 : p.size); ++s)
    all ? dev::poisonAll(p.dst[s], p.bytes) : dev::poisonShare(p.dst[s], p.bytes);
}

/// Polls this rank's slot of unit i from source `src` until it carries `flag`; false: stopped.
__device__ __forceinline__ bool pollUnit(const LLXParams& p, int set, int src, size_t i, uint32_t flag,
                                         dev::Waiter& w, uint32_t (&out)[2]) {
  const uint4* slot = dev::llSlot(p.region[p.rank], p.size, set, src, p.slotBytes, i);
  uint4 v = dev::ldLL16(slot);
  while (v.y != flag || v.w != flag) {
    if (!w.again(src)) return false;
    v = dev::ldLL16(slot);
  }
  out[0] = v.x, out[1] = v.z;
  return true;
}

/// Step 1: pushes this thread's units of every peer's message.
__device__ __forceinline__ void pushAll(const LLXParams& p, uint32_t flag, int set, size_t u0, size_t u1) {
  for (size_t u = u0 + threadIdx.x; u < u1; u += blockDim.x) {
    const int valid = dev::validBytes<8>(p.bytes, u);
    uint32_t w[2];
    if (p.sameSrc) dev::loadUnit<8>(p.src[0] + u * 8, valid, w);
    for (int d = 0; d < p.size; ++d) {
      if (d == p.rank) continue;
      if (!p.sameSrc) dev::loadUnit<8>(p.src[d] + u * 8, valid, w);
      dev::stLL16(dev::llSlot(p.region[d], p.size, set, p.rank, p.slotBytes, u - u0), w[0], w[1], flag);
    }
  }
}

/// Copies (all-gather, all-to-all). Returns true when this thread stopped waiting.
__device__ bool copyBody(const LLXParams& p, uint64_t epoch) {
  const uint32_t flag = lamport::llFlag(epoch);
  const int set = int(epoch & 1);
  const size_t units = (p.bytes + 7) / 8;
  const size_t u0 = blockIdx.x * p.per, u1 = min(u0 + p.per, units);
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  pushAll(p, flag, set, u0, u1);
  const bool ownCopy = p.src[p.rank] != p.dst[p.rank];
  for (size_t u = u0 + threadIdx.x; u < u1; u += blockDim.x) {
    const int valid = dev::validBytes<8>(p.bytes, u);
    for (int s = 0; s < p.size; ++s) {
      uint32_t w[2];
      if (s == p.rank) {
        if (!ownCopy) continue;
        dev::loadUnit<8>(p.src[s] + u * 8, valid, w);
      } else if (!pollUnit(p, set, s, u - u0, flag, wait, w)) {
        return true;
      }
      dev::storeUnit<8>(p.dst[s] + u * 8, valid, w);
    }
  }
  return false;
}

/// Reduce-scatter: ranks 0..N-1 in order. Returns true when this thread stopped waiting.
template <class T, RedOpKind Op>
__device__ bool reduceBody(const LLXParams& p, uint64_t epoch) {
  const dev::RedRt<T, Op> rt(p.op, p.factor);
  const uint32_t flag = lamport::llFlag(epoch);
  const int set = int(epoch & 1);
  const size_t units = (p.bytes + 7) / 8;
  const size_t u0 = blockIdx.x * p.per, u1 = min(u0 + p.per, units);
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  pushAll(p, flag, set, u0, u1);
  for (size_t u = u0 + threadIdx.x; u < u1; u += blockDim.x) {
    const int valid = dev::validBytes<8>(p.bytes, u);
    dev::UnitAcc<T, Op, 8> acc;
    for (int r = 0; r < p.size; ++r) {
      uint32_t w[2];
      if (r == p.rank) dev::loadUnit<8>(p.src[r] + u * 8, valid, w);
      else if (!pollUnit(p, set, r, u - u0, flag, wait, w)) return true;
      acc.add(w, r == 0, rt);
    }
    uint32_t out[2];
    acc.result(p.size, rt, out);
    dev::storeUnit<8>(p.dst[0] + u * 8, valid, out);
  }
  return false;
}

template <class T>
struct ReduceRun {
  const LLXParams& p;
  uint64_t e;
  bool& failed;
  template <RedOpKind Op> __device__ void operator()() { failed = reduceBody<T, Op>(p, e); }
};

/// T = void: the copies; otherwise the reduce-scatter of T. Contract (dev::peerCall,
/// device/peer_kernel.cuh): poison every output (poisonOutputs); body copyBody / reduceBody; the
/// block's counter moves from e to e + 1 on every path.
template <class T>
__global__ void __launch_bounds__(512) ddaXchgLLKernel(LLXParams p) {
  const uint64_t epoch = p.counters[blockIdx.x];
  dev::peerCall(p.fail, p.counters + blockIdx.x, epoch + 1,
                [&](bool all) { poisonOutputs(p, all); }, [&] {
                  bool failed = false;
                  if constexpr (std::is_void_v<T>) failed = copyBody(p, epoch);
                  else dev::dispatchOp<T>(p.op, ReduceRun<T>{p, epoch, failed});
                  return failed;
                });
}

size_t unitsPerBlock(size_t bytes) { return ((bytes + 7) / 8 + kFlatBlocks - 1) / kFlatBlocks; }

class DdaLL final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFlat); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    if (a.type != CollType::AllGather && a.type != CollType::ReduceScatter &&
        a.type != CollType::AllToAll)
      return false;
    if (!ctx.peerUsable() || a.count == 0) return false;
    if (a.type == CollType::ReduceScatter && !ddaOpSupported(a.op.kind, a.dtype)) return false;
    XchgPlan plan;
    return xchgPlan(a, ctx.rank, ctx.size, plan) && unitsPerBlock(a.bytes()) <= llSlotBytes(ctx) / 16;
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    XchgPlan plan;
    CCLX_REQUIRE(xchgPlan(a, ctx.rank, ctx.size, plan), cclxInternalError, "LL exchange: no plan");
    constexpr const char* kWhat = "LL exchange";
    const DataType kt = dev::ddaKernelDtype(a.dtype, a.op.kind);
    const auto kernel = plan.reduce ? dev::dispatchDtype(dev::DdaTypes{}, kt, kWhat,
                                                         [&]<class T>() { return &ddaXchgLLKernel<T>; })
                                    : &ddaXchgLLKernel<void>;
    LLXParams p{};
    for (int r = 0; r < ctx.size; ++r) {
      p.region[r] = ctx.peer->region(r, StagingRegion::kFlat);
      p.src[r] = plan.src[r];
      p.dst[r] = plan.dst[r];
    }
    p.bytes = a.bytes();
    p.per = unitsPerBlock(p.bytes);
    p.slotBytes = llSlotBytes(ctx);
    p.counters = ctx.counters + kCounterFlat;
    p.fail = failParams(a, ctx);
    p.rank = ctx.rank;
    p.size = ctx.size;
    p.reduce = plan.reduce;
    p.sameSrc = a.type == CollType::AllGather;
    p.op = a.op.kind;
    p.factor = a.op.factor;
    const int threads = int(std::min<size_t>(512, std::max<size_t>(32, (p.per + 31) / 32 * 32)));
    dev::launchKernel(kWhat, kernel, kFlatBlocks, threads, stream, p);
  }
};

}  // namespace

std::unique_ptr<DeviceAlgo> makeDdaLL() { return std::make_unique<DdaLL>(); }

}  // namespace cclx
