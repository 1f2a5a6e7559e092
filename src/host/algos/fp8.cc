// FP8 (e4m3, per-block scales) collectives on the host shared-memory transport: the CPU twin of
// src/gpu/fp8/*.cu. Same codec (fp8_codec.h), same block alignment, same reduction order
// (ranks 0..N-1, float accumulation, AVG divides the float sum by N before the final rounding),
// so the results are bitwise equal to the GPU kernels' for the same inputs.
//
// Each collective runs in chunks of whole blocks that fit the transport's step slot. Per chunk:
//   AllReduce      step 1: quantize the chunk into the own slot; every rank reduces its shard of
//                  blocks (shardBlocks) from all slots and requantizes it into the own slot of
//                  step 2; step 2: every rank dequantizes all shards into the output.
//   AllReduce      one-shot (HostFp8OneShot, the twin of gpu/fp8/oneshot.cu): quantize the chunk into
//                  the own slot; every rank reduces every block from all slots (one step).
//   AllGather      quantize the own chunk; dequantize every rank's chunk into its output segment.
//   ReduceScatter  quantize the N destination segments; reduce segment `rank` from all slots.
//   AllToAll       quantize the N destination segments; dequantize segment `rank` of each slot.
// A chunk's input is fully read before any of its output is written, so in-place calls work.
#include <algorithm>
#include <cstring>
#include <vector>

#include "host/algos/algos.h"
#include "core/elements/fp8_codec.h"
#include "base/error.h"
#include "host/shm.h"

