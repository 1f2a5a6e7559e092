// All-to-all: per chunk of L elements every rank copies chunk k of each destination block into
// its step slot (block b at b * L), syncs, and copies block `rank` of every rank's slot to its
// place in the output. Inputs of a chunk are staged before the outputs of that chunk are
// written, so in-place calls (send == recv) are safe.
//
// All-to-all-v (split sizes in elements, blocks packed contiguously). First step: every rank
// publishes its send and receive counts; every rank checks all pairs (sendCounts of p for q must
// equal recvCounts of q for p), so a mismatch fails on every rank alike before anything is
// written. Then rounds of L elements per destination, like all-to-all; the number of rounds
// comes from the largest count of any rank. In-place calls stage the input in host memory first.
#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "host/algos/algos.h"
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


class HostAllToAllV final : public HostAlgo {
 public:
  const char* name() const override { return "shm-alltoallv"; }
  bool canRun(const CollArgs& a, const HostCtx&) const override { return a.type == CollType::AllToAllV; }
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t n = size_t(ctx.size), es = dtypeSize(a.dtype);
    CCLX_ARG_CHECK(a.sendCounts.size() == n && a.recvCounts.size() == n,
                   "all_to_all_v: %zu send counts and %zu receive counts for %zu ranks",
                   a.sendCounts.size(), a.recvCounts.size(), n);
    // Step 1: counts.
    const uint64_t s0 = ctx.nextStep();
    uint64_t* cnt = reinterpret_cast<uint64_t*>(ctx.slot(ctx.rank, s0));
    for (size_t i = 0; i < n; ++i) {
      cnt[i] = a.sendCounts[i];
      cnt[n + i] = a.recvCounts[i];
    }
    ctx.sync(s0);
    uint64_t maxCount = 0;
    for (size_t p = 0; p < n; ++p) {
      const uint64_t* cp = reinterpret_cast<const uint64_t*>(ctx.slot(int(p), s0));
      for (size_t q = 0; q < n; ++q) {
        const uint64_t* cq = reinterpret_cast<const uint64_t*>(ctx.slot(int(q), s0));
        if (cp[q] != cq[n + p])
          CCLX_THROW(cclxInvalidArgument,
                     "all_to_all_v: rank %zu sends %llu elements to rank %zu, which expects %llu",
                     p, static_cast<unsigned long long>(cp[q]), q,
                     static_cast<unsigned long long>(cq[n + p]));
        maxCount = std::max(maxCount, cp[q]);
      }
    }
    std::vector<size_t> sdis(n, 0), rdis(n, 0);
    for (size_t i = 1; i < n; ++i) {
      sdis[i] = sdis[i - 1] + a.sendCounts[i - 1];
      rdis[i] = rdis[i - 1] + a.recvCounts[i - 1];
    }
    const char* send = static_cast<const char*>(a.send);
    std::vector<char> staged;
    if (a.send == a.recv && a.send != nullptr) {
      staged.assign(send, send + (sdis[n - 1] + a.sendCounts[n - 1]) * es);
      send = staged.data();
    }
    const size_t chunk = ctx.slotBytes() / es / n;
    for (size_t off = 0; off < maxCount; off += chunk) {
      const uint64_t s = ctx.nextStep();
      char* mine = ctx.slot(ctx.rank, s);
      for (size_t b = 0; b < n; ++b) {
        if (a.sendCounts[b] <= off) continue;
        const size_t m = std::min(chunk, a.sendCounts[b] - off);
        std::memcpy(mine + b * chunk * es, send + (sdis[b] + off) * es, m * es);
      }
      ctx.sync(s);
      for (size_t p = 0; p < n; ++p) {
        if (a.recvCounts[p] <= off) continue;
        const size_t m = std::min(chunk, a.recvCounts[p] - off);
        std::memcpy(static_cast<char*>(a.recv) + (rdis[p] + off) * es,
                    ctx.slot(int(p), s) + size_t(ctx.rank) * chunk * es, m * es);
      }
    }
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostAllToAll() { return std::make_unique<HostAllToAll>(); }
std::unique_ptr<HostAlgo> makeHostAllToAllV() { return std::make_unique<HostAllToAllV>(); }
}  // namespace cclx
