// Fused allreduce + residual add + RMSNorm (+ FP8) on the host transport: the CPU twins of the GPU
// kernels in src/gpu/fused (core/elements/rmsnorm.h holds the element rules both follow, so the results
// are the same bits), and the local part of the unfused sequence.
//
//   one-shot  per chunk of whole token rows: copy the chunk's x rows into the own step slot; sync;
//             every rank reduces every row from all slots (ranks 0..N-1) and applies the row
//             epilogue (residual add, norm, quantization) into its outputs. One step per chunk.
//   two-shot  per chunk: copy x rows into the own slot; sync; rank p reduces and normalizes its
//             share of the rows (splitRange) into its outputs and packs them (r, y, codes, scale
//             per row) into its next slot; sync; every rank copies the other ranks' rows out.
// A chunk's x rows are staged before any output of the chunk is written, so out == x works;
// residualOut == residual works because a row's residual is read before its residual output is
// written, by the rank that writes it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "core/elements/rmsnorm.h"
#include "host/algos/algos.h"
#include "host/algos/reduce_kernels.h"
#include "host/shm.h"

namespace cclx {

namespace {

template <class T>
bool alignedFor(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(T) == 0;
}

template <class T>
void rowsTyped(const RmsNormArgs& r, const char* ar, size_t row0, size_t rows) {
  const size_t H = r.hidden;
  std::vector<float> tmp(H);
  // The caller's buffers may start at any byte (a [tokens, hidden] view into a byte buffer): when
  // one is not aligned for T, every row goes through aligned copies, so that rowHost's typed
  // loads and stores are aligned (an unaligned one is undefined behaviour, and vectorized code
  // may rely on the alignment).
  const bool direct = alignedFor<T>(ar) && alignedFor<T>(r.residual) &&
                      alignedFor<T>(r.weight) && alignedFor<T>(r.residualOut) &&
                      (!r.out || alignedFor<T>(r.out));
  const size_t rowBytes = H * sizeof(T);
  std::vector<T> a, res, w, rOut, y;
  if (!direct) {
    a.resize(H);
    res.resize(H);
    w.resize(H);
    rOut.resize(H);
    if (r.out) y.resize(H);
    std::memcpy(w.data(), r.weight, rowBytes);
  }
  for (size_t k = 0; k < rows; ++k) {
    const size_t i = row0 + k;
    const size_t off = i * H;
    uint8_t* q = r.fp8Out ? static_cast<uint8_t*>(r.fp8Out) + off : nullptr;
    float* scale = r.fp8Out ? r.scales + i : nullptr;
    if (direct) {
      rms::rowHost<T>(reinterpret_cast<const T*>(ar) + k * H,
                      static_cast<const T*>(r.residual) + off, static_cast<const T*>(r.weight),
                      H, r.eps, static_cast<T*>(r.residualOut) + off,
                      r.out ? static_cast<T*>(r.out) + off : nullptr, q, scale, r.staticScale,
                      tmp.data());
      continue;
    }
    // Inputs are read in full before any output is written: the aliasing rowHost allows
    // (residualOut == residual, out == the allreduce result) holds for the copies too.
    std::memcpy(a.data(), ar + k * rowBytes, rowBytes);
    std::memcpy(res.data(), static_cast<const char*>(r.residual) + off * sizeof(T), rowBytes);
    rms::rowHost<T>(a.data(), res.data(), w.data(), H, r.eps, rOut.data(),
                    r.out ? y.data() : nullptr, q, scale, r.staticScale, tmp.data());
    std::memcpy(static_cast<char*>(r.residualOut) + off * sizeof(T), rOut.data(), rowBytes);
    if (r.out) std::memcpy(static_cast<char*>(r.out) + off * sizeof(T), y.data(), rowBytes);
  }
}

size_t rowBytes(const CollArgs& a) { return a.rms.hidden * dtypeSize(a.dtype); }

/// Bytes of one row's packed outputs in the two-shot's second step: r, y (when wanted), codes and
/// scale (with FP8).
size_t packedRowBytes(const CollArgs& a) {
  const RmsNormArgs& r = a.rms;
  return rowBytes(a) * (r.out ? 2 : 1) + (r.fp8Out ? r.hidden + sizeof(float) : 0);
}

/// Rows [row0, row0 + rows) of x reduced over every rank's slot s (rank order) into `ar`.
void reduceRows(HostCtx& ctx, const CollArgs& a, uint64_t s, size_t firstInSlot, size_t rows,
                char* ar) {
  std::vector<const void*> srcs(size_t(ctx.size));
  const size_t rb = rowBytes(a);
  for (int p = 0; p < ctx.size; ++p) srcs[size_t(p)] = ctx.slot(p, s) + firstInSlot * rb;
  reduceInto(ar, srcs.data(), ctx.size, rows * a.rms.hidden, a.dtype, RedOpKind::SUM, ctx.size);
}

class HostFusedOneShot final : public HostAlgo {
 public:
  bool canRun(const CollArgs& a, const HostCtx& ctx) const override {
    return a.type == CollType::AllReduceRmsNorm && rowBytes(a) <= ctx.slotBytes();
  }
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t rb = rowBytes(a), chunk = ctx.slotBytes() / rb, T = a.rms.tokens;
    std::vector<char> ar(std::min(chunk, T) * rb);
    for (size_t row0 = 0; row0 < T; row0 += chunk) {
      const size_t m = std::min(chunk, T - row0);
      const uint64_t s = ctx.nextStep();
      std::memcpy(ctx.slot(ctx.rank, s), static_cast<const char*>(a.rms.x) + row0 * rb, m * rb);
      ctx.sync(s);
      reduceRows(ctx, a, s, 0, m, ar.data());
      hostRmsRows(a, ar.data(), row0, m);
    }
  }
};

class HostFusedTwoShot final : public HostAlgo {
 public:
  bool canRun(const CollArgs& a, const HostCtx& ctx) const override {
    return a.type == CollType::AllReduceRmsNorm && packedRowBytes(a) <= ctx.slotBytes();
  }
  void run(const CollArgs& a, HostCtx& ctx) override {
    const RmsNormArgs& r = a.rms;
    const size_t rb = rowBytes(a), pb = packedRowBytes(a), T = r.tokens;
    const size_t N = size_t(ctx.size);
    const size_t chunk = std::min(ctx.slotBytes() / rb, N * (ctx.slotBytes() / pb));
    std::vector<char> ar((std::min(chunk, T) + N - 1) / N * rb);
    for (size_t row0 = 0; row0 < T; row0 += chunk) {
      const size_t m = std::min(chunk, T - row0);
      const uint64_t s = ctx.nextStep();
      std::memcpy(ctx.slot(ctx.rank, s), static_cast<const char*>(r.x) + row0 * rb, m * rb);
      ctx.sync(s);
      const Range mine = splitRange(m, ctx.size, ctx.rank);
      reduceRows(ctx, a, s, mine.begin, mine.size(), ar.data());
      hostRmsRows(a, ar.data(), row0 + mine.begin, mine.size());
      char* out = ctx.slot(ctx.rank, s + 1);
      for (size_t k = 0; k < mine.size(); ++k) pack(a, row0 + mine.begin + k, out + k * pb, true);
      ctx.sync(s + 1);
      for (int p = 0; p < ctx.size; ++p) {
        if (p == ctx.rank) continue;
        const Range theirs = splitRange(m, ctx.size, p);
        char* in = ctx.slot(p, s + 1);
        for (size_t k = 0; k < theirs.size(); ++k) pack(a, row0 + theirs.begin + k, in + k * pb, false);
      }
    }
  }

