// All-to-all: per chunk of L elements every rank copies chunk k of each destination block into
// its step slot (block b at b * L), syncs, and copies block `rank` of every rank's slot to its
// place in the output. Inputs of a chunk are staged before the outputs of that chunk are
// written, so in-place calls (send == recv) are safe.
#include <algorithm>
#include <cstring>

#include "host/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

class HostAllToAll final : public HostAlgo {
 public:
  const char* name() const override { return "shm-alltoall"; }
  bool canRun(const CollArgs& a, const HostCtx&) const override { return a.type == CollType::AllToAll; }
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t es = dtypeSize(a.dtype);
    const size_t chunk = ctx.slotBytes() / es / size_t(ctx.size);
    for (size_t off = 0; off < a.count; off += chunk) {
      const size_t m = std::min(chunk, a.count - off);
      const uint64_t s = ctx.nextStep();
      char* mine = ctx.slot(ctx.rank, s);
      for (int b = 0; b < ctx.size; ++b)
        std::memcpy(mine + size_t(b) * chunk * es,
                    static_cast<const char*>(a.send) + (size_t(b) * a.count + off) * es, m * es);
      ctx.sync(s);
      for (int p = 0; p < ctx.size; ++p)
        std::memcpy(static_cast<char*>(a.recv) + (size_t(p) * a.count + off) * es,
                    ctx.slot(p, s) + size_t(ctx.rank) * chunk * es, m * es);
    }
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostAllToAll() { return std::make_unique<HostAllToAll>(); }
}  // namespace cclx
