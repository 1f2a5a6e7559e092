// Broadcast: per chunk the root copies its input into its step slot, syncs, and every other rank
// copies the root's slot into its output. The root copies its own input to its output (if
// out-of-place) directly.
#include <algorithm>
#include <cstring>

#include "host/algos/algos.h"
#include "host/algos/chunk_loop.h"
#include "host/shm.h"

namespace cclx {
namespace {

void broadcast(const CollArgs& a, HostCtx& ctx) {
  const size_t bytes = a.bytes();
  const bool isRoot = ctx.rank == a.root;
  if (isRoot && a.send != a.recv && bytes) std::memcpy(a.recv, a.send, bytes);
  forEachStep(ctx, bytes, ctx.slotBytes(), [&](size_t off, size_t n, uint64_t s) {
    if (isRoot) std::memcpy(ctx.slot(ctx.rank, s), static_cast<const char*>(a.recv) + off, n);
    ctx.sync(s);
    if (!isRoot) std::memcpy(static_cast<char*>(a.recv) + off, ctx.slot(a.root, s), n);
  });
}

}  // namespace
std::unique_ptr<HostAlgo> makeHostBroadcast() { return hostAlgo<broadcast>(); }
}  // namespace cclx
