// Broadcast: per chunk the root copies its input into its step slot, syncs, and every other rank
// copies the root's slot into its output. The root copies its own input to its output (if
// out-of-place) directly.
#include <algorithm>
#include <cstring>

#include "host/algos/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

class HostBroadcast final : public HostAlgo {
 public:
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t bytes = a.bytes();
    const bool isRoot = ctx.rank == a.root;
    if (isRoot && a.send != a.recv && bytes) std::memcpy(a.recv, a.send, bytes);
    for (size_t off = 0; off < bytes; off += ctx.slotBytes()) {
      const size_t n = std::min(ctx.slotBytes(), bytes - off);
      const uint64_t s = ctx.nextStep();
      if (isRoot) std::memcpy(ctx.slot(ctx.rank, s), static_cast<const char*>(a.recv) + off, n);
      ctx.sync(s);
      if (!isRoot) std::memcpy(static_cast<char*>(a.recv) + off, ctx.slot(a.root, s), n);
    }
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostBroadcast() { return std::make_unique<HostBroadcast>(); }
}  // namespace cclx
