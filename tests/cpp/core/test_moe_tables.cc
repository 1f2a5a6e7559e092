// core/moe/tables.h: the CUDA dispatch kernel's shared-memory routing tables and the chunk of
// tokens they cover, checked without a GPU: the chunk fits its budget and is the largest that
// does, a chunk asked for is rounded and bounded, the regions the kernel addresses in one sweep
// are adjacent, a layout whose smallest tables do not fit gets no kernel, and how a launch's
// blocks share a batch (whole or in tiles, a tile per block). Also, in core/moe/layout.h, the
// tile records (a sum per mask column, one record per block), the combine pieces (whole warp
// rounds that cover the row, as many as bring a round to kCombineItems work items, a flag each)
// and the dispatch pieces (whole 512-value quanta, as many as bring a batch to kDispatchItems).
#include <gtest/gtest.h>

#include <cstddef>

#include "core/moe/layout.h"
#include "core/moe/tables.h"

using namespace cclx;
using namespace cclx::moe;

namespace {

constexpr size_t kCap = 160u << 10;  // the CUDA build's cap (gpu/moe/moe.h kMaxSmem)

Layout lay(int N, int B, int E, int k) { return makeLayout(N, 0, B, 7168, E, k, 2, 2, true); }

}  // namespace

TEST(MoeTables, AutoChunkIsTheLargestThatFits) {
  for (int N : {1, 2, 3, 8})
    for (int B : {1, 31, 128, 1000, 4096, 65536})
      for (int E : {N, 8 * N, 256 - 256 % N, 1024 - 1024 % N})
        for (int k : {1, 8, 16}) {
          const Layout l = lay(N, B, E, k);
          const int c = chunkFor(l, 0, kCap);
          ASSERT_GT(c, 0) << N << " " << B << " " << E << " " << k;
          EXPECT_EQ(c % 32, 0);
          EXPECT_LE(c, (B + 31) / 32 * 32);
          EXPECT_LE(tableBytes(l, c), kAutoTableBytes) << c;
          if (c < (B + 31) / 32 * 32) {
            EXPECT_GT(tableBytes(l, c + 32), kAutoTableBytes) << c;  // the largest
          }
        }
}

TEST(MoeTables, PrefillShapeIsOneChunkLargerBatchesSeveral) {
  // 256 experts, top-8: a 4096-token batch's masks (~134 KiB) fit the automatic budget, so the
  // kernel builds them once; 8192 tokens' do not fit even the cap
  for (int N : {1, 8}) {
    EXPECT_EQ(chunkFor(lay(N, 4096, 256, 8), 0, kCap), 4096) << N;
    const Layout l = lay(N, 8192, 256, 8);
    EXPECT_GT(tableBytes(l, 8192), kCap);
    const int c = chunkFor(l, 0, kCap);
    EXPECT_GE(c, 4096);
    EXPECT_LT(c, 8192);
  }
  // decode: one chunk covers every token
  EXPECT_EQ(chunkFor(lay(8, 128, 256, 8), 0, kCap), 128);
  // HIP's 48 KiB: several chunks at 4096 tokens
  EXPECT_LT(chunkFor(lay(8, 4096, 256, 8), 0, 48u << 10), 4096);
}

TEST(MoeTables, ChunkAskedForIsRoundedAndBounded) {
  const Layout l = lay(8, 16384, 256, 8);  // more tokens than the cap's tables hold
  EXPECT_EQ(chunkFor(l, 1, kCap), 32);
  EXPECT_EQ(chunkFor(l, 33, kCap), 64);
  EXPECT_EQ(chunkFor(l, 100, kCap), 128);
  const int most = chunkFor(l, 1 << 20, kCap);  // beyond what fits: the most that fits the cap
  EXPECT_LE(tableBytes(l, most), kCap);
  EXPECT_GT(tableBytes(l, most + 32), kCap);
  EXPECT_GT(most, chunkFor(l, 0, kCap));  // the cap allows more than the automatic budget
  EXPECT_EQ(chunkFor(lay(2, 50, 16, 2), 4096, kCap), 64);  // at most B rounded up
}

