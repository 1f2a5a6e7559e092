// The chunk loop that flat and tree allreduce (and reduce) share: the first step of each chunk.
#pragma once

#include <algorithm>
#include <cstring>

#include "host/shm.h"

namespace cclx {

/// For each chunk [off, off + m) of `count` elements of `es` bytes (one slot's worth, the last
/// shorter), in order: step s = nextStep() (1) copies the chunk of `in` into this rank's slot s,
/// (2) sync(s); then fn(off, m, s), which may read every rank's slot s (step (3)) and run further
/// steps of its own.
template <class Fn>
void forEachSyncedChunk(HostCtx& ctx, const void* in, size_t count, size_t es, Fn&& fn) {
  const size_t chunk = ctx.slotBytes() / es;
  for (size_t off = 0; off < count; off += chunk) {
    const size_t m = std::min(chunk, count - off);
    const uint64_t s = ctx.nextStep();
    std::memcpy(ctx.slot(ctx.rank, s), static_cast<const char*>(in) + off * es, m * es);
    ctx.sync(s);
    fn(off, m, s);
  }
}

}  // namespace cclx
