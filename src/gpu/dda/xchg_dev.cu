// DDA all-to-all-v whose split sizes live in device memory (all_to_all_v_device, torchcomms'
// device_alltoallv_single): the pipelined exchange (xchg_pipe.cuh) with its plan made by the
// kernel itself from the counts it reads at run time, so nothing waits for the host and a CUDA
// graph replays it with counts that change between replays.
//
// Contract of the kernel (every block, all threads; the grid, staging, signal words and counters
// are the pipelined exchange's, so calls of either kernel continue one chunk sequence per pair
// and block):
//   0. thread 0 reads the size() send and receive split sizes (int64 rows) and makes the plan in
//      shared memory: displacements are the exclusive prefix sums of each side's sizes, a message
//      is rows x rowBytes bytes at base + displacement x rowBytes. The plan is refused (verdict)
//      when a size is negative, a side's sizes sum beyond its capacity (rows of send / recv), or
//      this rank's size to itself differs from the one it expects from itself; a refused plan
//      has no message at all (nothing is read or written out of bounds), one header-only chunk
//      per pair for the counters.
//   1. dev::peerCall through pipeCall: an abort at entry poisons this block's share of the whole
//      output (recvCap rows); a refused plan records it (kErrCapacity naming this rank, or a
//      mismatch naming it) and raises the abort word on every rank, so that peers waiting for
//      this rank stop and poison theirs; otherwise the pipelined body runs: every chunk's header
//      carries the sender's length (with kDevKind), and a receiver whose own count for that
//      sender differs fails the call naming the sender before it copies anything.
//   2. the counters advance by each pair's chunk count on every path.
// The output is poisoned whole (recvCap rows, not only the received ones) on every failure.
#include "gpu/dda/xchg_pipe.cuh"

namespace cclx {
namespace {

struct DevRows {
  const int64_t* send;   // size() split sizes in rows (device memory)
  const int64_t* recv;
  const char* sendBase;  // the packed input (sendCap rows) and output (recvCap rows)
  char* recvBase;
  size_t rowBytes;
  size_t sendCap, recvCap;
};

enum : int { kPlanOk = 0, kPlanCapacity = 1, kPlanSelf = 2 };

/// Step 0 (one thread): p's messages from the split sizes; returns the verdict.
__device__ int planFromRows(PipeParams& p, const DevRows& d) {
  const int N = p.size, me = p.rank;
  int64_t s[kMaxRanks], r[kMaxRanks];
  for (int i = 0; i < N; ++i) {
    s[i] = d.send[i];
    r[i] = d.recv[i];
  }
  int verdict = kPlanOk;
  size_t so = 0, ro = 0;  // rows before rank i: stay within the capacities (no overflow)
  for (int i = 0; i < N && verdict == kPlanOk; ++i) {
    if (s[i] < 0 || r[i] < 0 || uint64_t(s[i]) > d.sendCap - so || uint64_t(r[i]) > d.recvCap - ro) {
      verdict = kPlanCapacity;
      break;
    }
    p.src[i] = d.sendBase + so * d.rowBytes;
    p.dst[i] = d.recvBase + ro * d.rowBytes;
    p.srcBytes[i] = size_t(s[i]) * d.rowBytes;
    p.dstBytes[i] = size_t(r[i]) * d.rowBytes;
    so += size_t(s[i]);
    ro += size_t(r[i]);
  }
  if (verdict == kPlanOk && s[me] != r[me]) verdict = kPlanSelf;
  if (verdict != kPlanOk)
    for (int i = 0; i < N; ++i) {
      p.src[i] = nullptr;
      p.dst[i] = nullptr;
      p.srcBytes[i] = p.dstBytes[i] = 0;
    }
  return verdict;
}

/// The all-to-all-v of device split sizes. Contract: the file's comment (steps 0 to 2).
__global__ void __launch_bounds__(kThreads) ddaXchgDevKernel(PipeParams in, DevRows rows) {
  __shared__ PipeParams p;
  __shared__ int verdict;
  if (threadIdx.x == 0) {
    p = in;
    verdict = planFromRows(p, rows);
  }
  __syncthreads();
  pipeCall<void>(p, [&] {
    if (verdict == kPlanOk) return false;
    if (threadIdx.x == 0) {
      if (verdict == kPlanSelf) dev::raiseMismatch(p.fail, p.rank);
      else dev::raiseCapacity(p.fail);
    }
    return true;
  });
}

class DdaXchgDev final : public DeviceAlgo {
 public:
  const char* name() const override { return "pipelined"; }
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kXchg); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    if (a.type != CollType::AllToAllVDevice || !ctx.peerUsable() || ctx.size < 2 ||
        ctx.size > kMaxRanks)
      return false;
    // Every length of a header stays below the kind bits.
    const size_t rowBytes = a.rows.rowElems * dtypeSize(a.dtype);
    const size_t cap = std::max(a.rows.sendCap, a.rows.recvCap);
    if (cap && rowBytes > (kP2PKind - 1) / cap) return false;
    return inboxBytesOf(ctx) >= 32;
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    const int G = ddaTreeBlocks(ctx);
    const size_t rowBytes = a.rows.rowElems * dtypeSize(a.dtype);
    PipeParams p{};
    for (int r = 0; r < ctx.size; ++r) {
      p.region[r] = ctx.peer->region(r, StagingRegion::kXchg);
      p.flags[r] = reinterpret_cast<uint64_t*>(ctx.peer->signalRegion(r, SignalRegion::kXchg));
    }
    p.inboxBytes = inboxBytesOf(ctx);
    p.capV = p.inboxBytes / 16 - 1;
    p.sent = ctx.counters + kCounterXchg;
    p.recvd = ctx.counters + kCounterXchg + kMaxRanks * kMaxBlocks;
    p.fail = failParams(a, ctx);
    p.rank = ctx.rank;
    p.size = ctx.size;
    p.op = RedOpKind::SUM;
    p.factor = 1.0;
    p.kind = kDevKind;
    p.sendMask = p.recvMask = ~0u;
    p.reduce = false;
    // Offsets are multiples of the row: 16-byte vectors throughout when the bases and the row are.
    p.aligned = (reinterpret_cast<uintptr_t>(a.send) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(a.recv) & 15) == 0 && rowBytes % 16 == 0;
    p.out = static_cast<char*>(a.recv);
    p.outBytes = a.rows.recvCap * rowBytes;
    DevRows rows{a.rows.send, a.rows.recv, static_cast<const char*>(a.send),
                 static_cast<char*>(a.recv), rowBytes, a.rows.sendCap, a.rows.recvCap};
    // The counts are not known here: threads for the largest message the buffers allow.
    const int threads =
        pipeThreads(p.capV, std::max(a.rows.sendCap, a.rows.recvCap) * rowBytes, G);
    dev::launchKernel("all_to_all_v_device exchange", &ddaXchgDevKernel, G, threads, stream, p,
                      rows);
  }
};

