// DDA pipelined exchange: all-gather, reduce-scatter, all-to-all, all-to-all-v, reduce-scatter-v,
// broadcast, reduce and the grouped forms (scatter, gather, all-gather-v, all-to-all lists) at any
// size, in one kernel, as chunks pushed through double-buffered inboxes with per-pair flags.
//
// Synchronization contract. The grid is always ddaTreeBlocks() blocks, identical on every rank;
// block b only ever synchronizes with block b of the peers. Rank o's kXchg region holds, for every
// other rank s and block b, two inboxes [s][b][parity] of `inboxBytes` (a 16-byte header: the
// message's length and the chunk's sequence number, then capV 16-byte vectors). Every message of
// the plan (xchg.h: the message from each rank to each rank) is cut into G parts on 16-byte
// boundaries (part b for block b), each part into chunks of capV vectors; a pair's part always
// has at least one chunk (header only when empty), so both ends count the same chunks whenever
// they agree on the length. Per pair and block the sender counts chunks sent (counters `sent`) and
// the receiver chunks received (`recvd`), both only increasing across calls: chunk k of a call has
// sequence number q = (count at entry) + k + 1 and uses inbox parity q & 1. Round k of block b:
//   1. for every peer d that gets a chunk k: thread d waits until d's ack of this block reached
//      q - 2 (d finished reading that inbox parity), then the block writes the chunk and its
//      header into d's inbox [rank][b][q & 1] and thread d releases the data flag (rank, b) in
//      d's exchange signal region (st.release.sys after the block barrier);
//   2. for every peer s that sends a chunk k: thread s waits (acquire) for s's data flag to reach
//      q_s; the header's length (and kind: a batch's or a collective's) must equal what this rank
//      expects from s (else the call fails naming s: all-to-all-v counts disagree); the block
//      copies the chunk to plan.dst[s] (or, reduce-scatter, combines ranks 0..N-1 in order, its
//      own part straight from plan.src[rank], and writes plan.dst[0]); the own part of a copy goes
//      straight from src to dst (skipped when both are the same memory); then thread s releases
//      its ack (rank, b) in s's region.
// Pushes of a round precede its waits on every rank, and a wait only needs what peers did in this
// or earlier rounds, so there is no cycle. Inbox reuse: a sender writes parity p for chunk q only
// after the receiver acknowledged chunk q - 2 (the last one of that parity), across calls alike
// (the counts continue). In place (the conventions of xchg.h): a chunk of an output block is
// written in the same round, by the same block, after that block pushed the same chunk of the
// input block at the same memory; the own part of a reduce-scatter is read and written by the same
// thread. Each thread moves kUnroll independent 16-byte vectors per iteration; the partial last
// vector of a message is read and written byte-exact. Failure model (device/fail.cuh): a block
// that finds the abort word raised at entry poisons its share of every output; a wait that stops
// (abort, host request, deadline; recorded) or a length mismatch ends the block's work and it
// poisons every output. Either way every counter advances by its pair's chunk count, as on
// success.
//
// Point-to-point batches (SendRecv without `what`: not every rank takes part) run as rounds
// (xchgP2PRounds: round j holds the j-th message of each direction), one launch each. A round's
// plan names the directions that take part (sendMask, recvMask); every other direction has no
// chunk at all, so its counters stay put and no peer outside the batch is waited for. Both ends
// of a direction agree on its chunk count because the k-th message from s to d is in round k on
// both, with the same length (a length that differs fails the call naming the sender, as above).
// The argument above holds per direction: sends and acknowledgements only ever concern one
// direction's counters, inbox and flags, and a direction's sequence of launches at the sender
// pairs with its sequence at the receiver, whichever collectives or batches either end runs
// for other directions in between.
#include "gpu/dda/xchg_pipe.cuh"

