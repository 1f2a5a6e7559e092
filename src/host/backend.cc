// The CPU backend: every collective runs on the calling thread over the host shared-memory
// transport and has finished when run() returns. core/select/select.h chooses the algorithm
// among the catalogue's rows (core/select/algorithms.def); registry.cc makes their objects.
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
  explicit HostBackend(const BootstrapInfo& info) : info_(info), algos_(makeHostAlgorithms()) {
    if (info.device.type != DeviceSpec::CPU)
      CCLX_THROW(cclxInvalidUsage, "host backend asked to serve a non-CPU device");
    ctx_ = std::make_shared<HostCtx>(info);
  }

  const char* name() const override { return "shm"; }

  std::shared_ptr<Work> run(const CollArgs& call, Algo& ran) override {
    requireLive();
    const Algo algo = ran = select(call, info_.cfg, caps(call));
    // A lowered call (reduce_scatter_quantized with the FP8 payload) runs as the algorithm runs it.
    const bool lowered = runsAs(call.type, algo) != call.type;
    const CollArgs low = lowered ? lowerFor(call, algo) : CollArgs{};
    const CollArgs& args = lowered ? low : call;
    auto t = args.opts.timeout.count() > 0 ? args.opts.timeout : ctx_->timeout;
    ctx_->beginColl(collLabel(args), t);
    // Nothing to move on any rank (core/comm/collectives.h): every rank skips alike.
    if (isEmpty(args, false)) return completedWork();
    CCLX_TRACE("host %s count=%zu dtype=%s algo=%s", collLabel(args), args.count,
               dtypeName(args.dtype), algoName(algo));
    try {
      // A peer that gave up on the comm (timed out, aborted) fails the call here on every rank,
      // as the GPU kernels' abort word at entry does: a late rank whose peers had staged their
      // data before giving up would otherwise complete a call they report as failed.
      ctx_->checkPeers();
      if (algo == Algo::Unfused) {
        runUnfused(args);
      } else {
        // Misaligned or overlapping user buffers go through temporaries (host/staging.h).
        HostStaging staging(args, ctx_->rank, ctx_->size, row(algo).flags & kLowPrecision);
        object(args, algo).run(staging.args(), *ctx_);
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
    requireLive();
    const Algo algo = select(args, info_.cfg, caps(args));
    if (algo != Algo::Unfused) return algoName(algo);
    const CollArgs ar = rmsUnfusedAllReduce(args, nullptr);
    return std::string("unfused(") + algoName(select(ar, info_.cfg, caps(ar))) + ")";
  }

  std::unique_ptr<WinImpl> newWindow(const WinExchange& ex) override {
    requireLive();
    return makeHostWindow(ctx_, ex);
  }

  std::string moeRefusal(const moe::Layout&) const override {
    return ctx_ ? "" : "the communicator was finalized or aborted";
  }
  std::unique_ptr<MoeEngine> newMoe(const moe::Layout& lay, const MoeConfig&) override {
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
  void requireLive() const {
    if (!ctx_) CCLX_THROW(cclxInvalidUsage, "host backend: communicator was finalized or aborted");
  }

  // What the host algorithms accept for this call: the catalogue's loop over this backend's
  // objects (core/select/algo_set.h), with the facts of a CPU comm.
  Caps caps(const CollArgs& a) const {
    Caps c;
    c.worldSize = ctx_->size;
    c.host = true;
    c.peer = a.type == CollType::AllReduce || a.type == CollType::AllReduceRmsNorm;
    algos_.allow(c, a, info_.cfg,
                 [&](const HostAlgo& h, const CollArgs& x) { return h.canRun(x, *ctx_); });
    return c;
  }

  // The object that runs `algo` for `a` (the catalogue gives every collective a host object
  // for what select() returns on CPU comms); a base object may still refuse the call.
  HostAlgo& object(const CollArgs& a, Algo algo) const {
    HostAlgo* h = algos_.find(a.type, algo);
    CCLX_REQUIRE(h, cclxInternalError, "host backend: no object runs '%s' for %s", algoName(algo),
                 collName(a.type));
    CCLX_REQUIRE(algo != Algo::Base || h->canRun(a, *ctx_), cclxUnsupported,
                 "host backend: %s cannot run on this comm's shared memory (its slots of %zu "
                 "bytes are too small)", collName(a.type), ctx_->slotBytes());
    return *h;
  }

  // The unfused sequence: the allreduce select() picks, into a temporary, then the row epilogue.
  void runUnfused(const CollArgs& a) {
    std::vector<char> tmp(a.bytes());
    const CollArgs ar = rmsUnfusedAllReduce(a, tmp.data());
    object(ar, select(ar, info_.cfg, caps(ar))).run(ar, *ctx_);
    hostRmsRows(a, tmp.data(), 0, a.rms.tokens);
  }

  BootstrapInfo info_;
  std::shared_ptr<HostCtx> ctx_;  // shared with the windows (host/window.h)
  AlgoSet<HostAlgo> algos_;       // one object per catalogue line with a host factory
};

}  // namespace

std::unique_ptr<Backend> makeHostBackend(const BootstrapInfo& info) {
  return std::make_unique<HostBackend>(info);
}

}  // namespace cclx
