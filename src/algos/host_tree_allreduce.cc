// Tree (reduce-scatter + all-gather) allreduce: per chunk, inputs go to the step slots; rank r
// reduces its 1/N slice over all ranks (rank order 0..N-1) into its next slot; after a second
// sync every rank copies every reduced slice out. Same per-element operations as flat: identical
// bits. Each rank reads about 2x the message instead of N x.
#include "algos/host_algos.h"
#include "algos/host_reduce_kernels.h"

namespace cclx {
namespace {

class HostTreeAllReduce final : public HostAlgo {
 public:
  const char* name() const override { return "shm-tree"; }
  bool canRun(const CollArgs& a, const HostCtx&) const override { return a.type == CollType::AllReduce; }
  void run(const CollArgs& a, HostCtx& ctx) override {
    hostTreeReduce(ctx, a.send, a.recv, a.count, a.dtype, a.op, -1);
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostTreeAllReduce() { return std::make_unique<HostTreeAllReduce>(); }
}  // namespace cclx
