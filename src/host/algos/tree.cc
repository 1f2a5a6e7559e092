// Tree reduction (reduce-scatter + all-gather): per chunk, inputs go to the step slots; rank r
// reduces its 1/N slice (splitRange) over all ranks (rank order 0..N-1) into its next slot; after
// a second sync every rank (allreduce) or only the root (reduce) copies every reduced slice out.
// Same per-element operations as flat: identical bits. Each rank reads about 2x the message
// instead of N x.
#include <cstring>
#include <vector>

#include "host/algos/algos.h"
#include "host/algos/chunk_loop.h"
#include "host/algos/reduce_kernels.h"
#include "host/shm.h"

namespace cclx {
namespace {

/// `out` may be null on ranks that copy nothing (root >= 0 and root != rank); `in` may equal out.
void treeReduce(HostCtx& ctx, const void* in, void* out, size_t count, DataType dtype,
                ReduceOp op, int root) {
  const size_t es = dtypeSize(dtype);
  std::vector<const void*> srcs(size_t(ctx.size));
  // Step s: inputs into slot s. Step s + 1: reduced slices (same offsets) into slot s + 1.
  forEachSyncedChunk(ctx, in, count, es, [&](size_t off, size_t m, uint64_t s) {
    const Range mine = splitRange(m, ctx.size, ctx.rank);
    for (int p = 0; p < ctx.size; ++p) srcs[size_t(p)] = ctx.slot(p, s) + mine.begin * es;
    reduceInto(ctx.slot(ctx.rank, s + 1) + mine.begin * es, srcs.data(), ctx.size, mine.size(), dtype,
               op, ctx.size);
    ctx.sync(s + 1);
    if (root >= 0 && root != ctx.rank) return;
    for (int p = 0; p < ctx.size; ++p) {
      const Range r = splitRange(m, ctx.size, p);
      std::memcpy(static_cast<char*>(out) + (off + r.begin) * es, ctx.slot(p, s + 1) + r.begin * es,
                  r.size() * es);
    }
  });
}

void treeAllReduce(const CollArgs& a, HostCtx& ctx) {
  treeReduce(ctx, a.send, a.recv, a.count, a.dtype, a.op, -1);
}

// Reduce to root: the tree's reduce-scatter phase, then only the root copies the reduced slices
// out (its output is the only one written).
void reduceRun(const CollArgs& a, HostCtx& ctx) {
  treeReduce(ctx, a.send, a.recv, a.count, a.dtype, a.op, a.root);
}

}  // namespace
std::unique_ptr<HostAlgo> makeHostTreeAllReduce() { return hostAlgo<treeAllReduce>(); }
std::unique_ptr<HostAlgo> makeHostReduce() { return hostAlgo<reduceRun>(); }
}  // namespace cclx