/// World size 1: all_to_all_v_device is a local copy of rows [0, s) of the input to the output,
/// s = the send split size to this rank (device memory). Contract: every thread reads the two
/// split sizes; the call is refused (kErrCapacity, or kErrMismatch naming this rank when the two
/// sizes differ, recorded in the error words: there are no peers, hence no abort word) when a
/// size is negative or beyond its capacity; then the whole output (recvCap rows) is poisoned;
/// otherwise s rows are copied (in place: nothing to do), 16-byte vectors where aligned. Reads
/// and writes never leave [0, sendCap) / [0, recvCap) rows. Capturable: nothing on the host.
__global__ void __launch_bounds__(kThreads) localRowsKernel(DevRows d, uint32_t* err) {
  const int64_t s = d.send[0], r = d.recv[0];
  const bool bad = s < 0 || r < 0 || uint64_t(s) > d.sendCap || uint64_t(r) > d.recvCap;
  const size_t t = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t threads = size_t(gridDim.x) * blockDim.x;
  if (bad || s != r) {
    if (t == 0) {
      volatile uint32_t* e = err;
      e[kErrMissing] = 1u;
      if (e[kErrCode] == kErrNone) e[kErrCode] = bad ? kErrCapacity : kErrMismatch;
      dev::fenceSystem();
    }
    dev::poison(d.recvBase, d.recvCap * d.rowBytes, t, threads);
    return;
  }
  const size_t n = size_t(s) * d.rowBytes;
  if (d.recvBase == d.sendBase || n == 0) return;
  if (((reinterpret_cast<uintptr_t>(d.sendBase) | reinterpret_cast<uintptr_t>(d.recvBase) | n) & 15) == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(d.sendBase);
    uint4* dst = reinterpret_cast<uint4*>(d.recvBase);
    for (size_t i = t; i < n / 16; i += threads) dst[i] = src[i];
  } else {
    for (size_t i = t; i < n; i += threads) d.recvBase[i] = d.sendBase[i];
  }
}

}  // namespace

std::unique_ptr<DeviceAlgo> makeDdaXchgDev() { return std::make_unique<DdaXchgDev>(); }

void launchDeviceRowsLocal(const CollArgs& a, const DeviceCtx& ctx, void* stream) {
  const size_t rowBytes = a.rows.rowElems * dtypeSize(a.dtype);
  DevRows rows{a.rows.send, a.rows.recv, static_cast<const char*>(a.send),
               static_cast<char*>(a.recv), rowBytes, a.rows.sendCap, a.rows.recvCap};
  const size_t bytes = std::max(a.rows.sendCap, a.rows.recvCap) * rowBytes;
  const int blocks = int(std::min<size_t>(std::max<size_t>((bytes / 16 + kThreads - 1) / kThreads, 1),
                                          size_t(std::max(ctx.smCount, 1)) * 4));
  dev::launchKernel("all_to_all_v_device (one rank)", &localRowsKernel, blocks, kThreads, stream,
                    rows, ctx.errorFlagDev);
}

}  // namespace cclx
