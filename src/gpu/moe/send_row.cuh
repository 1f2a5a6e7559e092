// Step 5 of the MoE dispatch (dispatch.cu): one piece of a token's row, copied by one warp into
// every destination rank's receive slot, FP8-quantized in registers when the buffer says so
// (cclx's block codec through fp8/device.cuh: the host codec's bits). A piece is a run of whole
// 512-value quanta of the row (core/moe/layout.h, xParts), so an FP8 scale block never straddles
// two pieces and every piece starts at a whole 16-byte unit.
#pragma once

#include "gpu/moe/common.cuh"

namespace cclx {
namespace moegpu {

/// Step 5's row copy (the whole warp): values [v0, v1) of token t's row (v0 a multiple of 512),
/// FP8-quantized in registers when kFp8, into the slot at pos[d] of every destination rank d
/// with pos[d] >= 0.
template <class T, bool kFp8>
__device__ void sendPiece(const Params& p, const int (&pos)[kMaxRanks], int t, int v0, int v1) {
  const moe::Layout& l = p.lay;
  const int me = l.rank, lane = dev::laneId();
  const char* xrow = p.x + size_t(t) * size_t(l.H) * sizeof(T);
  if constexpr (kFp8) {
    // 512 values per round: 16 a lane, a 128-value block per 8 lanes (the round count is
    // warp-uniform: the codec's shuffles need every lane). Aligned rows of whole 16-value
    // pieces load the next round's raw bytes before this round's quantization (two rounds in
    // flight; the same values as load16, zeros past the row).
    using V = fp8dev::Vec<T>;
    const int c0 = v0 / 512, c1 = (v1 + 511) / 512;
    const bool fast = l.H % 16 == 0 && rowsAligned(p.x, size_t(l.H) * sizeof(T));
    uint4 next[V::kLoads];
    auto fetch = [&](int c) {
      const int i0 = c * 512 + lane * 16;
      const uint4* src = reinterpret_cast<const uint4*>(xrow + size_t(i0) * sizeof(T));
#pragma unroll
      for (int i = 0; i < V::kLoads; ++i) next[i] = i0 < l.H ? src[i] : make_uint4(0, 0, 0, 0);
    };
    if (fast) fetch(c0);
    for (int c = c0; c < c1; ++c) {
      const int i0 = c * 512 + lane * 16;
      float v[fp8dev::kEPT];
      if (fast) {
        uint4 cur[V::kLoads];
#pragma unroll
        for (int i = 0; i < V::kLoads; ++i) cur[i] = next[i];
        if (c + 1 < c1) fetch(c + 1);
        fp8dev::unpack16<T>(cur, v);
      } else {
        const int avail = l.H - i0;  // unclamped: fp8dev::load16 says why
        fp8dev::load16<T>(reinterpret_cast<const T*>(xrow), size_t(avail > 0 ? i0 : 0), avail, v);
      }
      fp8::Meta meta;
      const uint4 codes = fp8dev::quantize16(v, moe::kScaleBlock / fp8dev::kEPT, meta);
      const int b = c * (512 / moe::kScaleBlock) + (lane >> 3);
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d) {
        if (pos[d] < 0) continue;
        const size_t slot = size_t(me) * l.B + size_t(pos[d]);
        if (size_t(i0) < l.xRow)
          *reinterpret_cast<uint4*>(p.peer[d] + l.xrowAt(slot) + size_t(i0)) = codes;
        if ((lane & 7) == 0 && b < l.nb)
          *reinterpret_cast<uint32_t*>(p.peer[d] + l.scaleAt(slot) + 4 * size_t(b)) = meta;
      }
    }
  } else {
    const size_t bytes = size_t(l.H) * sizeof(T), units = (bytes + 15) / 16;
    const size_t lo = size_t(v0) * sizeof(T) / 16;
    const size_t hi = min(units, (size_t(v1) * sizeof(T) + 15) / 16);  // the piece: [lo, hi)
    auto put = [&](size_t u, uint4 x) {
#pragma unroll
      for (int d = 0; d < kMaxRanks; ++d) {
        if (pos[d] < 0) continue;
        const size_t slot = size_t(me) * l.B + size_t(pos[d]);
        *reinterpret_cast<uint4*>(p.peer[d] + l.xrowAt(slot) + 16 * u) = x;
      }
    };
    if (rowsAligned(p.x, bytes)) {  // whole aligned units: kCopyBatch loads in flight a lane
      const uint4* src = reinterpret_cast<const uint4*>(xrow);
      for (size_t u0 = lo + size_t(lane); u0 < hi; u0 += 32 * kCopyBatch) {
        uint4 x[kCopyBatch];
#pragma unroll
        for (int i = 0; i < kCopyBatch; ++i)
          if (u0 + 32 * i < hi) x[i] = src[u0 + 32 * i];
#pragma unroll
        for (int i = 0; i < kCopyBatch; ++i)
          if (u0 + 32 * i < hi) put(u0 + 32 * i, x[i]);
      }
    } else {
      for (size_t u = lo + size_t(lane); u < hi; u += 32)
        put(u, loadUserUnit(xrow, u, unitValid(bytes, u)));
    }
  }
}

}  // namespace moegpu
}  // namespace cclx
