// A GPU backend for a cclx Comm: setup records travel through the comm's store, and the NCCL comm
// is created here (nccl/create.h: rank 0's unique id through the store) and owned by the backend.
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "gpu/backend.h"
#include "gpu/nccl/create.h"
#include "store/bootstrap.h"

namespace cclx {

namespace {

class StoreExchange final : public Exchange {
 public:
  explicit StoreExchange(const BootstrapInfo& info) : info_(info) {}
  std::vector<std::string> allGather(const std::string& tag, const std::string& mine) override {
    return storeAllGather(*info_.store, "cclx_" + tag, mine, info_.rank, info_.size,
                          info_.opts.timeout,
                          strFormat("GPU setup (%s) of comm '%s'", tag.c_str(), info_.opts.name.c_str()));
  }
  // Published where allGather reads it, so that the ranks still waiting learn of this rank's
  // failure at once; never waits.
  void contribute(const std::string& tag, const std::string& mine) override {
    try {
      info_.store->set("cclx_" + tag + "/" + std::to_string(info_.rank), mine);
    } catch (const std::exception& e) {
      CCLX_WARN("GPU setup (%s) of comm '%s': %s", tag.c_str(), info_.opts.name.c_str(), e.what());
    }
  }

 private:
  const BootstrapInfo& info_;
};

}  // namespace

std::unique_ptr<Backend> makeCudaBackend(const BootstrapInfo& info) {
  GpuSetup s;
  s.rank = info.rank;
  s.size = info.size;
  s.device = info.device.index;
  s.localRank = info.localRank;
  s.cfg = info.cfg;
  s.timeout = info.opts.timeout;
  s.name = info.opts.name;
  s.plainNccl = info.opts.backend == "nccl";
  StoreExchange ex(info);
  auto b = std::make_unique<CudaBackend>(s, ex);
  if (b->ncclRefusal().empty()) {
    b->attachNccl(ncclCreateComm(*info.store, info.rank, info.size, info.opts.timeout,
                                  info.opts.name),
                   /*owned=*/true);
  } else {
    CCLX_INFO("no NCCL comm: %s", b->ncclRefusal().c_str());
  }
  return b;
}

}  // namespace cclx