namespace cclx {
namespace {

float loadF(const void* p, DataType dt, size_t i) {
  switch (dt) {
    case DataType::f32: return static_cast<const float*>(p)[i];
    case DataType::bf16: return math::bf16ToF32(static_cast<const uint16_t*>(p)[i]);
    default: return math::f16ToF32(static_cast<const uint16_t*>(p)[i]);
  }
}
void storeF(void* p, DataType dt, size_t i, float v) {
  switch (dt) {
    case DataType::f32: static_cast<float*>(p)[i] = v; break;
    case DataType::bf16: static_cast<uint16_t*>(p)[i] = math::f32ToBf16(v); break;
    default: static_cast<uint16_t*>(p)[i] = math::f32ToF16(v); break;
  }
}

/// View of a packed run of nb blocks (fp8_codec.h layout).
struct Packed {
  uint8_t* codes;
  fp8::Meta* metas;
  Packed(void* base, size_t nb, int B)
      : codes(static_cast<uint8_t*>(base)),
        metas(reinterpret_cast<fp8::Meta*>(static_cast<char*>(base) + fp8::metaOffset(nb, B))) {}
};

/// Quantizes blocks [b0, b1) of `src` (n valid elements in total, block i covers elements
/// [i*B, i*B + B)) into packed blocks [b0 - base, ...) of `dst`.
void quantizeBlocks(const void* src, DataType dt, size_t n, int B, size_t b0, size_t b1,
                    Packed dst, size_t base) {
  float tmp[fp8::kMaxBlock];
  for (size_t b = b0; b < b1; ++b) {
    size_t e0 = b * size_t(B), len = std::min(n - e0, size_t(B));
    for (size_t j = 0; j < len; ++j) tmp[j] = loadF(src, dt, e0 + j);
    dst.metas[b - base] = fp8::quantizeBlock(tmp, int(len), B, dst.codes + (b - base) * B);
  }
}

/// Dequantizes packed blocks into dst elements [b*B, ...) for b in [b0, b1).
void dequantizeBlocks(Packed src, size_t base, size_t b0, size_t b1, int B, size_t n, void* dst,
                      DataType dt) {
  float tmp[fp8::kMaxBlock];
  for (size_t b = b0; b < b1; ++b) {
    size_t e0 = b * size_t(B), len = std::min(n - e0, size_t(B));
    fp8::dequantizeBlock(src.codes + (b - base) * B, src.metas[b - base], int(len), tmp);
    for (size_t j = 0; j < len; ++j) storeF(dst, dt, e0 + j, tmp[j]);
  }
}

/// Reduces block b (elements of segment length n) over ranks 0..N-1 from packed views in[p]
/// into tmp (float), AVG applied.
void reduceBlock(const std::vector<Packed>& in, size_t base, size_t b, int B, size_t n,
                 RedOpKind op, float* tmp) {
  size_t len = std::min(n - b * size_t(B), size_t(B));
  int N = int(in.size());
  for (int p = 0; p < N; ++p) {
    const Packed& pk = in[p];
    fp8::Meta meta = pk.metas[b - base];
    float d = fp8::metaDequantMul(meta);
    bool inf = (meta & fp8::kMetaInf) != 0;
    const uint8_t* c = pk.codes + (b - base) * B;
    for (size_t j = 0; j < len; ++j) {
      float v = fp8::decode(c[j], d, inf);
      tmp[j] = p == 0 ? v : fp8::addRn(tmp[j], v);
    }
  }
  if (op == RedOpKind::AVG)
    for (size_t j = 0; j < len; ++j) tmp[j] = fp8::divRn(tmp[j], float(N));
}

/// reduceBlock of block b, stored as the output's elements [b * B, ...).
void reduceStore(const std::vector<Packed>& in, size_t base, size_t b, int B, size_t n,
                 RedOpKind op, void* out, DataType dt) {
  float tmp[fp8::kMaxBlock];
  reduceBlock(in, base, b, B, n, op, tmp);
  const size_t len = std::min(n - b * size_t(B), size_t(B));
  for (size_t j = 0; j < len; ++j) storeF(out, dt, b * B + j, tmp[j]);
}

/// Quantizes blocks [c0, c0 + nb) of the input into this rank's slot of `step`, waits for every
/// rank's, and returns views of all ranks' slots (rank order).
std::vector<Packed> quantizeAndShare(const CollArgs& a, HostCtx& ctx, size_t c0, size_t nb,
                                     uint64_t step) {
  const int B = ctx.cfg.fp8BlockSize;
  quantizeBlocks(a.send, a.dtype, a.count, B, c0, c0 + nb, Packed(ctx.slot(ctx.rank, step), nb, B),
                 c0);
  ctx.sync(step);
  std::vector<Packed> in;
  for (int p = 0; p < ctx.size; ++p) in.emplace_back(ctx.slot(p, step), nb, B);
  return in;
}

/// Quantizes blocks [c0, c0 + nb) of each destination segment r = 0..N-1 (starting at seg(r))
/// into packed run r of this rank's slot of `step`, waits for every rank's, and returns views of
/// run `rank` of all ranks' slots (rank order): what every rank sent to this one.
template <class Seg>
std::vector<Packed> quantizeSegmentsAndShare(const CollArgs& a, HostCtx& ctx, size_t c0, size_t nb,
                                             uint64_t step, Seg seg) {
  const int B = ctx.cfg.fp8BlockSize;
  const size_t run = fp8::packedBytes(nb, B);
  for (int r = 0; r < ctx.size; ++r)
    quantizeBlocks(seg(r), a.dtype, a.count, B, c0, c0 + nb,
                   Packed(ctx.slot(ctx.rank, step) + r * run, nb, B), c0);
  ctx.sync(step);
  std::vector<Packed> in;
  for (int p = 0; p < ctx.size; ++p) in.emplace_back(ctx.slot(p, step) + ctx.rank * run, nb, B);
  return in;
}

bool fp8TypeOk(const CollArgs& a) {
  return a.dtype == DataType::f32 || a.dtype == DataType::bf16 || a.dtype == DataType::f16;
}
bool blockOk(int B) { return B >= fp8::kMinBlock && B <= fp8::kMaxBlock && (B & (B - 1)) == 0; }

/// Largest number of blocks per chunk so that `regions` packed runs fit one slot.
size_t chunkBlocks(size_t slotBytes, int regions, int B) {
  size_t nb = slotBytes / size_t(regions) / size_t(B + 2);
  while (nb > 0 && fp8::packedBytes(nb, B) * size_t(regions) > slotBytes) --nb;
  return nb;
}

const char* segPtr(const void* base, size_t count, DataType dt, int r) {
  return static_cast<const char*>(base) + size_t(r) * count * dtypeSize(dt);
}

class HostFp8Base : public HostAlgo {
 public:
  HostFp8Base(CollType t, int regions) : type_(t), regions_(regions) {}
  bool canRun(const CollArgs& a, const HostCtx& ctx) const override {
    if (a.type != type_ || !fp8TypeOk(a) || !a.recvList.empty() || !a.sendList.empty())
      return false;
    if ((type_ == CollType::AllReduce || type_ == CollType::ReduceScatter) &&
        a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG)
      return false;
    int B = ctx.cfg.fp8BlockSize;
    return blockOk(B) && chunkBlocks(ctx.slotBytes(), regions(ctx), B) > 0;
  }

 protected:
  int regions(const HostCtx& ctx) const { return regions_ < 0 ? ctx.size : regions_; }
  /// Calls fn(c0, nb) for each chunk, in order: blocks [c0, c0 + nb) of the a.count elements, as
  /// many whole blocks as fit one slot with regions(ctx) packed runs.
  template <class Fn>
  void forEachChunk(const CollArgs& a, const HostCtx& ctx, Fn fn) const {
    const int B = ctx.cfg.fp8BlockSize;
    const size_t nbAll = (a.count + B - 1) / B, per = chunkBlocks(ctx.slotBytes(), regions(ctx), B);
    for (size_t c0 = 0; c0 < nbAll; c0 += per) fn(c0, std::min(per, nbAll - c0));
  }

