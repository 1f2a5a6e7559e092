// reduce_scatter_quantized on the host shared-memory transport: the CPU twin of the CUDA kernels
// of src/gpu/quantized (same element rules, core/elements/stochastic.h, so the results are
// bitwise equal for the same inputs and seeds).
//
// Per chunk of L elements (L = slot / (2 bytes * N)): every rank rounds chunk k of each of its N
// destination blocks to bf16 stochastically (its own seed, the element's index in its send
// buffer, its rank) into its step slot (block b at b * L), syncs, and sums block `rank` of every
// rank's slot in float over ranks 0..N-1 into its output (AVG: the sum divided by N once). The
// inputs of a chunk are read before its output is written, so the in-place form (recv at the own
// block of send) works; other overlaps are staged by host/staging.h.
#include <algorithm>
#include <cstring>

#include "core/elements/stochastic.h"
#include "host/algos/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

class HostQuantizedReduceScatter final : public HostAlgo {
 public:
  bool canRun(const CollArgs& a, const HostCtx& ctx) const override {
    return a.type == CollType::ReduceScatterQuantized && a.dtype == DataType::f32 &&
           (a.op.kind == RedOpKind::SUM || a.op.kind == RedOpKind::AVG) && a.seed &&
           ctx.slotBytes() >= sizeof(uint16_t) * size_t(ctx.size);
  }
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t N = size_t(ctx.size), n = a.count;
    const size_t chunk = ctx.slotBytes() / sizeof(uint16_t) / N;
    const uint64_t seed = uint64_t(*a.seed);  // read once, before any output is written
    const uint32_t me = uint32_t(ctx.rank);
    const float* send = static_cast<const float*>(a.send);
    float* recv = static_cast<float*>(a.recv);
    for (size_t off = 0; off < n; off += chunk) {
      const size_t m = std::min(chunk, n - off);
      const uint64_t s = ctx.nextStep();
      uint16_t* mine = reinterpret_cast<uint16_t*>(ctx.slot(ctx.rank, s));
      for (size_t b = 0; b < N; ++b) {
        const size_t base = b * n + off;
        for (size_t i = 0; i < m; ++i)
          mine[b * chunk + i] = sr::srBf16(send[base + i], seed, base + i, me);
      }
      ctx.sync(s);
      for (size_t i = 0; i < m; ++i) {
        float acc = 0.f;
        for (size_t p = 0; p < N; ++p) {
          const uint16_t* in = reinterpret_cast<const uint16_t*>(ctx.slot(int(p), s));
          const float v = math::bf16ToF32(in[size_t(ctx.rank) * chunk + i]);
          acc = p == 0 ? v : acc + v;
        }
        recv[off + i] = a.op.kind == RedOpKind::AVG ? acc / float(N) : acc;
      }
    }
  }
};

}  // namespace

std::unique_ptr<HostAlgo> makeHostQuantizedReduceScatter() {
  return std::make_unique<HostQuantizedReduceScatter>();
}

}  // namespace cclx
