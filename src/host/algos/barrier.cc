// Barrier: one step with no data; returns once every rank published it.
#include "host/algos/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

class HostBarrier final : public HostAlgo {
 public:
  void run(const CollArgs&, HostCtx& ctx) override { ctx.barrier(); }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostBarrier() { return std::make_unique<HostBarrier>(); }
}  // namespace cclx