namespace cclx {
namespace {

/// The exchange with the plan made on the host. Contract: pipeCall (xchg_pipe.cuh), nothing
/// before the body.
template <class T>
__global__ void __launch_bounds__(kThreads) ddaXchgPipeKernel(PipeParams p) {
  pipeCall<T>(p, [] { return false; });
}

class DdaPipelined final : public DeviceAlgo {
 public:
  uint32_t regions(const CollArgs&) const override { return regionBit(StagingRegion::kXchg); }
  bool canRun(const CollArgs& a, const DeviceCtx& ctx) const override {
    if (a.type != CollType::AllGather && a.type != CollType::ReduceScatter &&
        a.type != CollType::AllToAll && a.type != CollType::AllToAllV &&
        a.type != CollType::ReduceScatterV && a.type != CollType::SendRecv &&
        a.type != CollType::Broadcast && a.type != CollType::Reduce)
      return false;
    if (!ctx.peerUsable() || ctx.size < 2) return false;
    // Per-pair counts (all-to-all-v, the grouped forms) may be 0 on one rank and not another:
    // those run whatever this rank's count (the plan decides); the others' count is global.
    const bool perPair = a.type == CollType::AllToAllV || a.type == CollType::SendRecv;
    if (!perPair && a.count == 0) return false;
    const bool reduce = a.type == CollType::ReduceScatter || a.type == CollType::ReduceScatterV ||
                        a.type == CollType::Reduce;
    if (reduce && !ddaOpSupported(a.op.kind, a.dtype)) return false;
    if (inboxBytesOf(ctx) < 32) return false;
    XchgPlan plan;
    if (a.type == CollType::SendRecv && !a.what) {  // a batch: one launch per round
      for (const CollArgs& r : xchgP2PRounds(a))
        if (!xchgPlan(r, ctx.rank, ctx.size, plan)) return false;
      return true;
    }
    return xchgPlan(a, ctx.rank, ctx.size, plan);
  }
  void launch(const CollArgs& a, DeviceCtx& ctx, void* stream) override {
    if (a.type == CollType::SendRecv && !a.what) {
      for (const CollArgs& r : xchgP2PRounds(a)) launchOne(r, ctx, stream);
      return;
    }
    launchOne(a, ctx, stream);
  }

 private:
  static void launchOne(const CollArgs& a, DeviceCtx& ctx, void* stream) {
    XchgPlan plan;
    CCLX_REQUIRE(xchgPlan(a, ctx.rank, ctx.size, plan), cclxInternalError, "pipelined exchange: no plan");
    constexpr const char* kWhat = "pipelined exchange";
    const DataType kt = dev::ddaKernelDtype(a.dtype, a.op.kind);
    const auto kernel = plan.reduce ? dev::dispatchDtype(dev::DdaTypes{}, kt, kWhat,
                                                         [&]<class T>() { return &ddaXchgPipeKernel<T>; })
                                    : &ddaXchgPipeKernel<void>;
    const int G = ddaTreeBlocks(ctx);
    PipeParams p{};
    for (int r = 0; r < ctx.size; ++r) {
      p.region[r] = ctx.peer->region(r, StagingRegion::kXchg);
      p.flags[r] = reinterpret_cast<uint64_t*>(ctx.peer->signalRegion(r, SignalRegion::kXchg));
      p.src[r] = plan.src[r];
      p.srcBytes[r] = plan.srcBytes[r];
      p.dst[r] = plan.dst[r];
      p.dstBytes[r] = plan.dstBytes[r];
    }
    p.inboxBytes = inboxBytesOf(ctx);
    p.capV = p.inboxBytes / 16 - 1;
    p.sent = ctx.counters + kCounterXchg;
    p.recvd = ctx.counters + kCounterXchg + kMaxRanks * kMaxBlocks;
    p.fail = failParams(a, ctx);
    p.rank = ctx.rank;
    p.size = ctx.size;
    p.op = a.op.kind;
    p.factor = a.op.factor;
    p.kind = a.type == CollType::SendRecv && !a.what ? kP2PKind : 0;
    p.sendMask = plan.sendMask;
    p.recvMask = plan.recvMask;
    p.reduce = plan.reduce;
    p.aligned = plan.aligned;
    const int threads = pipeThreads(p.capV, plan.maxBytes, G);
    dev::launchKernel(kWhat, kernel, G, threads, stream, p);
  }
};

}  // namespace

std::unique_ptr<DeviceAlgo> makeDdaPipelined() { return std::make_unique<DdaPipelined>(); }

}  // namespace cclx
