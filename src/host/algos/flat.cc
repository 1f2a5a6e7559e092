// Flat allreduce: per chunk, every rank copies its input into its step slot, syncs, and reduces
// all ranks' slots in rank order 0..N-1 into its output. One step per chunk; best for small
// messages (one synchronization, N reads per element per rank).
#include <vector>

#include "host/algos/algos.h"
#include "host/algos/chunk_loop.h"
#include "host/algos/reduce_kernels.h"
#include "host/shm.h"

namespace cclx {
namespace {

void flatAllReduce(HostCtx& ctx, const void* in, void* out, size_t count, DataType dtype,
                   ReduceOp op) {
  const size_t es = dtypeSize(dtype);
  std::vector<const void*> srcs(size_t(ctx.size));
  forEachSyncedChunk(ctx, in, count, es, [&](size_t off, size_t m, uint64_t s) {
    for (int p = 0; p < ctx.size; ++p) srcs[size_t(p)] = ctx.slot(p, s);
    reduceInto(static_cast<char*>(out) + off * es, srcs.data(), ctx.size, m, dtype, op, ctx.size);
  });
}

void flatRun(const CollArgs& a, HostCtx& ctx) {
  flatAllReduce(ctx, a.send, a.recv, a.count, a.dtype, a.op);
}

}  // namespace
std::unique_ptr<HostAlgo> makeHostFlatAllReduce() { return hostAlgo<flatRun>(); }
}  // namespace cclx
