// The CPU backend: every collective runs on the calling thread over the host shared-memory
// transport and has finished when run() returns. core/select/select.h chooses the algorithm.
#include <memory>
#include <vector>

#include "core/elements/outputs.h"
#include "core/failure/watchdog.h"
#include "host/algos/algos.h"
#include "base/error.h"
#include "core/select/select.h"
#include "base/log.h"
#include "host/shm.h"
#include "host/staging.h"
#include "host/moe.h"
#include "host/window.h"

namespace cclx {
namespace {

class HostBackend final : public Backend {
 public:
  explicit HostBackend(const BootstrapInfo& info) : info_(info) {
    if (info.device.type != DeviceSpec::CPU)
      CCLX_THROW(cclxInvalidUsage, "host backend asked to serve a non-CPU device");
    ctx_ = std::make_shared<HostCtx>(info);
    flat_ = makeHostFlatAllReduce();
    tree_ = makeHostTreeAllReduce();
    lamport_ = makeHostLamportAllReduce();
    reduce_ = makeHostReduce();
    bcast_ = makeHostBroadcast();
    allGather_ = makeHostAllGather();
    reduceScatter_ = makeHostReduceScatter();
    reduceScatterV_ = makeHostReduceScatterV();
    allToAll_ = makeHostAllToAll();
    allToAllV_ = makeHostAllToAllV();
    allToAllVDevice_ = makeHostAllToAllVDevice();
    p2p_ = makeHostSendRecv();
    barrier_ = makeHostBarrier();
    fp8AllReduce_ = makeHostFp8AllReduce();
    fp8OneShot_ = makeHostFp8OneShotAllReduce();
    fp8AllGather_ = makeHostFp8AllGather();
    fp8ReduceScatter_ = makeHostFp8ReduceScatter();
    fp8AllToAll_ = makeHostFp8AllToAll();
    rmsOneShot_ = makeHostRmsOneShot();
    rmsTwoShot_ = makeHostRmsTwoShot();
    quantized_ = makeHostQuantizedReduceScatter();
  }

  const char* name() const override { return "shm"; }

  std::shared_ptr<Work> run(const CollArgs& call) override {
    if (!ctx_) CCLX_THROW(cclxInvalidUsage, "host backend: communicator was finalized or aborted");
    HostAlgo* algo = pick(call);
    // reduce_scatter_quantized with the FP8 payload runs as the FP8 reduce-scatter.
    const bool asFp8 = call.type == CollType::ReduceScatterQuantized && algo == fp8ReduceScatter_.get();
    const CollArgs lowered = asFp8 ? quantizedAsFp8(call) : CollArgs{};
    const CollArgs& args = asFp8 ? lowered : call;
    auto t = args.opts.timeout.count() > 0 ? args.opts.timeout : ctx_->timeout;
    ctx_->beginColl(collLabel(args), t);
    // Size 0: every rank of the collective sees the same count, so all skip alike. AllToAllV
    // counts differ per rank and Barrier has none: they always run. (SendRecv's count is its
    // own messages' total, ReduceScatterV's all blocks': 0 only when nothing is to move.)
    // AllToAllVDevice has no count (its split sizes are read by its algorithm).
    if (args.count == 0 && args.type != CollType::AllToAllV && args.type != CollType::Barrier &&
        args.type != CollType::AllToAllVDevice)
      return completedWork();
    CCLX_TRACE("host %s count=%zu dtype=%s algo=%s", collLabel(args), args.count,
               dtypeName(args.dtype), algo ? algo->name() : "unfused");
    try {
      // A peer that gave up on the comm (timed out, aborted) fails the call here on every rank,
      // as the GPU kernels' abort word at entry does: a late rank whose peers had staged their
      // data before giving up would otherwise complete a call they report as failed.
      ctx_->checkPeers();
      if (args.type == CollType::AllReduceRmsNorm && !algo) {
        runUnfused(args);
      } else {
        // Misaligned or overlapping user buffers go through temporaries (host/staging.h).
        const bool fp8 = algo == fp8AllReduce_.get() || algo == fp8OneShot_.get() ||
                         algo == fp8AllGather_.get() || algo == fp8ReduceScatter_.get() ||
                         algo == fp8AllToAll_.get();
        HostStaging staging(args, ctx_->rank, ctx_->size, fp8);
        algo->run(staging.args(), *ctx_);
        staging.finish();
      }
    } catch (const Error& e) {
      // A collective that failed (a timeout, a peer's failure) never leaves a plausible value
      // behind (core/elements/outputs.h); rejected arguments leave everything as it was.
      if (fatalCode(e.code())) poisonHostOutputs(args, ctx_->size);
      throw;
    }
    return completedWork();
  }

  std::string selectAllReduce(const CollArgs& args) override {
    if (HostAlgo* h = pick(args)) return h->name();
    return std::string("unfused(") + pick(rmsUnfusedAllReduce(args, nullptr))->name() + ")";
  }

  std::unique_ptr<WinImpl> newWindow(const WinExchange& ex) override {
    if (!ctx_) CCLX_THROW(cclxInvalidUsage, "host backend: communicator was finalized or aborted");
    return makeHostWindow(ctx_, ex);
  }

  std::string moeRefusal(const moe::Layout&) const override {
    return ctx_ ? "" : "the communicator was finalized or aborted";
  }
  std::unique_ptr<MoeEngine> newMoe(const moe::Layout& lay) override {
    if (!ctx_) CCLX_THROW(cclxInvalidUsage, "host backend: communicator was finalized or aborted");
    return makeHostMoe(ctx_, lay);
  }