  CollType type_;
  int regions_;  // packed runs per slot (-1: one per rank)
};

class HostFp8AllReduce : public HostFp8Base {
 public:
  HostFp8AllReduce() : HostFp8Base(CollType::AllReduce, 1) {}
  void run(const CollArgs& a, HostCtx& ctx) override {
    const int N = ctx.size, B = ctx.cfg.fp8BlockSize;
    const size_t n = a.count;
    float tmp[fp8::kMaxBlock];
    forEachChunk(a, ctx, [&](size_t c0, size_t nb) {
      uint64_t s1 = ctx.nextStep();
      std::vector<Packed> in = quantizeAndShare(a, ctx, c0, nb, s1);
      uint64_t s2 = s1 + 1;
      Packed mine(ctx.slot(ctx.rank, s2), nb, B);
      size_t sb0, sb1;
      fp8::shardBlocks(nb, N, ctx.rank, sb0, sb1);
      for (size_t b = c0 + sb0; b < c0 + sb1; ++b) {
        reduceBlock(in, c0, b, B, n, a.op.kind, tmp);
        size_t len = std::min(n - b * size_t(B), size_t(B));
        mine.metas[b - c0] = fp8::quantizeBlock(tmp, int(len), B, mine.codes + (b - c0) * B);
      }
      ctx.sync(s2);
      for (int p = 0; p < N; ++p) {
        fp8::shardBlocks(nb, N, p, sb0, sb1);
        dequantizeBlocks(Packed(ctx.slot(p, s2), nb, B), c0, c0 + sb0, c0 + sb1, B, n, a.recv,
                         a.dtype);
      }
    });
  }
};

/// out = T(sum_r deq(q(x_r))): one quantization, no requantized shards (gpu/fp8/oneshot.cu).
class HostFp8OneShot : public HostFp8Base {
 public:
  HostFp8OneShot() : HostFp8Base(CollType::AllReduce, 1) {}
  void run(const CollArgs& a, HostCtx& ctx) override {
    const int B = ctx.cfg.fp8BlockSize;
    forEachChunk(a, ctx, [&](size_t c0, size_t nb) {
      std::vector<Packed> in = quantizeAndShare(a, ctx, c0, nb, ctx.nextStep());
      for (size_t b = c0; b < c0 + nb; ++b)
        reduceStore(in, c0, b, B, a.count, a.op.kind, a.recv, a.dtype);
    });
  }
};

class HostFp8AllGather : public HostFp8Base {
 public:
  HostFp8AllGather() : HostFp8Base(CollType::AllGather, 1) {}
  void run(const CollArgs& a, HostCtx& ctx) override {
    const int B = ctx.cfg.fp8BlockSize;
    const size_t n = a.count;
    forEachChunk(a, ctx, [&](size_t c0, size_t nb) {
      std::vector<Packed> in = quantizeAndShare(a, ctx, c0, nb, ctx.nextStep());
      for (int p = 0; p < ctx.size; ++p) {
        void* out = a.recvList.empty() ? const_cast<char*>(segPtr(a.recv, n, a.dtype, p))
                                       : a.recvList[p];
        dequantizeBlocks(in[p], c0, c0, c0 + nb, B, n, out, a.dtype);
      }
    });
  }
};

class HostFp8ReduceScatter : public HostFp8Base {
 public:
  HostFp8ReduceScatter() : HostFp8Base(CollType::ReduceScatter, -1) {}
  void run(const CollArgs& a, HostCtx& ctx) override {
    const int B = ctx.cfg.fp8BlockSize;
    const size_t n = a.count;
    auto seg = [&](int r) -> const void* {
      return a.sendList.empty() ? segPtr(a.send, n, a.dtype, r) : a.sendList[r];
    };
    forEachChunk(a, ctx, [&](size_t c0, size_t nb) {
      std::vector<Packed> in = quantizeSegmentsAndShare(a, ctx, c0, nb, ctx.nextStep(), seg);
      for (size_t b = c0; b < c0 + nb; ++b)
        reduceStore(in, c0, b, B, n, a.op.kind, a.recv, a.dtype);
    });
  }
};

class HostFp8AllToAll : public HostFp8Base {
 public:
  HostFp8AllToAll() : HostFp8Base(CollType::AllToAll, -1) {}
  void run(const CollArgs& a, HostCtx& ctx) override {
    const int B = ctx.cfg.fp8BlockSize;
    const size_t n = a.count;
    auto seg = [&](int r) { return segPtr(a.send, n, a.dtype, r); };
    forEachChunk(a, ctx, [&](size_t c0, size_t nb) {
      std::vector<Packed> in = quantizeSegmentsAndShare(a, ctx, c0, nb, ctx.nextStep(), seg);
      for (int p = 0; p < ctx.size; ++p)
        dequantizeBlocks(in[p], c0, c0, c0 + nb, B, n,
                         const_cast<char*>(segPtr(a.recv, n, a.dtype, p)), a.dtype);
    });
  }
};

}  // namespace

std::unique_ptr<HostAlgo> makeHostFp8AllReduce() { return std::make_unique<HostFp8AllReduce>(); }
std::unique_ptr<HostAlgo> makeHostFp8OneShotAllReduce() {
  return std::make_unique<HostFp8OneShot>();
}
std::unique_ptr<HostAlgo> makeHostFp8AllGather() { return std::make_unique<HostFp8AllGather>(); }
std::unique_ptr<HostAlgo> makeHostFp8ReduceScatter() {
  return std::make_unique<HostFp8ReduceScatter>();
}
std::unique_ptr<HostAlgo> makeHostFp8AllToAll() { return std::make_unique<HostFp8AllToAll>(); }

}  // namespace cclx
