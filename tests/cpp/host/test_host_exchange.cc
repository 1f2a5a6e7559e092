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

#include "core/settings/config.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"

using namespace cclx;
using namespace hosttest;
using cclx::test::makeCpuComm;
using cclx::test::runRanks;

namespace {

using Buf = std::vector<char>;
Buf poisoned(size_t bytes) { return Buf(bytes, char(kPoison)); }

std::shared_ptr<Comm> smallSlotComm(int rank, int size, std::shared_ptr<Store> store) {
  setenv("CCLX_SHM_CHUNK_BYTES", "4096", 1);
  reloadConfig();
  return makeCpuComm(rank, size, std::move(store), testOpts());
}

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

void forEachWorldSize(const std::function<void(int, int, std::shared_ptr<Store>)>& fn) {
  for (int n : worldSizes()) {
    SCOPED_TRACE("world size " + std::to_string(n));
    auto res = runRanks(n, fn, std::chrono::seconds(600));
    ASSERT_TRUE(res.ok()) << "world size " << n << "\n" << res.log;
  }
}

}  // namespace

// Reduce-scatter: every dtype and op, odd counts, single buffer / list / in place, against the
// float64 reference and bit for bit against the allreduce of the same inputs.
TEST(HostExchange, ReduceScatterEveryDtypeAndOpAtEveryWorldSize) {
  forEachWorldSize([](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = smallSlotComm(rank, size, store);
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
          comm->allReduce(all.data(), all.data(), n * count, t, op);
          for (int mode = 0; mode < 3; ++mode) {  // 0 single buffer, 1 list, 2 in place
            Buf send = in, recv = poisoned(count * es + 1);
            void* out = recv.data();
            if (mode == 1) {
              std::vector<const void*> list;
              for (size_t b = 0; b < n; ++b) list.push_back(send.data() + b * count * es);
              comm->reduceScatterList(list, out, count, t, op);
            } else {
              if (mode == 2) out = send.data() + size_t(rank) * count * es;
              comm->reduceScatter(send.data(), out, count, t, op);
            }
            const std::string err = checkReduced(t, op, seed, size, out, count, size_t(rank) * count);
            MP_CHECK(err.empty(), "reduce-scatter %s %s count %zu mode %d: %s", dtypeName(t),
                     opName(op.kind), count, mode, err.c_str());
            MP_CHECK(std::memcmp(out, all.data() + size_t(rank) * count * es, count * es) == 0,
                     "reduce-scatter %s %s count %zu mode %d differs from the allreduce's block",
                     dtypeName(t), opName(op.kind), count, mode);
            MP_CHECK(uint8_t(recv[count * es]) == kPoison, "reduce-scatter wrote past the end");
          }
        }
    comm->finalize();
  });
}

// All-gather and all-to-all of every dtype (any bit pattern: they are copies), single buffer, in
// place and (all-gather) list, odd counts.
TEST(HostExchange, AllGatherAndAllToAllEveryDtypeAtEveryWorldSize) {
  forEachWorldSize([](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = smallSlotComm(rank, size, store);
    const size_t n = size_t(size);
    uint64_t seed = 20000;
    for (DataType t : allDtypes())
      for (size_t count : {size_t(1), size_t(3), size_t(1029)})
        for (bool inPlace : {false, true}) {
          const size_t es = esize(t), bytes = count * es;
          {
            Buf recv = poisoned(n * bytes + 1), send(bytes);
            fillBytes(send.data(), bytes, ++seed, rank);
            const void* in = send.data();
            if (inPlace) {
              std::memcpy(recv.data() + size_t(rank) * bytes, send.data(), bytes);
              in = recv.data() + size_t(rank) * bytes;
            }
            comm->allGather(in, recv.data(), count, t);
            for (int p = 0; p < size; ++p)
              MP_CHECK(bytesMatch(recv.data() + size_t(p) * bytes, bytes, seed, p),
                       "all-gather %s count %zu block %d", dtypeName(t), count, p);
            MP_CHECK(uint8_t(recv[n * bytes]) == kPoison, "all-gather wrote past the end");
            std::vector<Buf> outs(n, poisoned(bytes));
            std::vector<void*> ptrs;
            for (auto& o : outs) ptrs.push_back(o.data());
            if (inPlace) std::memcpy(ptrs[size_t(rank)], send.data(), bytes);
            comm->allGatherList(inPlace ? ptrs[size_t(rank)] : send.data(), ptrs, count, t);
            for (int p = 0; p < size; ++p)
              MP_CHECK(bytesMatch(outs[size_t(p)].data(), bytes, seed, p), "all-gather list %s block %d",
                       dtypeName(t), p);
          }
          {
            // Block b of rank r's input is bytes [b*bytes, (b+1)*bytes) of stream r; it lands in
            // block r of rank b's output.
            Buf send(n * bytes), recv = poisoned(n * bytes + 1);
            fillBytes(send.data(), n * bytes, ++seed, rank);
            void* out = inPlace ? send.data() : recv.data();
            comm->allToAll(send.data(), out, count, t);
            for (int p = 0; p < size; ++p)
              MP_CHECK(bytesMatch(static_cast<char*>(out) + size_t(p) * bytes, bytes, seed, p,
                                  size_t(rank) * bytes),
                       "all-to-all %s count %zu block %d", dtypeName(t), count, p);
            MP_CHECK(uint8_t(recv[n * bytes]) == kPoison, "all-to-all wrote past the end");
          }
        }
    comm->finalize();
  });
}

// All-to-all-v: unequal splits, zero splits (a rank sending nothing at all, pairs with nothing),
// odd byte counts, a split larger than a staging chunk, in place and not.
TEST(HostExchange, AllToAllVZeroAndUnequalSplitsAtEveryWorldSize) {
  forEachWorldSize([](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = smallSlotComm(rank, size, store);
    const size_t n = size_t(size);
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
        for (bool inPlace : {false, true}) {
          const size_t es = esize(t);
          std::vector<size_t> sc(n), rc(n);
          size_t st = 0, rt = 0;
          for (int p = 0; p < size; ++p) {
            sc[size_t(p)] = cnt(rank, p, round);
            rc[size_t(p)] = cnt(p, rank, round);
            st += sc[size_t(p)];
            rt += rc[size_t(p)];
          }
          Buf send(std::max<size_t>(std::max(st, rt), 1) * es), recv = poisoned(rt * es + 1);
          fillBytes(send.data(), st * es, ++seed, rank);
          void* out = inPlace ? send.data() : recv.data();
          comm->allToAllV(send.data(), sc, out, rc, t);
          size_t roff = 0;
          for (int p = 0; p < size; ++p) {
            size_t soff = 0;  // offset of block `rank` in p's input
            for (int q = 0; q < rank; ++q) soff += cnt(p, q, round);
            MP_CHECK(bytesMatch(static_cast<char*>(out) + roff * es, rc[size_t(p)] * es, seed, p, soff * es),
                     "all-to-all-v round %d %s from %d", round, dtypeName(t), p);
            roff += rc[size_t(p)];
          }
          if (!inPlace) MP_CHECK(uint8_t(recv[rt * es]) == kPoison, "all-to-all-v wrote past the end");
        }
    comm->finalize();
  });
}
