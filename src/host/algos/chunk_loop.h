// The chunk loops the host algorithms share: the first step of each chunk (flat and tree
// allreduce, reduce, all-gather) and the exchange of per-rank blocks (all-to-all, reduce-scatter).
#pragma once

#include <algorithm>
#include <cstring>

#include "host/shm.h"

namespace cclx {

/// For each piece [off, off + m) of `total` units, `per` units a step (the last shorter), in
/// order: fn(off, m, s) with s = nextStep().
template <class Fn>
void forEachStep(HostCtx& ctx, size_t total, size_t per, Fn&& fn) {
  for (size_t off = 0; off < total; off += per) fn(off, std::min(per, total - off), ctx.nextStep());
}

/// For each chunk [off, off + m) of `count` elements of `es` bytes (one slot's worth, the last
/// shorter), in order: step s = nextStep() (1) copies the chunk of `in` into this rank's slot s,
/// (2) sync(s); then fn(off, m, s), which may read every rank's slot s (step (3)) and run further
/// steps of its own.
template <class Fn>
void forEachSyncedChunk(HostCtx& ctx, const void* in, size_t count, size_t es, Fn&& fn) {
  forEachStep(ctx, count, ctx.slotBytes() / es, [&](size_t off, size_t m, uint64_t s) {
    std::memcpy(ctx.slot(ctx.rank, s), static_cast<const char*>(in) + off * es, m * es);
    ctx.sync(s);
    fn(off, m, s);
  });
}

/// Per-rank blocks through the slots, as all-to-all and reduce-scatter move them: for each piece
/// [off, off + m) of `count` elements of `es` bytes (a slot holds that piece of every block), this
/// rank copies the piece of its block b, which starts at src(b, off), for every rank b into its
/// slot, syncs, then calls fn(off, m, from): from(p) is rank p's piece of this rank's block.
template <class Src, class Fn>
void exchangeBlocks(HostCtx& ctx, size_t count, size_t es, Src&& src, Fn&& fn) {
  const size_t chunk = ctx.slotBytes() / es / size_t(ctx.size);
  forEachStep(ctx, count, chunk, [&](size_t off, size_t m, uint64_t s) {
    char* mine = ctx.slot(ctx.rank, s);
    for (int b = 0; b < ctx.size; ++b)
      std::memcpy(mine + size_t(b) * chunk * es, src(b, off), m * es);
    ctx.sync(s);
    fn(off, m, [&](int p) -> const char* { return ctx.slot(p, s) + size_t(ctx.rank) * chunk * es; });
  });
}

}  // namespace cclx