TEST(MoeTables, RegionsSweptTogetherAreAdjacent) {
  const Layout l = lay(3, 300, 24, 5);
  const Tables t = tablesOf(l, 96);
  EXPECT_EQ(t.W, 3);
  EXPECT_EQ(t.R, 24 + 3);  // expert columns, then destination ranks'
  EXPECT_EQ(t.mask, 0u);
  EXPECT_EQ(t.expBase, t.mask + size_t(3) * (24 + 3));  // [W][E + N]
  EXPECT_EQ(t.destBase, t.expBase + 24);  // [E + N] bases
  EXPECT_EQ(t.base, t.destBase + 3);
  EXPECT_EQ(t.cnt, t.base + 24);
  EXPECT_EQ(t.ecTot, t.cnt + 4);
  EXPECT_EQ(t.words, t.ecTot + size_t(l.L) + 1);
}

TEST(MoeTables, NoKernelWhenNotEven32TokensFit) {
  const Layout l = lay(1, 128, 65536, 16);  // a mask word per expert alone is 256 KiB
  EXPECT_GT(tableBytes(l, 32), kCap);
  EXPECT_EQ(chunkFor(l, 0, kCap), 0);
  EXPECT_EQ(chunkFor(l, 32, kCap), 0);
  // a 48 KiB cap (the HIP build) still serves the anchors' shape, in smaller chunks
  const Layout a = lay(8, 4096, 256, 8);
  const int c = chunkFor(a, 0, 48u << 10);
  EXPECT_GT(c, 0);
  EXPECT_LE(tableBytes(a, c), size_t(48) << 10);
}

TEST(MoeTables, BatchesBeyondOneRoundAreTiledOneTilePerBlock) {
  // whole: every block builds the tables of at most one round of its warps, in one chunk
  EXPECT_TRUE(sendPlan(0, 4096, 128).whole);
  EXPECT_TRUE(sendPlan(1, 4096, 128).whole);
  EXPECT_TRUE(sendPlan(kWholeBatchTokens, 4096, 128).whole);
  EXPECT_FALSE(sendPlan(kWholeBatchTokens + 1, 4096, 128).whole);
  EXPECT_FALSE(sendPlan(300, 256, 64).whole);  // longer than a chunk
  // the prefill shape: a warp of tokens per block
  EXPECT_EQ(sendPlan(4096, 4096, 128).tile, 32);
  EXPECT_EQ(sendPlan(4096, 4096, 128).tiles, 128);
  for (int T : {300, 513, 1000, 4091, 4096, 65536, 100001})
    for (int G : {1, 2, 7, 64, 127, 128}) {
      const SendPlan s = sendPlan(T, 256, G);
      ASSERT_FALSE(s.whole);
      EXPECT_GE(s.tiles, 1) << T << " " << G;
      EXPECT_LE(s.tiles, G) << T << " " << G;  // a block each
      EXPECT_GE(size_t(s.tile) * s.tiles, size_t(T)) << T << " " << G;  // every token
      EXPECT_LT(size_t(s.tile) * (s.tiles - 1), size_t(T)) << T << " " << G;  // none empty
      EXPECT_LE(s.tile, (T + G - 1) / G) << T << " " << G;  // as even as the grid allows
    }
}

TEST(MoeLayout, TileRecordsHoldEveryColumn) {
  for (int N : {1, 3, 8})
    for (int E : {N, 24 * N, 256 - 256 % N}) {
      const Layout l = makeLayout(N, 0, 100, 70, E, 4, 2, 2, false);
      EXPECT_GE(l.tileBytes, 16 + 4 * size_t(E + N));
      EXPECT_EQ(l.tileBytes % 16, 0u);  // the sums read 16 bytes at a time
      EXPECT_EQ(l.tileAt(0), l.tileSums + 16);  // after the ticket
      EXPECT_EQ(l.tileAt(0) % 16, 0u);
      EXPECT_LE(l.tileAt(kGridCap - 1) + l.tileBytes, l.total);  // a record per block
      EXPECT_GE(l.tileSums, l.slotW + l.slots() * size_t(l.kk) * 4);  // after the other regions
    }
}

