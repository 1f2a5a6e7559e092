// Reduce-scatter (single buffer and list): per chunk of L elements every rank copies chunk k of
// each of its N input blocks into its step slot (block b at b * L), syncs, and reduces block
// `rank` of every rank's slot (rank order 0..N-1) into its output. Inputs of a chunk are staged
// before the output chunk is written, so in-place calls are safe.
#include <algorithm>
#include <cstring>
#include <vector>

#include "host/algos.h"
#include "host/reduce_kernels.h"
#include "host/shm.h"

namespace cclx {
namespace {

class HostReduceScatter final : public HostAlgo {
 public:
  const char* name() const override { return "shm-reducescatter"; }
  bool canRun(const CollArgs& a, const HostCtx&) const override {
    return a.type == CollType::ReduceScatter;
  }
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t es = dtypeSize(a.dtype);
    const size_t chunk = ctx.slotBytes() / es / size_t(ctx.size);
    const bool list = !a.sendList.empty();
    std::vector<const void*> srcs(size_t(ctx.size));
    for (size_t off = 0; off < a.count; off += chunk) {
      const size_t m = std::min(chunk, a.count - off);
      const uint64_t s = ctx.nextStep();
      char* mine = ctx.slot(ctx.rank, s);
      for (int b = 0; b < ctx.size; ++b) {
        const char* src = list ? static_cast<const char*>(a.sendList[size_t(b)]) + off * es
                               : static_cast<const char*>(a.send) + (size_t(b) * a.count + off) * es;
        std::memcpy(mine + size_t(b) * chunk * es, src, m * es);
      }
      ctx.sync(s);
      for (int p = 0; p < ctx.size; ++p) srcs[size_t(p)] = ctx.slot(p, s) + size_t(ctx.rank) * chunk * es;
      reduceInto(static_cast<char*>(a.recv) + off * es, srcs.data(), ctx.size, m, a.dtype, a.op, ctx.size);
    }
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostReduceScatter() { return std::make_unique<HostReduceScatter>(); }
}  // namespace cclx
