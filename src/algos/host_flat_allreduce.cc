// Flat allreduce: per chunk, every rank copies its input into its step slot, syncs, and reduces
// all ranks' slots in rank order 0..N-1 into its output. One step per chunk; best for small
// messages (one synchronization, N reads per element per rank).
#include "algos/host_algos.h"
#include "algos/host_reduce_kernels.h"

namespace cclx {
namespace {

class HostFlatAllReduce final : public HostAlgo {
 public:
  const char* name() const override { return "shm-flat"; }
  bool canRun(const CollArgs& a, const HostCtx&) const override { return a.type == CollType::AllReduce; }
  void run(const CollArgs& a, HostCtx& ctx) override {
    hostFlatReduce(ctx, a.send, a.recv, a.count, a.dtype, a.op, -1);
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostFlatAllReduce() { return std::make_unique<HostFlatAllReduce>(); }
}  // namespace cclx
