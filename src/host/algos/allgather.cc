// All-gather (single buffer and list): per chunk of the per-rank block every rank copies its
// chunk into its step slot, syncs, and copies every rank's chunk to its place in the output.
// A rank's input chunk is copied before any output chunk of the same offset is written, so
// in-place calls (input inside the output) are safe.
#include <algorithm>
#include <cstring>

#include "host/algos/algos.h"
#include "host/algos/chunk_loop.h"
#include "host/shm.h"

namespace cclx {
namespace {

void allGather(const CollArgs& a, HostCtx& ctx) {
  const size_t bytes = a.bytes();
  const bool list = !a.recvList.empty();
  forEachSyncedChunk(ctx, a.send, bytes, 1, [&](size_t off, size_t n, uint64_t s) {
    for (int p = 0; p < ctx.size; ++p) {
      char* dst = list ? static_cast<char*>(a.recvList[size_t(p)]) + off
                       : static_cast<char*>(a.recv) + size_t(p) * bytes + off;
      std::memcpy(dst, ctx.slot(p, s), n);
    }
  });
}

}  // namespace
std::unique_ptr<HostAlgo> makeHostAllGather() { return hostAlgo<allGather>(); }
}  // namespace cclx
