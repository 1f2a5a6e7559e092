// DDA flat allreduce: one kernel, one-shot, LL16 packets (data and flag in the same 16 bytes).
//
// Synchronization contract. The grid is always kFlatBlocks blocks; block b owns the 8-byte units
// [b*per, (b+1)*per) of the message and a private packet slot range in every rank's flat staging
// region, addressed [set][source rank][block][unit]. Block b reads its epoch e from its device
// counter (advanced by the kernel at exit, so CUDA-graph replays keep counting), then:
//   0. (device/fail.cuh) if the comm's abort word is raised, it poisons its share of `recv`,
//      advances its counter and returns without touching a peer;
//   1. each thread loads its units from `send` and pushes them as LL16 packets {d0, f, d1, f}
//      with f = lamport::llFlag(e) (never 0: slots start zeroed) into slot set (e & 1), source =
//      this rank, of every peer (16-byte stores);
//   2. each thread, for its same units, combines the values of ranks 0..N-1 in that order (its
//      own from `send`, the others by polling its local slots until both flag words equal f) and
//      writes the result to `recv`. The same thread reads send[u] before writing recv[u], so
//      in-place works.
// No barrier is needed: the data is the flag, and a stale packet (older epoch) never equals f.
// The slots and epochs are those of the LL family (dda/ll.cuh), shared with the LL exchange.
// Why a slot is never overwritten while a peer still reads it: rank A writes set s again at epoch
// e + 2 only after finishing epoch e + 1, which needed at least one packet of epoch e + 1 from
// rank B (every launch has >= 1 unit); B pushes epoch e + 1 packets only after its epoch-e kernel
// has completely finished (flat launches are stream-ordered on each rank, the backend guarantees
// it), i.e. after B has read everything of set s at epoch e; a B that stopped in epoch e raised
// the abort word and pushes nothing more. A wait that stops (abort, host request, deadline; all
// recorded by the Waiter) ends the thread's consumption; its block then poisons all of `recv`.
#include "gpu/device/units.cuh"  // first: the GPU runtime before core/ headers (HIP)
#include "core/elements/lamport.h"
#include "gpu/dda/ll.cuh"

namespace cclx {
namespace {

struct FlatParams {
  dev::PeerPtrs peers;      // flat region bases
  const char* send;
  char* recv;
  size_t bytes;
  size_t per;               // units per block
  size_t slotBytes;         // bytes of one [set][src][block] slot range
  uint64_t* counters;       // kFlatBlocks entries
  FailParams fail;
  int rank, size;
  RedOpKind op;
  double factor;
};

__device__ __forceinline__ uint4* flatSlot(const FlatParams& p, int dst, int set, int src, size_t i) {
  return dev::llSlot(p.peers.staging[dst], p.size, set, src, p.slotBytes, i);
}

/// Returns true when this thread stopped waiting (the call failed).
template <class T, RedOpKind Op>
__device__ bool flatBody(const FlatParams& p, uint64_t epoch) {
  const uint32_t flag = lamport::llFlag(epoch);
  const int set = int(epoch & 1);
  const size_t units = (p.bytes + 7) / 8;
  const size_t u0 = blockIdx.x * p.per;
  const size_t u1 = min(u0 + p.per, units);
  dev::Waiter wait(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
  const dev::RedRt<T, Op> rt(p.op, p.factor);

  for (size_t u = u0 + threadIdx.x; u < u1; u += blockDim.x) {
    int valid = dev::validBytes<8>(p.bytes, u);
    uint32_t w[2];
    dev::loadUnit<8>(p.send + u * 8, valid, w);
    for (int r = 0; r < p.size; ++r)
      if (r != p.rank) dev::stLL16(flatSlot(p, r, set, p.rank, u - u0), w[0], w[1], flag);
  }
  bool failed = false;
  for (size_t u = u0 + threadIdx.x; u < u1 && !failed; u += blockDim.x) {
    int valid = dev::validBytes<8>(p.bytes, u);
    dev::UnitAcc<T, Op, 8> acc;
    for (int r = 0; r < p.size; ++r) {
      uint32_t w[2];
      if (r == p.rank) {
        dev::loadUnit<8>(p.send + u * 8, valid, w);
      } else {
        const uint4* slot = flatSlot(p, p.rank, set, r, u - u0);
        uint4 v = dev::ldLL16(slot);
        while (v.y != flag || v.w != flag) {
          if (!wait.again(r)) {
            failed = true;
            break;
          }
          v = dev::ldLL16(slot);
        }
        if (failed) break;
        w[0] = v.x, w[1] = v.z;
      }
      acc.add(w, r == 0, rt);
    }
    if (failed) break;
    uint32_t out[2];
    acc.result(p.size, rt, out);
    dev::storeUnit<8>(p.recv + u * 8, valid, out);
  }
  return failed;
}

template <class T>
struct FlatRun {
  const FlatParams& p;
  uint64_t e;
  bool& failed;
  template <RedOpKind Op> __device__ void operator()() { failed = flatBody<T, Op>(p, e); }
};

/// Contract (dev::peerCall, device/peer_kernel.cuh): poison `recv`; body flatBody (steps 1-2
/// above); the block's counter moves from e to e + 1 on every path.
template <class T>
__global__ void __launch_bounds__(512) ddaFlatAllReduceKernel(FlatParams p) {
  const uint64_t epoch = p.counters[blockIdx.x];
  dev::peerCall(p.fail, p.counters + blockIdx.x, epoch + 1, dev::PoisonBuf{p.recv, p.bytes}, [&] {
    bool failed = false;
    dev::dispatchOp<T>(p.op, FlatRun<T>{p, epoch, failed});
    return failed;
  });
}

bool flatFits(size_t bytes, const DeviceCtx& ctx) {
  if (!ctx.peerUsable() || bytes == 0) return false;
  size_t units = (bytes + 7) / 8;
  size_t per = (units + kFlatBlocks - 1) / kFlatBlocks;
  return per <= llSlotBytes(ctx) / 16;
}

class DdaFlat final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kFlat); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    return a.type == CollType::AllReduce && ddaOpSupported(a.op.kind, a.dtype) &&
           flatFits(a.bytes(), ctx);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    constexpr const char* kWhat = "DDA flat allreduce";
    const DataType kt = dev::ddaKernelDtype(a.dtype, a.op.kind);
    const auto kernel = dev::dispatchDtype(dev::DdaTypes{}, kt, kWhat,
                                           [&]<class T>() { return &ddaFlatAllReduceKernel<T>; });
    const size_t bytes = a.bytes();
    FlatParams p{};
    for (int r = 0; r < ctx.size; ++r) p.peers.staging[r] = ctx.peer->region(r, StagingRegion::kFlat);
    dev::fillCallParams(p, a, ctx, kCounterFlat);
    size_t units = (bytes + 7) / 8;
    p.per = (units + kFlatBlocks - 1) / kFlatBlocks;
    p.slotBytes = llSlotBytes(ctx);
    int threads = int(std::min<size_t>(512, std::max<size_t>(32, (p.per + 31) / 32 * 32)));
    dev::launchKernel(kWhat, kernel, kFlatBlocks, threads, stream, p);
  }
};

}  // namespace

size_t llSlotBytes(const DeviceCtx& ctx) {
  size_t region = ctx.peer->regionBytes(StagingRegion::kFlat);
  return (region / (2 * size_t(ctx.size) * kFlatBlocks)) & ~size_t(15);
}

std::unique_ptr<DeviceAlgo> makeDdaFlat() { return std::make_unique<DdaFlat>(); }

}  // namespace cclx