TEST(MoeLayout, CombineRowsInPieces) {
  struct Case {
    int N, B, H, esize, ring, parts, partUnits;
  };
  // H 7168 bf16: 896 units, 28 warp rounds; a 1024-row ring at B 4096: rounds of 256 tokens;
  // W * P aimed at 2048 items
  for (const Case c : {Case{1, 1, 7168, 2, 0, 28, 32}, Case{1, 128, 7168, 2, 0, 14, 64},
                       Case{8, 128, 7168, 2, 0, 14, 64}, Case{1, 1024, 7168, 2, 0, 2, 448},
                       Case{2, 4096, 7168, 2, 0, 1, 896}, Case{2, 4096, 7168, 2, 1024, 7, 128},
                       Case{3, 5, 33, 4, 0, 1, 32}, Case{1, 1, 1, 2, 0, 1, 32},
                       Case{2, 300, 4096, 4, 0, 7, 160}}) {
    const Layout l = makeLayout(c.N, 0, c.B, c.H, 8 * c.N, 2, 2, c.esize, false, c.ring);
    const size_t units = l.yRow / 16;
    EXPECT_EQ(l.yParts, c.parts) << c.B << " " << c.H;
    EXPECT_EQ(l.yPartUnits, size_t(c.partUnits)) << c.B << " " << c.H;
    EXPECT_EQ(l.yPartUnits % 32, 0u);
    EXPECT_LT(size_t(l.yParts - 1) * l.yPartUnits, units);  // every piece holds units
    EXPECT_GE(size_t(l.yParts) * l.yPartUnits, units);      // and together the whole row
    // a flag per (ring row, piece), inside the region before the rows
    const size_t Y = size_t(l.N) * size_t(l.ringRows);
    EXPECT_EQ(l.yflagAt(Y - 1, l.yParts - 1) + 8, l.yflags + Y * l.yParts * 8);
    EXPECT_LE(l.yflags + Y * l.yParts * 8, l.yrows);
  }
}

TEST(MoeLayout, DispatchRowsInPieces) {
  struct Case {
    int N, B, H, esize, parts, partVals;
  };
  // H 7168: 14 quanta of 512 values; B * pieces aimed at 1024
  for (const Case c : {Case{1, 1, 7168, 2, 14, 512}, Case{8, 128, 7168, 2, 7, 1024},
                       Case{1, 1024, 7168, 2, 1, 7168}, Case{2, 4096, 7168, 2, 1, 7168},
                       Case{2, 300, 4096, 4, 4, 1024}, Case{3, 5, 33, 4, 1, 512},
                       Case{1, 1, 1, 2, 1, 512}, Case{2, 1, 513, 2, 2, 512},
                       Case{2, 8, 1000, 4, 2, 512}, Case{4, 8, 1537, 2, 4, 512},
                       Case{3, 600, 1000, 2, 2, 512}, Case{1, 513, 7168, 2, 2, 3584},
                       // more pieces than a warp has lanes: the receive waits for them in
                       // groups of 32 (dispatch.cu, takeSlot)
                       Case{2, 8, 17000, 2, 34, 512}, Case{1, 1, 1 << 20, 2, 1024, 1024}}) {
    for (bool fp8 : {false, true}) {
      const Layout l = makeLayout(c.N, 0, c.B, c.H, 8 * c.N, 2, 2, c.esize, fp8);
      EXPECT_EQ(l.xParts, c.parts) << c.B << " " << c.H;
      EXPECT_EQ(l.xPartVals, c.partVals) << c.B << " " << c.H;
      EXPECT_EQ(l.xPartVals % kXPieceQuantum, 0);
      EXPECT_LT((l.xParts - 1) * l.xPartVals, c.H);  // every piece holds values
      EXPECT_GE(l.xParts * l.xPartVals, c.H);        // and together the whole row
      EXPECT_LE(l.xParts, (kDispatchItems + c.B - 1) / c.B);  // B * pieces near 1024, not past
      // a piece starts at a whole 16-byte unit of the row, in every dtype and FP8
      EXPECT_EQ(size_t(l.xPartVals) * size_t(c.esize) % 16, 0u);
      // a flag per (slot, piece), between the scales and the combine flags; none for 1 piece
      const size_t S = l.slots();
      EXPECT_GE(l.xflags, l.scales + (fp8 ? S * size_t(l.nb) * 4 : 0));
      if (l.xParts > 1) {
        EXPECT_EQ(l.xflagAt(S - 1, l.xParts - 1) + 8, l.xflags + S * size_t(l.xParts) * 8);
        EXPECT_LE(l.xflags + S * size_t(l.xParts) * 8, l.yflags);
      }
    }
  }
}

