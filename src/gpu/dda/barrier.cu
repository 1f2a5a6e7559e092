// Peer barrier kernel: one block; thread t < N stores the new sequence number into slot [me] of
// rank t's barrier row (st.release.sys) and waits until slot [t] of its own row reaches it
// (ld.acquire.sys). The sequence number lives in a device counter advanced by the kernel, so it
// works under CUDA-graph replay; values only increase. Rows are never reused by other kernels.
// This is also the latency floor of the peer-memory kernels (one NVLink round trip + launch).
// Failure model (device/fail.cuh): with the abort word raised at entry it signals nothing; a wait
// that stops is recorded; the sequence number advances either way.
#include "gpu/device/units.cuh"

namespace cclx {
namespace {

/// Contract (dev::peerCall, device/peer_kernel.cuh): no output to poison; body one blockBarrier
/// with sequence number q; the counter moves to q on every path.
__global__ void ddaBarrierKernel(dev::PeerPtrs peers, uint64_t* counter, FailParams fail) {
  const uint64_t q = *counter + 1;
  dev::peerCall(fail, counter, q, [](bool) {}, [&] {
    uint64_t* rows[kMaxRanks];
    for (int r = 0; r < fail.size; ++r) rows[r] = reinterpret_cast<uint64_t*>(peers.signal[r]);
    dev::Waiter wait(fail, dev::deadlineAfter(fail.timeoutNs));
    return !dev::blockBarrier(rows, fail.rank, fail.size, q, wait);
  });
}

class DdaBarrier final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return 0; }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    return a.type == CollType::Barrier && ctx.peerUsable();
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    dev::PeerPtrs p{};
    for (int r = 0; r < ctx.size; ++r) p.signal[r] = ctx.peer->signalRegion(r, SignalRegion::kBarrier);
    dev::launchKernel("peer barrier", ddaBarrierKernel, 1, 32, stream, p,
                      ctx.counters + kCounterBarrier, failParams(a, ctx));
  }
};

bool ddaTypeSupported(DataType t) {
  switch (t) {
    case DataType::f32: case DataType::f64: case DataType::f16: case DataType::bf16:
    case DataType::i32: case DataType::i64: case DataType::u32: case DataType::u64:
    case DataType::i8: case DataType::u8: return true;
    default: return false;
  }
}

}  // namespace

bool ddaOpSupported(RedOpKind op, DataType t) {
  if (!ddaTypeSupported(t)) return false;
  bool isFloat = t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
  if (op == RedOpKind::BAND || op == RedOpKind::BOR || op == RedOpKind::BXOR) return !isFloat;
  return true;
}

std::unique_ptr<DeviceAlgo> makeDdaBarrier() { return std::make_unique<DdaBarrier>(); }

}  // namespace cclx