  void finalize() override {
    if (ctx_) ctx_->finalize();
    ctx_.reset();
  }
  void abort() override {
    if (ctx_) ctx_->abort();
    ctx_.reset();
  }

 private:
  // What the host algorithms accept for this call (the allreduce rows of core/select/select.h).
  Caps caps(const CollArgs& a) const {
    Caps c;
    c.worldSize = ctx_->size;
    c.host = true;
    const bool fp8 = lowPrecisionWanted(a, info_.cfg);  // FP8 checks only when it may run
    switch (a.type) {
      case CollType::AllReduce:
        c.flat = c.tree = c.peer = true;
        c.lamport = lamport_->canRun(a, *ctx_);
        c.fp8 = fp8 && fp8AllReduce_->canRun(a, *ctx_);
        c.fp8OneShot = fp8 && fp8OneShot_->canRun(a, *ctx_);
        break;
      case CollType::AllGather:
        c.fp8 = fp8 && a.recvList.empty() && fp8AllGather_->canRun(a, *ctx_);
        break;
      case CollType::ReduceScatter:
        c.fp8 = fp8 && a.sendList.empty() && fp8ReduceScatter_->canRun(a, *ctx_);
        break;
      case CollType::ReduceScatterQuantized:  // the FP8 payload (select.h: quantizedAsFp8)
        c.fp8 = fp8ReduceScatter_->canRun(quantizedAsFp8(a), *ctx_);
        break;
      case CollType::AllToAll: c.fp8 = fp8 && fp8AllToAll_->canRun(a, *ctx_); break;
      case CollType::AllReduceRmsNorm:
        c.peer = true;
        c.rmsOneShot = rmsOneShot_->canRun(a, *ctx_);
        c.rmsTwoShot = rmsTwoShot_->canRun(a, *ctx_);
        break;
      default: break;
    }
    return c;
  }

  // The unfused sequence: the allreduce select() picks, into a temporary, then the row epilogue.
  void runUnfused(const CollArgs& a) {
    std::vector<char> tmp(a.bytes());
    const CollArgs ar = rmsUnfusedAllReduce(a, tmp.data());
    pick(ar)->run(ar, *ctx_);
    hostRmsRows(a, tmp.data(), 0, a.rms.tokens);
  }

  // nullptr for AllReduceRmsNorm's unfused sequence (runUnfused).
  HostAlgo* pick(const CollArgs& a) const {
    if (!ctx_) CCLX_THROW(cclxInvalidUsage, "host backend: communicator was finalized or aborted");
    const Algo algo = select(a, info_.cfg, caps(a));
    switch (a.type) {
      case CollType::AllReduce:
        switch (algo) {
          case Algo::Fp8OneShot: return fp8OneShot_.get();
          case Algo::Fp8: return fp8AllReduce_.get();
          case Algo::Lamport: return lamport_.get();
          case Algo::Flat: return flat_.get();
          default: return tree_.get();
        }
      case CollType::Reduce: return reduce_.get();
      case CollType::Broadcast: return bcast_.get();
      case CollType::AllGather: return algo == Algo::Fp8 ? fp8AllGather_.get() : allGather_.get();
      case CollType::ReduceScatter:
        return algo == Algo::Fp8 ? fp8ReduceScatter_.get() : reduceScatter_.get();
      case CollType::AllToAll: return algo == Algo::Fp8 ? fp8AllToAll_.get() : allToAll_.get();
      case CollType::AllToAllV: return allToAllV_.get();
      case CollType::ReduceScatterV: return reduceScatterV_.get();
      case CollType::Send:
      case CollType::Recv:
      case CollType::SendRecv: return p2p_.get();
      case CollType::Barrier: return barrier_.get();
      case CollType::AllReduceRmsNorm:
        return algo == Algo::RmsOneShot   ? rmsOneShot_.get()
               : algo == Algo::RmsTwoShot ? rmsTwoShot_.get()
                                          : nullptr;
      case CollType::AllToAllVDevice: return allToAllVDevice_.get();
      case CollType::ReduceScatterQuantized:
        if (algo == Algo::Fp8) return fp8ReduceScatter_.get();
        CCLX_REQUIRE(quantized_->canRun(a, *ctx_), cclxUnsupported,
                     "host backend: %s needs a staging slot of %zu bytes", collName(a.type),
                     sizeof(uint16_t) * size_t(ctx_->size));
        return quantized_.get();
    }
    CCLX_THROW(cclxInternalError, "host backend: unknown collective %d", int(a.type));
  }

  BootstrapInfo info_;
  std::shared_ptr<HostCtx> ctx_;  // shared with the windows (host/window.h)
  std::unique_ptr<HostAlgo> flat_, tree_, lamport_, reduce_, bcast_, allGather_, reduceScatter_, allToAll_,
      allToAllV_, allToAllVDevice_, p2p_, barrier_, reduceScatterV_;
  std::unique_ptr<HostAlgo> fp8AllReduce_, fp8OneShot_, fp8AllGather_, fp8ReduceScatter_, fp8AllToAll_;
  std::unique_ptr<HostAlgo> rmsOneShot_, rmsTwoShot_;
  std::unique_ptr<HostAlgo> quantized_;  // reduce_scatter_quantized (quantized.cc)
};

}  // namespace

std::unique_ptr<Backend> makeHostBackend(const BootstrapInfo& info) {
  return std::make_unique<HostBackend>(info);
}

}  // namespace cclx
