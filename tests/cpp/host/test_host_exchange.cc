// The host twins of the DDA exchange kernels (all-gather, reduce-scatter, all-to-all and
// all-to-all-v, src/host: the shared-memory algorithms with the element rules of
// core/elements/dtype_math.h) at every world size 2..8, against independent references: exact bytes for
// the copies, float64 (exact for integers, MIN and MAX) for the reductions, and bit for bit
// against the allreduce for reduce-scatter (same rules, rank order 0..N-1: a reduce-scatter block
// is the allreduce's block). Odd counts through several 4 KiB staging chunks, every dtype and op,
// in place and out of place, list forms, zero and unequal all-to-all-v splits.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "helpers/host_rounds.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"

using namespace cclx;
using namespace hosttest;

namespace {

// Every world size 2..8 (CCLX_TEST_EXCHANGE_SIZES="2 5" narrows it for a quick run).
std::vector<int> worldSizes() {
  std::vector<int> v;
  if (const char* s = std::getenv("CCLX_TEST_EXCHANGE_SIZES")) {
    for (const char* p = s; *p;) {
      char* end = nullptr;
      const long n = std::strtol(p, &end, 10);
      if (end == p) break;
      if (n >= 2 && n <= 8) v.push_back(int(n));
      p = end;
    }
  }
  if (v.empty()) v = {2, 3, 4, 5, 6, 7, 8};
  return v;
}

/// runSmallSlot(n, fn) at every world size n.
void forEachWorldSize(const std::function<void(Comm&, int, int)>& fn) {
  for (int n : worldSizes()) {
    SCOPED_TRACE("world size " + std::to_string(n));
    auto res = runSmallSlot(n, fn, std::chrono::seconds(600));
    ASSERT_TRUE(res.ok()) << "world size " << n << "\n" << res.log;
  }
}

}  // namespace

// Reduce-scatter: every dtype and op, odd counts, single buffer / list / in place, against the
// float64 reference and bit for bit against the allreduce of the same inputs.
TEST(HostExchange, ReduceScatterEveryDtypeAndOpAtEveryWorldSize) {
  forEachWorldSize([](Comm& comm, int rank, int size) {
    const size_t n = size_t(size);
    uint64_t seed = 10000;
    for (DataType t : allDtypes())
      for (ReduceOp op : opsFor(t))
        for (size_t count : {size_t(1), size_t(517)}) {
          if (count == 1 && op.kind != RedOpKind::SUM) continue;  // one element: SUM is enough
          ++seed;
          const size_t es = esize(t);
          Buf in(n * count * es);
          fillInput(in.data(), t, op.kind, seed, rank, n * count);
          Buf all = in;  // the allreduce of the whole input, in place
          comm.allReduce(all.data(), all.data(), n * count, t, op);
          for (int mode = 0; mode < 3; ++mode) {  // 0 single buffer, 1 list, 2 in place
            Buf send = in, recv = poisoned(count * es + 1);
            void* out = reduceScatterForm(comm, mode, send, recv, count, t, op);
            const std::string err = checkReduced(t, op, seed, size, out, count, size_t(rank) * count);
            MP_CHECK(err.empty(), "reduce-scatter %s %s count %zu mode %d: %s", dtypeName(t),
                     opName(op.kind), count, mode, err.c_str());
            MP_CHECK(std::memcmp(out, all.data() + size_t(rank) * count * es, count * es) == 0,
                     "reduce-scatter %s %s count %zu mode %d differs from the allreduce's block",
                     dtypeName(t), opName(op.kind), count, mode);
            MP_CHECK(uint8_t(recv[count * es]) == kPoison, "reduce-scatter wrote past the end");
          }
        }
  });
}

// All-gather and all-to-all of every dtype (any bit pattern: they are copies), single buffer, in
// place and (all-gather) list, odd counts.
TEST(HostExchange, AllGatherAndAllToAllEveryDtypeAtEveryWorldSize) {
  forEachWorldSize([](Comm& comm, int, int) {
    uint64_t seed = 20000;
    for (DataType t : allDtypes())
      for (size_t count : {size_t(1), size_t(3), size_t(1029)})
        for (bool inPlace : {false, true}) {
          allGatherRound(comm, t, count, inPlace, seed);
          allToAllRound(comm, t, count, inPlace, seed);
        }
  });
}

// All-to-all-v: unequal splits, zero splits (a rank sending nothing at all, pairs with nothing),
// odd byte counts, a split larger than a staging chunk, in place and not.
TEST(HostExchange, AllToAllVZeroAndUnequalSplitsAtEveryWorldSize) {
  forEachWorldSize([](Comm& comm, int, int) {
    // count(src -> dst) in round `round`: round 0 all zero, round 1 rank 0 sends nothing, the
    // others uneven with zeros and one split above a 4 KiB chunk.
    auto cnt = [](int src, int dst, int round) -> size_t {
      if (round == 0) return 0;
      if (round == 1 && src == 0) return 0;
      const size_t v = size_t((src * 7 + dst * 3 + round) % 5);
      if (src == 1 && dst == 0 && round == 2) return 3001;
      return v == 0 ? 0 : v * v * 37 + size_t(src) + size_t(dst);
    };
    uint64_t seed = 30000;
    for (int round = 0; round < 4; ++round)
      for (DataType t : {DataType::f32, DataType::u8, DataType::bf16, DataType::f64, DataType::fp8_e4m3})
        for (bool inPlace : {false, true}) allToAllVRound(comm, t, inPlace, round, seed, cnt);
  });
}
