// All-gather (single buffer and list): per chunk of the per-rank block every rank copies its
// chunk into its step slot, syncs, and copies every rank's chunk to its place in the output.
// A rank's input chunk is copied before any output chunk of the same offset is written, so
// in-place calls (input inside the output) are safe.
#include <algorithm>
#include <cstring>

#include "host/algos/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

class HostAllGather final : public HostAlgo {
 public:
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t bytes = a.bytes();
    const bool list = !a.recvList.empty();
    for (size_t off = 0; off < bytes; off += ctx.slotBytes()) {
      const size_t n = std::min(ctx.slotBytes(), bytes - off);
      const uint64_t s = ctx.nextStep();
      std::memcpy(ctx.slot(ctx.rank, s), static_cast<const char*>(a.send) + off, n);
      ctx.sync(s);
      for (int p = 0; p < ctx.size; ++p) {
        char* dst = list ? static_cast<char*>(a.recvList[size_t(p)]) + off
                         : static_cast<char*>(a.recv) + size_t(p) * bytes + off;
        std::memcpy(dst, ctx.slot(p, s), n);
      }
    }
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostAllGather() { return std::make_unique<HostAllGather>(); }
}  // namespace cclx
