// The memory layout and the routing rules of an expert-parallel buffer (cclx::MoeBuffer,
// include/cclx/moe.hpp), shared by its two engines: the CUDA kernels (gpu/moe) and the CPU twin
// (host/moe.cc). Both read and write exactly these bytes, so the CPU tests check the protocol and
// the layout the kernels use. Plain C++ (CCLX_HD: also device code). docs/design/moe.md.
//
// Names: N ranks, B = max tokens per rank, H hidden, E experts, L = E / N per rank (rank r holds
// experts r*L .. r*L+L-1), k top-k slots, kk = min(k, L) local experts a token can have on one
// rank, nb = ceil(H / 128) FP8 scales per row, C = N*B*kk entries.
//
// One allocation per rank, the same layout on every rank. The first part is written by peers
// (every rank maps every other rank's), the rest only by this rank:
//
//   peer-written (the rank-major receive side):
//   credits   uint64 [2][N]      [0][d]: rank d's grant "my dispatch slots for you are free for
//                                call e" (value e + 1); [1][d]: the same for the combine slots
//   ringCredits uint64 [N][D]    [d][r % D]: owner d has consumed round r of combine call c
//                                (value roundFlag(c + 1, r)); used when the ring has D > 1 rounds
//   heads     [N] header records  from source s: tokens s sends here and per local expert counts
//   metas     [N*B] slot records  [s*B + p]: the p-th token source s sends here (its top-k)
//   xrows     [N*B] rows          its data (H values of the dtype, or H FP8 e4m3 codes)
//   scales    f32 [N*B][nb]      FP8 only: the codec's block metas (a scale, sign bit = INF block)
//   xflags    uint64 [N*B][Px]   [slot][q], q >= 1: piece q of the slot's row has arrived (e + 1);
//                                Px = xParts pieces of xPartVals values (a multiple of 512; the
//                                last one shorter), each sent by a warp of its own so that a
//                                decode batch's rows spread over many warps; piece 0 travels with
//                                the slot record, under its flag (no region when Px = 1)
//   yflags    uint64 [N*Rr][P]   [ySlot(d, t)][q]: piece q of expert rank d's combine row for
//                                this rank's token t has arrived (value roundFlag(c + 1, round of
//                                t)); P = yParts pieces of yPartUnits 16-byte units (the last one
//                                shorter): combine's work items, so that a small batch still
//                                spreads over many warps
//   yrows     [N*Rr] rows         those rows (H values of the dtype): the combine ring. Rr =
//                                ringRows rows per expert rank, token t in row t % Rr. When B <=
//                                Rr it holds a whole batch (one round); else the combine runs in
//                                rounds of ringW tokens, D = ringD of them in the ring at once,
//                                and a round's rows are written only once the owner has consumed
//                                the round D before (ringCredits)
//   local:
//   counters  uint64 [2][kMaxBlocks] dispatch / combine calls, one per block of the grid
//   ctl       4 KiB              control words of a single-rank buffer (no comm peer memory)
//   tokRows   int32 [B][k]       combine's owner side: slot j of token t: d*B + p for the first
//                                slot of each destination rank d (p: the token's position there),
//                                -1 for the other slots, -2 for an expert id out of range
//   tokIds    int32 [B][k], tokW f32 [B][k]: the routing of the last dispatch (cached mode)
//   recvCounts    int32 [N]      tokens received from each source
//   expertCounts  int32 [L]      entries of each local expert
//   expertOffsets int32 [L+1]    exclusive prefix sums of expertCounts
//   entryRows     int32 [C]      entry i (expert-major: local expert, then source rank, then the
//                                source's token order): its row s*B + p of xrows
//   slotEntries   int32 [N*B][kk] the entries of received slot s*B + p in top-k order (-1 pad)
//   slotW         f32 [N*B][kk]  their weights (a repeated expert's weights summed in order)
//   ringArrive uint64 [maxRounds] how many of combine's blocks have consumed round r (the CUDA
//                 kernel's; 0 between calls: the last of the grid resets it and grants the
//                 round's credit)
//   tileSums      the CUDA dispatch's tiles (core/moe/tables.h, sendPlan): [0] uint64 ticket
//                 (each block of a tiled send launch takes one: its tile), then kGridCap
//                 records of tileBytes: [0] uint64 flag (e + 1), [16 + 4r] int32 the tile's
//                 tokens in mask column r (E experts, then N destination ranks)
//
// Records (offsets in bytes; flag words are written last, with release ordering):
//   slot record  [0] uint64 flag (e + 1), [8] int32 token index t at the source, [12] int32 0,
//                [16 + 4j] int32 id_j (-1: out of range), [16 + 4k + 4j] f32 w_j,
//                [16 + 8k + 4j] int32 pos_j: for the first slot of a valid expert id, how many
//                earlier tokens of the source chose that expert; -1 otherwise
//   header       [0] uint64 flag (e + 1), [8] int32 tokens to this rank, [12] int32 0,
//                [16 + 4l] int32 tokens of the source for local expert l
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/elements/dtype_math.h"
#include "core/elements/fp8_codec.h"

