// Barrier: one step with no data; returns once every rank published it.
#include "host/algos/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

void barrier(const CollArgs&, HostCtx& ctx) { ctx.barrier(); }

}  // namespace
std::unique_ptr<HostAlgo> makeHostBarrier() { return hostAlgo<barrier>(); }
}  // namespace cclx
