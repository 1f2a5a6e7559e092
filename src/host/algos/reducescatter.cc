// Reduce-scatter (single buffer and list): per chunk of L elements every rank copies chunk k of
// each of its N input blocks into its step slot (block b at b * L), syncs, and reduces block
// `rank` of every rank's slot (rank order 0..N-1) into its output. Inputs of a chunk are staged
// before the output chunk is written, so in-place calls are safe.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/comm/comm_internal.h"
#include "base/error.h"
#include "host/algos/algos.h"
#include "host/algos/chunk_loop.h"
#include "host/algos/reduce_kernels.h"
#include "host/shm.h"

namespace cclx {
namespace {

void reduceScatter(const CollArgs& a, HostCtx& ctx) {
  const size_t es = dtypeSize(a.dtype);
  const bool list = !a.sendList.empty();
  std::vector<const void*> srcs(size_t(ctx.size));
  auto src = [&](int b, size_t off) {
    return list ? static_cast<const char*>(a.sendList[size_t(b)]) + off * es
                : static_cast<const char*>(a.send) + (size_t(b) * a.count + off) * es;
  };
  exchangeBlocks(ctx, a.count, es, src, [&](size_t off, size_t m, auto from) {
    for (int p = 0; p < ctx.size; ++p) srcs[size_t(p)] = from(p);
    reduceInto(static_cast<char*>(a.recv) + off * es, srcs.data(), ctx.size, m, a.dtype, a.op,
               ctx.size);
  });
}

// Reduce-scatter-v: a first step checks that every rank passed the same counts (a mismatch fails
// on every rank alike with cclxInvalidArgument, nothing written); then rounds of L elements per
// block as above, for as many rounds as the largest block needs; a block shorter than the round
// offset contributes nothing to that round.
class HostReduceScatterV final : public HostAlgo {
 public:
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t es = dtypeSize(a.dtype), n = size_t(ctx.size);
    CCLX_REQUIRE(n * sizeof(uint64_t) <= ctx.slotBytes(), cclxUnsupported,
                 "ReduceScatterV: %zu ranks need a staging slot of %zu bytes", n, n * sizeof(uint64_t));
    const uint64_t s0 = ctx.nextStep();
    uint64_t* mine = reinterpret_cast<uint64_t*>(ctx.slot(ctx.rank, s0));
    for (size_t r = 0; r < n; ++r) mine[r] = a.recvCounts[r];
    ctx.sync(s0);
    const uint64_t* first = reinterpret_cast<const uint64_t*>(ctx.slot(0, s0));
    for (int p = 1; p < ctx.size; ++p) {
      const uint64_t* theirs = reinterpret_cast<const uint64_t*>(ctx.slot(p, s0));
      if (std::memcmp(theirs, first, n * sizeof(uint64_t)) != 0) {
        std::vector<size_t> c0(first, first + n), cp(theirs, theirs + n);
        CCLX_THROW(cclxInvalidArgument, "ReduceScatterV: rank 0 passes counts [%s] but rank %d passes [%s]",
                   joinCounts(c0).c_str(), p, joinCounts(cp).c_str());
      }
    }
    const size_t chunk = ctx.slotBytes() / es / n;
    const size_t most = *std::max_element(a.recvCounts.begin(), a.recvCounts.end());
    const size_t own = a.recvCounts[size_t(ctx.rank)];
    std::vector<const void*> srcs(n);
    for (size_t off = 0; off < most; off += chunk) {
      const uint64_t s = ctx.nextStep();
      char* slot = ctx.slot(ctx.rank, s);
      for (size_t b = 0; b < n; ++b) {
        if (a.recvCounts[b] <= off) continue;
        const size_t m = std::min(chunk, a.recvCounts[b] - off);
        std::memcpy(slot + b * chunk * es, static_cast<const char*>(a.sendList[b]) + off * es, m * es);
      }
      ctx.sync(s);
      if (own <= off) continue;
      const size_t m = std::min(chunk, own - off);
      for (size_t p = 0; p < n; ++p) srcs[p] = ctx.slot(int(p), s) + size_t(ctx.rank) * chunk * es;
      reduceInto(static_cast<char*>(a.recv) + off * es, srcs.data(), ctx.size, m, a.dtype, a.op, ctx.size);
    }
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostReduceScatter() { return hostAlgo<reduceScatter>(); }
std::unique_ptr<HostAlgo> makeHostReduceScatterV() { return std::make_unique<HostReduceScatterV>(); }
}  // namespace cclx