TEST(MoeLayout, CombineRingDoesNotGrowWithTheBatch) {
  struct Case {
    int B, ring, W, D;
  };
  for (const Case c : {Case{1, 0, 1, 1}, Case{1024, 0, 1024, 1}, Case{4096, 0, 4096, 1},
                       Case{4097, 0, 1024, 4}, Case{131072, 0, 1024, 4},
                       Case{131073, 0, 1025, 4}, Case{1 << 20, 0, 8192, 4},
                       Case{1025, 1024, 256, 4}, Case{4096, 1024, 256, 4},
                       Case{32768, 1024, 256, 4}, Case{32769, 1024, 257, 4},
                       Case{600, 128, 32, 4}, Case{600, 4, 5, 4}, Case{6, 4, 1, 4},
                       Case{6, 6, 6, 1}, Case{7, 5, 1, 4}, Case{4096, 1023, 255, 4}})
    for (int N : {1, 3, 8}) {
      const Layout l = makeLayout(N, N - 1, c.B, 7168, 8 * N, 8, 2, 2, false, c.ring);
      EXPECT_EQ(l.ringW, c.W) << c.B << " " << c.ring;
      EXPECT_EQ(l.ringD, c.D) << c.B << " " << c.ring;
      EXPECT_EQ(l.ringRows, c.W * c.D);
      EXPECT_EQ(l.maxRounds, (c.B + c.W - 1) / c.W);
      EXPECT_LE(l.maxRounds, kMaxRounds);
      EXPECT_LT(kMaxRounds, 1 << kRoundBits);
      // one round holds the whole batch, or the ring holds D rounds and B needs more of them
      if (c.D == 1) EXPECT_EQ(l.maxRounds, 1);
      else EXPECT_GT(l.maxRounds, l.ringD);
      // the rows: one ring per expert rank; every token of the batch has a row of its own in
      // its round and the D - 1 rounds after it
      EXPECT_EQ(l.yrows - l.yflags >= size_t(N) * l.ringRows * l.yParts * 8, true);
      EXPECT_LE(l.yrowAt(size_t(N) * l.ringRows), l.peerEnd);
      for (int t : {0, c.B / 2, c.B - 1}) {
        EXPECT_EQ(l.ySlot(N - 1, t), size_t(N - 1) * l.ringRows + size_t(t % l.ringRows));
        for (int u = t + 1; u < c.B && l.roundOf(u) < l.roundOf(t) + l.ringD; ++u)
          ASSERT_NE(l.ySlot(0, u), l.ySlot(0, t)) << c.B << " " << t << " " << u;
      }
      // credits: one per (owner, round in flight); arrivals: one per round (ring only)
      EXPECT_EQ(l.ringCreditAt(N - 1, l.ringD + 1) + 8,
                l.ringCredits + (size_t(N - 1) * l.ringD + 1 % l.ringD + 1) * 8);
      EXPECT_LE(l.ringCredits + size_t(N) * l.ringD * 8, l.heads);
      if (c.D > 1) EXPECT_LE(l.ringArrive + size_t(l.maxRounds) * 8, l.tileSums);
      // flags increase with the call, then the round, and never collide across calls
      EXPECT_LT(roundFlag(5, l.maxRounds - 1), roundFlag(6, 0));
      EXPECT_LT(roundFlag(6, 0), roundFlag(6, 1));
    }
  // B 4096, H 7168, bf16, 8 ranks, a 1024-row ring: the combine rows are 1024 per expert
  // rank, not 4096
  const Layout big = makeLayout(8, 0, 4096, 7168, 256, 8, 2, 2, false, 1024);
  const Layout small = makeLayout(8, 0, 1024, 7168, 256, 8, 2, 2, false, 1024);
  EXPECT_EQ(big.ringRows, 1024);
  EXPECT_EQ(big.yrowAt(0) + 8 * 1024 * big.yRow, small.yrowAt(0) + 8 * 1024 * small.yRow +
                                                        (big.yrows - small.yrows));
}
