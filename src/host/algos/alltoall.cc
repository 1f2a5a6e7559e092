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
// The form with split sizes in rows where the data is (all_to_all_v_device) checks every rank's
// sizes and capacities alike in its first step (HostAllToAllVDevice), then moves the same rounds.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/comm/device_rows.h"
#include "host/algos/algos.h"
#include "host/algos/chunk_loop.h"
#include "host/shm.h"

namespace cclx {
namespace {

void allToAll(const CollArgs& a, HostCtx& ctx) {
  const size_t es = dtypeSize(a.dtype);
  auto src = [&](int b, size_t off) {
    return static_cast<const char*>(a.send) + (size_t(b) * a.count + off) * es;
  };
  exchangeBlocks(ctx, a.count, es, src, [&](size_t off, size_t m, auto from) {
    for (int p = 0; p < ctx.size; ++p)
      std::memcpy(static_cast<char*>(a.recv) + (size_t(p) * a.count + off) * es, from(p), m * es);
  });
}


/// The data rounds of all-to-all-v once the counts (elements) are known to agree on every
/// rank: rounds of L elements per destination; `maxCount` (the largest count of any rank) sets
/// their number, so every rank runs the same rounds. Overlapping input and output: the input is
/// staged in host memory first.
void moveV(const CollArgs& a, HostCtx& ctx, const std::vector<size_t>& sendCounts,
           const std::vector<size_t>& recvCounts, uint64_t maxCount) {
  const size_t n = size_t(ctx.size), es = dtypeSize(a.dtype);
  std::vector<size_t> sdis(n, 0), rdis(n, 0);
  for (size_t i = 1; i < n; ++i) {
    sdis[i] = sdis[i - 1] + sendCounts[i - 1];
    rdis[i] = rdis[i - 1] + recvCounts[i - 1];
  }
  const size_t inBytes = (sdis[n - 1] + sendCounts[n - 1]) * es;
  const size_t outBytes = (rdis[n - 1] + recvCounts[n - 1]) * es;
  const char* send = static_cast<const char*>(a.send);
  const auto x = reinterpret_cast<uintptr_t>(a.send), y = reinterpret_cast<uintptr_t>(a.recv);
  std::vector<char> staged;
  if (inBytes && outBytes && x < y + outBytes && y < x + inBytes) {
    staged.assign(send, send + inBytes);
    send = staged.data();
  }
  const size_t chunk = ctx.slotBytes() / es / n;
  for (size_t off = 0; off < maxCount; off += chunk) {
    const uint64_t s = ctx.nextStep();
    char* mine = ctx.slot(ctx.rank, s);
    for (size_t b = 0; b < n; ++b) {
      if (sendCounts[b] <= off) continue;
      const size_t m = std::min(chunk, sendCounts[b] - off);
      std::memcpy(mine + b * chunk * es, send + (sdis[b] + off) * es, m * es);
    }
    ctx.sync(s);
    for (size_t p = 0; p < n; ++p) {
      if (recvCounts[p] <= off) continue;
      const size_t m = std::min(chunk, recvCounts[p] - off);
      std::memcpy(static_cast<char*>(a.recv) + (rdis[p] + off) * es,
                  ctx.slot(int(p), s) + size_t(ctx.rank) * chunk * es, m * es);
    }
  }
}

class HostAllToAllV final : public HostAlgo {
 public:
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t n = size_t(ctx.size);
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
    moveV(a, ctx, a.sendCounts, a.recvCounts, maxCount);
  }
};

// all_to_all_v_device on CPU comms: the split sizes (int64 rows, host memory) of every rank are
// published in one step and checked by every rank alike (core/comm/device_rows.h: signs,
// capacities, every pair); a violation poisons the output (recvCap rows) and fails the call on
// every rank with the same message, naming the ranks; otherwise the rows move as all-to-all-v's.
class HostAllToAllVDevice final : public HostAlgo {
 public:
  void run(const CollArgs& a, HostCtx& ctx) override {
    const int n = ctx.size;
    const size_t len = deviceRowsRecordLen(n), re = a.rows.rowElems;
    const std::vector<int64_t> mine = deviceRowsRecord(a, a.rows.send, a.rows.recv, n);
    const uint64_t s0 = ctx.nextStep();
    std::memcpy(ctx.slot(ctx.rank, s0), mine.data(), len * sizeof(int64_t));
    ctx.sync(s0);
    std::vector<int64_t> all(size_t(n) * len);
    for (int p = 0; p < n; ++p)
      std::memcpy(all.data() + size_t(p) * len, ctx.slot(p, s0), len * sizeof(int64_t));
    const std::string err = deviceRowsError(all.data(), n);
    if (!err.empty()) {
      std::memset(a.recv, 0xFF, a.rows.recvCap * re * dtypeSize(a.dtype));
      CCLX_THROW(cclxInvalidUsage, "%s", err.c_str());
    }
    std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
    uint64_t maxCount = 0;
    for (size_t p = 0; p < size_t(n); ++p) {
      sc[p] = size_t(mine[p]) * re;
      rc[p] = size_t(mine[size_t(n) + p]) * re;
      for (size_t q = 0; q < size_t(n); ++q)
        maxCount = std::max(maxCount, uint64_t(all[p * len + q]) * re);
    }
    moveV(a, ctx, sc, rc, maxCount);
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostAllToAll() { return hostAlgo<allToAll>(); }
std::unique_ptr<HostAlgo> makeHostAllToAllV() { return std::make_unique<HostAllToAllV>(); }
std::unique_ptr<HostAlgo> makeHostAllToAllVDevice() {
  return std::make_unique<HostAllToAllVDevice>();
}
}  // namespace cclx