 private:
  // Packs row i's outputs into `buf` (toBuf) or unpacks them from it.
  static void pack(const CollArgs& a, size_t i, char* buf, bool toBuf) {
    const RmsNormArgs& r = a.rms;
    const size_t rb = rowBytes(a);
    auto move = [&](void* user, size_t bytes) {
      if (toBuf) std::memcpy(buf, user, bytes);
      else std::memcpy(user, buf, bytes);
      buf += bytes;
    };
    move(static_cast<char*>(r.residualOut) + i * rb, rb);
    if (r.out) move(static_cast<char*>(r.out) + i * rb, rb);
    if (r.fp8Out) {
      move(static_cast<char*>(r.fp8Out) + i * r.hidden, r.hidden);
      move(r.scales + i, sizeof(float));
    }
  }
};

}  // namespace

void hostRmsRows(const CollArgs& a, const void* ar, size_t row0, size_t rows) {
  const char* p = static_cast<const char*>(ar);
  switch (a.dtype) {
    case DataType::f32: return rowsTyped<float>(a.rms, p, row0, rows);
    case DataType::bf16: return rowsTyped<bf16_t>(a.rms, p, row0, rows);
    case DataType::f16: return rowsTyped<f16_t>(a.rms, p, row0, rows);
    default: break;
  }
  CCLX_THROW(cclxInvalidArgument, "AllReduceRmsNorm: dtype %s is not f32, bf16 or f16",
             dtypeName(a.dtype));
}

std::unique_ptr<HostAlgo> makeHostFusedOneShot() { return std::make_unique<HostFusedOneShot>(); }
std::unique_ptr<HostAlgo> makeHostFusedTwoShot() { return std::make_unique<HostFusedTwoShot>(); }

}  // namespace cclx