namespace cclx {
namespace moe {

constexpr int kScaleBlock = 128;   // FP8 values per scale (the codec's block)
constexpr int kMaxTopK = 16;
constexpr int kGridCap = 128;      // blocks of a kernel at most (counters per block)
constexpr size_t kCtlBytes = 4096;
constexpr int kCombineItems = 2048;  // owner-side combine work items aimed at (ringW * yParts):
                                     // a warp each on a grid of kGridCap blocks of 16 warps
constexpr int kDispatchItems = 1024;  // dispatch send items aimed at (B * xParts)
constexpr int kXPieceQuantum = 512;   // values: a dispatch piece holds whole multiples (FP8: a
                                      // warp's round of quantization, 16 values a lane)
constexpr int kRingTokens = 4096;    // default combine ring: rows per expert rank (ringRows)
constexpr int kRingDepth = 4;        // rounds of a ring in flight (ringD) when B > ringRows
constexpr int kMaxRounds = 128;      // rounds of one combine at most (ringW grows beyond)
constexpr int kRoundBits = 16;       // roundFlag: the round in the low bits (kMaxRounds < 2^16)

/// The value of the flags of round r of the combine call whose call flag is `flag` (c + 1):
/// increasing with the call, then the round.
CCLX_HD uint64_t roundFlag(uint64_t flag, int r) {
  return ((flag - 1) << kRoundBits) | uint64_t(r + 1);
}

CCLX_HD size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct Layout {
  int N = 1, rank = 0;
  int B = 0, H = 0, E = 0, L = 0, k = 0, kk = 0, esize = 2, nb = 0;
  int dtype = 0;  // the DataType of tokens, expert outputs and combine output
  bool fp8 = false;
  size_t xRow = 0, yRow = 0, metaBytes = 0, headBytes = 0;
  int yParts = 1;          // pieces of a combine row, each with its own flag
  int xParts = 1;          // pieces of a dispatch row: piece 0 under the record's flag
  int xPartVals = 0;       // values of a dispatch piece: a multiple of kXPieceQuantum
  int ringW = 0, ringD = 1;  // combine ring: tokens per round, rounds in flight
  int ringRows = 0;          // rows per expert rank: ringW * ringD
  int maxRounds = 0;         // ceil(B / ringW)
  size_t yPartUnits = 0;   // 16-byte units of a piece: a multiple of 32 (a warp's round)
  size_t credits = 0, ringCredits = 0, heads = 0, metas = 0, xrows = 0, scales = 0, xflags = 0;
  size_t yflags = 0, yrows = 0;
  size_t peerEnd = 0;
  size_t counters = 0, ctl = 0, tokRows = 0, tokIds = 0, tokW = 0, recvCounts = 0;
  size_t expertCounts = 0, expertOffsets = 0, entryRows = 0, slotEntries = 0, slotW = 0;
  size_t ringArrive = 0, tileSums = 0, tileBytes = 0;
  size_t total = 0;

  CCLX_HD size_t entries() const { return size_t(N) * size_t(B) * size_t(kk); }
  CCLX_HD size_t slots() const { return size_t(N) * size_t(B); }
  CCLX_HD size_t metaAt(size_t slot) const { return metas + slot * metaBytes; }
  CCLX_HD size_t xrowAt(size_t slot) const { return xrows + slot * xRow; }
  CCLX_HD size_t scaleAt(size_t slot) const { return scales + slot * size_t(nb) * 4; }
  /// Piece q >= 1 of the row of `slot`: its flag.
  CCLX_HD size_t xflagAt(size_t slot, int q) const {
    return xflags + (slot * size_t(xParts) + size_t(q)) * 8;
  }
  CCLX_HD size_t yrowAt(size_t slot) const { return yrows + slot * yRow; }
  /// The combine ring slot of token t (of the owner) from expert rank d; t's round.
  CCLX_HD size_t ySlot(int d, int t) const {
    return size_t(d) * size_t(ringRows) + size_t(t % ringRows);
  }
  CCLX_HD int roundOf(int t) const { return t / ringW; }
  CCLX_HD size_t ringCreditAt(int owner, int r) const {
    return ringCredits + (size_t(owner) * size_t(ringD) + size_t(r % ringD)) * 8;
  }
  CCLX_HD size_t yflagAt(size_t slot, int part) const {
    return yflags + (slot * size_t(yParts) + size_t(part)) * 8;
  }
  CCLX_HD size_t headAt(int src) const { return heads + size_t(src) * headBytes; }
  CCLX_HD size_t creditAt(int kind, int from) const { return credits + (size_t(kind) * N + from) * 8; }
  CCLX_HD size_t tileAt(int v) const { return tileSums + 16 + size_t(v) * tileBytes; }
  // the fields of a slot record
  CCLX_HD size_t recId(int j) const { return 16 + 4 * size_t(j); }
  CCLX_HD size_t recW(int j) const { return 16 + 4 * size_t(k) + 4 * size_t(j); }
  CCLX_HD size_t recPos(int j) const { return 16 + 8 * size_t(k) + 4 * size_t(j); }
};

/// The layout of a buffer: N ranks (this one `rank`), B tokens per rank at most, hidden H, E
/// experts, top-k, the tokens' DataType `dtype` of `esize` bytes, FP8 on the wire or not, a
/// combine ring of `ring` rows per expert rank (0: kRingTokens). Arguments are validated by the
/// caller (MoeBuffer::create).
inline Layout makeLayout(int N, int rank, int B, int H, int E, int k, int dtype, int esize,
                         bool fp8, int ring = 0) {
  Layout l;
  l.N = N, l.rank = rank, l.B = B, l.H = H, l.E = E, l.L = E / N, l.k = k, l.esize = esize;
  l.dtype = dtype;
  l.kk = k < l.L ? k : l.L;
  l.fp8 = fp8;
  l.nb = (H + kScaleBlock - 1) / kScaleBlock;
  l.xRow = alignUp(fp8 ? size_t(H) : size_t(H) * esize, 16);
  l.yRow = alignUp(size_t(H) * esize, 16);
  l.metaBytes = alignUp(16 + 12 * size_t(k), 16);
  l.headBytes = alignUp(16 + 4 * size_t(l.L), 16);
  l.tileBytes = 16 + alignUp(4 * (size_t(E) + size_t(N)), 16);
  // the combine ring: a whole batch when it fits, else rounds of ringW tokens, ringD at once
  if (ring <= 0) ring = kRingTokens;
  if (B <= ring) {
    l.ringW = B > 0 ? B : 1, l.ringD = 1;
  } else {
    const int byRing = ring / kRingDepth;  // ringRows <= ring < B: more than D rounds
    const int byRounds = (B + kMaxRounds - 1) / kMaxRounds;
    l.ringW = byRing > byRounds ? byRing : byRounds, l.ringD = kRingDepth;
  }
  l.ringRows = l.ringW * l.ringD;
  l.maxRounds = (B + l.ringW - 1) / l.ringW;
  // combine rows in pieces of whole warp rounds (32 units), as many as bring a round's tokens *
  // pieces to kCombineItems: a decode batch's rows spread over the GPU, a prefill's stay longer
  const size_t units = l.yRow / 16, rounds = (units + 31) / 32;
  const size_t want = (size_t(kCombineItems) + size_t(l.ringW) - 1) / size_t(l.ringW);
  const size_t parts = want < 1 ? 1 : want > rounds ? rounds : want;
  l.yPartUnits = alignUp((units + parts - 1) / parts, 32);
  l.yParts = int((units + l.yPartUnits - 1) / l.yPartUnits);
  // dispatch rows in pieces of whole 512-value quanta, as many as bring B * pieces to
  // kDispatchItems (a decode batch's tokens on several warps each; a prefill's on one)
  const size_t quanta = (size_t(H) + kXPieceQuantum - 1) / kXPieceQuantum;
  const size_t xwant = (size_t(kDispatchItems) + size_t(B > 0 ? B : 1) - 1) / size_t(B > 0 ? B : 1);
  const size_t xp = xwant < 1 ? 1 : xwant > quanta ? quanta : xwant;
  l.xPartVals = int((quanta + xp - 1) / xp) * kXPieceQuantum;
  l.xParts = (H + l.xPartVals - 1) / l.xPartVals;
  const size_t S = l.slots(), Y = size_t(N) * size_t(l.ringRows);
  size_t at = 0;
  auto take = [&](size_t& field, size_t bytes) {
    field = at;
    at = alignUp(at + bytes, 256);
  };
  take(l.credits, 2 * size_t(N) * 8);
  take(l.ringCredits, size_t(N) * size_t(l.ringD) * 8);
  take(l.heads, size_t(N) * l.headBytes);
  take(l.metas, S * l.metaBytes);
  take(l.xrows, S * l.xRow);
  take(l.scales, fp8 ? S * size_t(l.nb) * 4 : 0);
  take(l.xflags, l.xParts > 1 ? S * size_t(l.xParts) * 8 : 0);
  take(l.yflags, Y * size_t(l.yParts) * 8);
  take(l.yrows, Y * l.yRow);
  l.peerEnd = at;
  take(l.counters, 2 * size_t(kGridCap) * 8);
  take(l.ctl, kCtlBytes);
  take(l.tokRows, size_t(B) * k * 4);
  take(l.tokIds, size_t(B) * k * 4);
  take(l.tokW, size_t(B) * k * 4);
  take(l.recvCounts, size_t(N) * 4);
  take(l.expertCounts, size_t(l.L) * 4);
  take(l.expertOffsets, size_t(l.L + 1) * 4);
  take(l.entryRows, l.entries() * 4);
  take(l.slotEntries, S * size_t(l.kk) * 4);
  take(l.slotW, S * size_t(l.kk) * 4);
  take(l.ringArrive, l.ringD > 1 ? size_t(l.maxRounds) * 8 : 0);
  take(l.tileSums, 16 + size_t(kGridCap) * l.tileBytes);
  l.total = at;
  return l;
}

// ---- routing rules (the same on both engines) ----

/// The normalized expert id of a top-k entry: the id when 0 <= id < E, else -1.
CCLX_HD int32_t normId(int64_t id, int E) { return id >= 0 && id < E ? int32_t(id) : -1; }

/// True when slot j of `ids` (k normalized ids) holds a valid id that no earlier slot holds: the
/// slot that carries the expert (a repeated expert counts once, its weights summed in slot order).
CCLX_HD bool firstOfExpert(const int32_t* ids, int j) {
  if (ids[j] < 0) return false;
  for (int i = 0; i < j; ++i)
    if (ids[i] == ids[j]) return false;
  return true;
}

/// True when slot j holds the first valid id of its destination rank among the token's slots.
CCLX_HD bool firstOfRank(const int32_t* ids, int j, int L) {
  if (ids[j] < 0) return false;
  for (int i = 0; i < j; ++i)
    if (ids[i] >= 0 && ids[i] / L == ids[j] / L) return false;
  return true;
}

/// The summed weight of the expert in slot j (a first slot): w_j, then the later slots of the
/// same id added in slot order, each an f32 addition rounded once.
CCLX_HD float expertWeight(const int32_t* ids, const float* w, int j, int k) {
  float s = w[j];
  for (int i = j + 1; i < k; ++i)
    if (ids[i] == ids[j]) s = fp8::addRn(s, w[i]);
  return s;
}

}  // namespace moe
}  // namespace cclx
