// The CPU backend: every collective runs on the calling thread over the host shared-memory
// transport and has finished when run() returns. Algorithm choice: FP8 when lowPrecisionWanted()
// and its algorithm accepts; allreduce flat / lamport / tree by the "algo" hint (per call, then
// per comm), then CCLX_ALLREDUCE_ALGO, then size (<= CCLX_SHM_FLAT_MAX_BYTES: flat, else tree).
// A lamport request that its algorithm refuses (dtype, or larger than one inbox) runs the tree.
#include <memory>

#include "algos/fp8_algos.h"
#include "algos/host_algos.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/shm.h"

namespace cclx {
namespace {

class HostBackend final : public Backend {
 public:
  explicit HostBackend(const BootstrapInfo& info) : info_(info) {
    if (info.device.type != DeviceSpec::CPU)
      CCLX_THROW(cclxInvalidUsage, "host backend asked to serve a non-CPU device");
    ctx_ = std::make_unique<HostCtx>(info);
    flat_ = makeHostFlatAllReduce();
    tree_ = makeHostTreeAllReduce();
    lamport_ = makeHostLamportAllReduce();
    reduce_ = makeHostReduce();
    bcast_ = makeHostBroadcast();
    allGather_ = makeHostAllGather();
    reduceScatter_ = makeHostReduceScatter();
    allToAll_ = makeHostAllToAll();
    allToAllV_ = makeHostAllToAllV();
    p2p_ = makeHostSendRecv();
    barrier_ = makeHostBarrier();
    fp8AllReduce_ = makeHostFp8AllReduce();
    fp8OneShot_ = makeHostFp8OneShotAllReduce();
    fp8AllGather_ = makeHostFp8AllGather();
    fp8ReduceScatter_ = makeHostFp8ReduceScatter();
    fp8AllToAll_ = makeHostFp8AllToAll();
  }

  const char* name() const override { return "shm"; }

  std::shared_ptr<Work> run(const CollArgs& args) override {
    if (!ctx_) CCLX_THROW(cclxInvalidUsage, "host backend: communicator was finalized or aborted");
    HostAlgo* algo = pick(args);
    auto t = args.opts.timeout.count() > 0 ? args.opts.timeout : ctx_->timeout;
    ctx_->beginColl(collName(args.type), t);
    // Size 0: every rank of the collective sees the same count, so all skip alike. AllToAllV
    // counts differ per rank and Barrier has none: they always run.
    if (args.count == 0 && args.type != CollType::AllToAllV && args.type != CollType::Barrier)
      return completedWork();
    CCLX_TRACE("host %s count=%zu dtype=%s algo=%s", collName(args.type), args.count,
               dtypeName(args.dtype), algo->name());
    algo->run(args, *ctx_);
    return completedWork();
  }

  std::string selectAllReduce(const CollArgs& args) override { return pick(args)->name(); }

  void finalize() override {
    if (ctx_) ctx_->finalize();
    ctx_.reset();
  }
  void abort() override {
    if (ctx_) ctx_->abort();
    ctx_.reset();
  }

 private:
  std::string hint(const CollArgs& a, const char* key) const {
    auto it = a.opts.hints.find(key);
    if (it != a.opts.hints.end()) return it->second;
    auto jt = info_.opts.hints.find(key);
    return jt != info_.opts.hints.end() ? jt->second : std::string();
  }

  HostAlgo* lowPrecision(const CollArgs& a, const std::unique_ptr<HostAlgo>& algo) const {
    if (algo && ctx_ && lowPrecisionWanted(a, info_.cfg) && algo->canRun(a, *ctx_)) return algo.get();
    return nullptr;
  }

  HostAlgo* pick(const CollArgs& a) const {
    if (!ctx_) CCLX_THROW(cclxInvalidUsage, "host backend: communicator was finalized or aborted");
    switch (a.type) {
      case CollType::AllReduce: {
        if (lowPrecisionWanted(a, info_.cfg)) {
          const bool one = fp8OneShotWanted(a, info_.cfg, ctx_->size);
          if (HostAlgo* lp = lowPrecision(a, one ? fp8OneShot_ : fp8AllReduce_)) return lp;
        }
        std::string algo = hint(a, "algo");
        if (algo.empty() || algo == "auto") algo = info_.cfg.allreduceAlgo;
        if (algo == "flat") return flat_.get();
        if (algo == "tree") return tree_.get();
        if (algo == "lamport") return lamport_->canRun(a, *ctx_) ? lamport_.get() : tree_.get();
        return a.bytes() <= info_.cfg.shmFlatMaxBytes ? flat_.get() : tree_.get();
      }
      case CollType::Reduce: return reduce_.get();
      case CollType::Broadcast: return bcast_.get();
      case CollType::AllGather: {
        HostAlgo* lp = a.recvList.empty() ? lowPrecision(a, fp8AllGather_) : nullptr;
        return lp ? lp : allGather_.get();
      }
      case CollType::ReduceScatter: {
        HostAlgo* lp = a.sendList.empty() ? lowPrecision(a, fp8ReduceScatter_) : nullptr;
        return lp ? lp : reduceScatter_.get();
      }
      case CollType::AllToAll: {
        HostAlgo* lp = lowPrecision(a, fp8AllToAll_);
        return lp ? lp : allToAll_.get();
      }
      case CollType::AllToAllV: return allToAllV_.get();
      case CollType::Send:
      case CollType::Recv: return p2p_.get();
      case CollType::Barrier: return barrier_.get();
    }
    CCLX_THROW(cclxInternalError, "host backend: unknown collective %d", int(a.type));
  }

  BootstrapInfo info_;
  std::unique_ptr<HostCtx> ctx_;
  std::unique_ptr<HostAlgo> flat_, tree_, lamport_, reduce_, bcast_, allGather_, reduceScatter_, allToAll_,
      allToAllV_, p2p_, barrier_;
  std::unique_ptr<HostAlgo> fp8AllReduce_, fp8OneShot_, fp8AllGather_, fp8ReduceScatter_, fp8AllToAll_;
};

}  // namespace

std::unique_ptr<Backend> makeHostBackend(const BootstrapInfo& info) {
  return std::make_unique<HostBackend>(info);
}

}  // namespace cclx
