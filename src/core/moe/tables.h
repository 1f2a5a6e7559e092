// The routing tables of the CUDA dispatch kernel (gpu/moe/dispatch.cu) in shared memory: their
// size for a chunk of tokens, the chunk a buffer runs with, and how a launch's blocks share a
// batch (sendPlan). Pure rules on a Layout (CCLX_HD: also device code), so the CPU tests check
// them. docs/design/moe.md, "Dispatch".
//
// The kernel builds, per chunk of at most `chunk` tokens (a multiple of 32), one token bit mask
// per expert and per destination rank (the ids themselves stay in global memory: each token's
// warp reads its own); bases carry the counts of the tokens before the chunk (earlier chunks,
// earlier blocks' tiles). A token's position at rank d = base[d] + the chunk's tokens before it
// in d's mask: the positions of a one-pass routing (the CPU twin's), whatever the chunks. The
// masks are stored word-major, [W][R] with R = E + N columns (experts, then destination ranks):
// the 32 tokens of a word are one warp's, whose lanes write the word of several columns at once,
// and a column's count is one thread's sweep; in either case the lanes' words fall in different
// shared-memory banks.
#pragma once

#include <algorithm>
#include <cstddef>

#include "core/moe/layout.h"

namespace cclx {
namespace moe {

/// The dispatch kernel's shared memory (32-bit words from its start).
struct Tables {
  int chunk = 0, W = 0;  // tokens per chunk, words of a chunk's token bit mask (chunk / 32)
  int R = 0;             // mask columns: E experts, then N destination ranks
  size_t mask = 0, expBase = 0, destBase = 0;
  size_t base = 0, cnt = 0, ecTot = 0, words = 0;
};

CCLX_HD Tables tablesOf(const Layout& l, int chunk) {
  Tables s;
  s.chunk = chunk;
  s.W = chunk / 32;
  s.R = l.E + l.N;
  size_t at = 0;
  s.mask = at, at += size_t(s.R) * size_t(s.W);        // [W][R]: word w of column r
  s.expBase = at, at += size_t(l.E);                   // [E] tokens of the earlier chunks
  s.destBase = at, at += size_t(l.N);                  // [N] (right after expBase)
  s.base = at, at += size_t(l.E);                      // [L][N] first entry of (expert, source)
  s.cnt = at, at += size_t(l.N) + 1;                   // per source: tokens, then first slot
  s.ecTot = at, at += size_t(l.L) + 1;                 // per local expert: entries, then offset
  s.words = at;
  return s;
}

/// Bytes of the tables for chunks of `chunk` tokens.
inline size_t tableBytes(const Layout& l, int chunk) { return tablesOf(l, chunk).words * 4; }

/// The automatic chunk's tables at most. The kernel's registers allow one 512-thread block per
/// SM, so the tables may take most of its shared memory: a tile (sendPlan) of up to 4096 tokens
/// at 256 experts (~134 KiB) is then one chunk, built once; each further chunk of a tile costs
/// its block a second build between two barriers (measured: docs/design/moe.md, Performance).
constexpr size_t kAutoTableBytes = 144u << 10;

/// Tokens per chunk, a multiple of 32, at most B rounded up to 32: `want` rounded up (when > 0;
/// at most what fits `cap` bytes), else the most whose tables fit min(cap, kAutoTableBytes); 0
/// when not even 32 tokens' tables fit `cap` (no kernel for this layout).
inline int chunkFor(const Layout& l, int want, size_t cap) {
  const size_t least = tableBytes(l, 32);
  if (least > cap) return 0;
  const size_t per = tableBytes(l, 64) - least;  // the tables grow linearly, per 32 tokens
  auto fit = [&](size_t budget) {                // the most tokens whose tables fit `budget`
    return int(32 * (1 + std::min((budget - least) / per, size_t(1) << 15)));
  };
  const int all = (l.B + 31) / 32 * 32;
  if (want > 0) return std::min({all, (want + 31) / 32 * 32, fit(cap)});
  return std::min(all, fit(std::max(least, std::min(cap, kAutoTableBytes))));
}

/// Tokens whose tables every block of a launch builds whole: one round of a block's warps (16
/// warps of 32 tokens), about as long as one tile's build plus the exchange of the tiles' sums.
constexpr int kWholeBatchTokens = 512;

/// How the G blocks of a send launch share a batch of T tokens (tables of `chunk` tokens).
/// whole: every block builds the whole batch's tables (one chunk) and block 0 counts them for the
/// headers; the tokens are dealt round every warp of the grid. Otherwise tiles: `tiles` runs of
/// `tile` consecutive tokens (the last shorter), one per block in the order the blocks took their
/// tickets; a block builds and counts its own tile's tables only (in chunks when the tile is
/// longer than one), publishes the tile's column sums and adds up those of the tiles before it
/// (its bases); the block of the last tile, which holds every other tile's sums then, writes the
/// headers. A block waits only for blocks that took their tickets before it, so it never waits
/// for one that has not started.
struct SendPlan {
  bool whole = true;
  int tile = 0, tiles = 0;
};

CCLX_HD SendPlan sendPlan(int T, int chunk, int G) {
  SendPlan s;
  s.whole = T <= chunk && T <= kWholeBatchTokens;
  if (!s.whole) {
    s.tile = (T + G - 1) / G;
    s.tiles = (T + s.tile - 1) / s.tile;
  }
  return s;
}

}  // namespace moe
}  // namespace cclx
