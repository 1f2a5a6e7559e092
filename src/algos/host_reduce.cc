// Reduce to root: the tree allreduce's reduce-scatter phase, then only the root copies the
// reduced slices out (its output is the only one written).
#include "algos/host_algos.h"
#include "algos/host_reduce_kernels.h"

namespace cclx {
namespace {

class HostReduce final : public HostAlgo {
 public:
  const char* name() const override { return "shm-reduce"; }
  bool canRun(const CollArgs& a, const HostCtx&) const override { return a.type == CollType::Reduce; }
  void run(const CollArgs& a, HostCtx& ctx) override {
    hostTreeReduce(ctx, a.send, a.recv, a.count, a.dtype, a.op, a.root);
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostReduce() { return std::make_unique<HostReduce>(); }
}  // namespace cclx
