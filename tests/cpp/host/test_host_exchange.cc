// The host twins of the DDA exchange kernels (all-gather, reduce-scatter, all-to-all and
// all-to-all-v, src/host: the shared-memory algorithms with the element rules of
// core/elements/dtype_math.h) at every world size 2..8, against independent references: exact bytes for
// the copies, float64 (exact for integers, MIN and MAX) for the reductions, and bit for bit
// against the allreduce for reduce-scatter (same rules, rank order 0..N-1: a reduce-scatter block
// is the allreduce's block). Odd counts through several 4 KiB staging chunks, every dtype and op,
// in place and out of place, list forms, zero and unequal all-to-all-v splits; all_to_all_v_device
// (split sizes in rows) against all-to-all-v, and its split sizes that cannot run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
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

// all_to_all_v_device on CPU comms (split sizes in rows, in host memory): the same rows as an
// all-to-all-v in elements of the same splits (the reference: a separate call of the checked
// all-to-all-v), the rows past the received ones untouched; split sizes that disagree, sum beyond
// a buffer or are negative fail on every rank with the same message naming the ranks, the output
// all-ones, and the comm keeps working.
TEST(HostExchange, AllToAllVDeviceRowsAndFailuresAtEveryWorldSize) {
  forEachWorldSize([](Comm& comm, int rank, int size) {
    const size_t n = size_t(size), re = 5, es = 4, rb = re * es;
    auto rowsOf = [](int src, int dst, int round) -> int64_t {
      return round == 0 ? 0 : int64_t((src * 5 + dst * 3 + round) % 4) * (src == 1 ? 700 : 1);
    };
    for (int round = 0; round < 3; ++round) {
      std::vector<int64_t> sr(n), rr(n);
      std::vector<size_t> sc(n), rc(n);
      size_t sIn = 0, sOut = 0;
      for (size_t p = 0; p < n; ++p) {
        sr[p] = rowsOf(rank, int(p), round);
        rr[p] = rowsOf(int(p), rank, round);
        sc[p] = size_t(sr[p]) * re;
        rc[p] = size_t(rr[p]) * re;
        sIn += size_t(sr[p]);
        sOut += size_t(rr[p]);
      }
      Buf in(sIn * rb + 1);
      for (size_t i = 0; i < in.size(); ++i) in[i] = char(i * 31 + size_t(rank) * 7 + size_t(round));
      Buf want = poisoned(sOut * rb + 1), got = poisoned((sOut + 2) * rb);
      comm.allToAllV(in.data(), sc, want.data(), rc, DataType::f32);
      comm.allToAllVDevice(in.data(), got.data(), sr.data(), rr.data(), re, DataType::f32, sIn,
                           sOut + 2);
      MP_CHECK(std::memcmp(got.data(), want.data(), sOut * rb) == 0, "round %d: rows differ", round);
      MP_CHECK(allPoison(got.data() + sOut * rb, 2 * rb), "round %d: wrote past the rows", round);
    }
    // Failures: each on every rank alike, then a good call.
    struct Bad {
      int rank;
      int what;  // 0: rank sends one row more to rank 0 (its input holds it); 1: its output
                 // sizes sum beyond its output; 2: a negative size
      const char* needle;
    };
    const Bad bads[] = {{size - 1, 0, "sends 3 rows to rank 0, which expects 2"},
                        {0, 1, "rank 0's output split sizes sum beyond"},
                        {size - 1, 2, "input split size for rank 0 is negative"}};
    for (const Bad& b : bads) {
      std::vector<int64_t> sr(n, 2), rr(n, 2);
      if (rank == b.rank && b.what == 0) sr[0] = 3;
      if (rank == b.rank && b.what == 1) rr[n - 1] = 3;
      if (rank == b.rank && b.what == 2) sr[0] = -1;
      Buf in((2 * n + 1) * rb, 1), out(2 * n * rb, 0);
      bool failed = false;
      try {
        comm.allToAllVDevice(in.data(), out.data(), sr.data(), rr.data(), re, DataType::f32,
                             2 * n + 1, 2 * n);
      } catch (const Error& e) {
        failed = true;
        MP_CHECK(e.code() == cclxInvalidUsage, "code %d", int(e.code()));
        MP_CHECK(std::string(e.what()).find(b.needle) != std::string::npos, "message: %s", e.what());
        if (b.what != 2)
          MP_CHECK(std::string(e.what()).find("rank " + std::to_string(b.rank)) != std::string::npos,
                   "names no rank %d: %s", b.rank, e.what());
      }
      MP_CHECK(failed, "split sizes case %d did not fail", b.what);
      for (char c : out) MP_CHECK(uint8_t(c) == 0xFF, "case %d: output not poisoned", b.what);
    }
    std::vector<int64_t> ok(n, 1);
    Buf in(n * rb, 3), out(n * rb, 0);
    comm.allToAllVDevice(in.data(), out.data(), ok.data(), ok.data(), re, DataType::f32, n, n);
    MP_CHECK(std::memcmp(in.data(), out.data(), n * rb) == 0, "the comm no longer works");
  });
}
