// Several ranks per GPU: the collectives lowered onto grouped messages (scatter, gather,
// gather-single, all-gather-v, all-to-all lists), reduce-scatter-v, broadcast and reduce on the
// pipelined exchange kernel, against the host twin bit for bit (a CPU comm of the same ranks, same calls, same
// inputs). Every root, unequal and zero counts, odd counts, unaligned pointers, in place, every
// buffer of the call compared (inputs must come back unchanged) with guard bytes after each; a
// small staging that forces many chunks per block; back-to-back calls without a sync; CUDA-graph
// replay with new inputs; a late rank (every output exact or NaN, never stale; an error on every
// rank). (A batch of point-to-point messages still needs NCCL: test_gpu_shared.)
//
// World size: CCLX_TEST_RANKS (default 4); scripts/gpu_shared.sh runs it at several sizes.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "helpers/gpu_xchg.h"

using namespace cclx;
using namespace gputest;
using namespace xchgtest;

namespace {

enum class Kind { Scatter, Gather, GatherSingle, AllGatherV, AllToAllList, ReduceScatterV, Broadcast, Reduce };

const char* kindName(Kind k) {
  switch (k) {
    case Kind::Scatter: return "scatter";
    case Kind::Gather: return "gather";
    case Kind::GatherSingle: return "gather_single";
    case Kind::AllGatherV: return "all_gather_v";
    case Kind::AllToAllList: return "all_to_all list";
    case Kind::ReduceScatterV: return "reduce_scatter_v";
    case Kind::Broadcast: return "broadcast";
    case Kind::Reduce: return "reduce";
  }
  return "?";
}

struct GCase {
  Kind kind = Kind::Scatter;
  DataType t = DataType::f32;
  RedOpKind op = RedOpKind::SUM;
  size_t count = 1031;  // elements (the base of the per-rank counts of the v forms)
  int root = 0;
  int round = 1;        // which per-pair counts (split()) the v forms use
  bool inPlace = false;
  size_t offset = 0;    // bytes added to every device buffer
  bool hintDda = false;
};

std::string describe(const GCase& c) {
  return strFormat("%s %s %s count=%zu root=%d round=%d in_place=%d offset=%zu", kindName(c.kind),
                   dtypeName(c.t), opName(c.op), c.count, c.root, c.round, int(c.inPlace), c.offset);
}

// The buffers of one rank's call: their sizes in elements and which hold input data (the rest
// start poisoned). All of them are compared after the call.
struct Layout {
  std::vector<size_t> elems;
  std::vector<bool> input;
};

// Rank r's block of a v form: unequal, odd, some zero.
size_t vCount(const GCase& c, int r) {
  return c.round == 0 ? 0 : split(r, (r + 1) % 7, c.round) + (c.count % 3);
}

Layout layoutOf(const GCase& c, int rank, int n) {
  Layout l;
  auto add = [&](size_t e, bool in) {
    l.elems.push_back(e);
    l.input.push_back(in);
  };
  const bool root = rank == c.root;
  switch (c.kind) {
    case Kind::Scatter:
      if (root) for (int r = 0; r < n; ++r) add(c.count, true);
      add(c.count, false);
      break;
    case Kind::Gather:
      add(c.count, true);
      if (root) for (int r = 0; r < n; ++r) add(c.count, false);
      break;
    case Kind::GatherSingle:
      add(c.count, true);
      if (root) add(c.count * size_t(n), false);
      break;
    case Kind::AllGatherV:
      if (!c.inPlace) add(vCount(c, rank), true);
      for (int r = 0; r < n; ++r) add(vCount(c, r), c.inPlace && r == rank);
      break;
    case Kind::AllToAllList:
      for (int p = 0; p < n; ++p) add(split(rank, p, c.round), true);
      for (int p = 0; p < n; ++p) add(split(p, rank, c.round), false);
      break;
    case Kind::ReduceScatterV:
      for (int r = 0; r < n; ++r) add(vCount(c, r), true);
      if (!c.inPlace) add(vCount(c, rank), false);
      break;
    case Kind::Broadcast:
      if (root) add(c.count, true);
      if (!root || !c.inPlace) add(c.count, false);
      break;
    case Kind::Reduce:
      add(c.count, true);
      if (root && !c.inPlace) add(c.count, false);
      break;
  }
  return l;
}

std::shared_ptr<Work> callGrouped(Comm& comm, const GCase& c, int rank, int n,
                                  const std::vector<char*>& b, const CollOptions& co) {
  const size_t N = size_t(n);
  const bool root = rank == c.root;
  switch (c.kind) {
    case Kind::Scatter: {
      std::vector<const void*> sends;
      if (root) sends.assign(b.begin(), b.begin() + n);
      return comm.scatter(sends, b.back(), c.count, c.t, c.root, co);
    }
    case Kind::Gather: {
      std::vector<void*> recvs;
      if (root) recvs.assign(b.begin() + 1, b.end());
      return comm.gather(b[0], recvs, c.count, c.t, c.root, co);
    }
    case Kind::GatherSingle:
      return comm.gatherSingle(b[0], root ? b[1] : nullptr, c.count, c.t, c.root, co);
    case Kind::AllGatherV: {
      const size_t first = c.inPlace ? 0 : 1;
      std::vector<void*> recvs(b.begin() + long(first), b.begin() + long(first + N));
      std::vector<size_t> counts;
      for (int r = 0; r < n; ++r) counts.push_back(vCount(c, r));
      return comm.allGatherV(c.inPlace ? b[size_t(rank)] : b[0], recvs, counts, c.t, co);
    }
    case Kind::AllToAllList: {
      std::vector<const void*> sends(b.begin(), b.begin() + n);
      std::vector<void*> recvs(b.begin() + n, b.begin() + 2 * n);
      std::vector<size_t> sc, rc;
      for (int p = 0; p < n; ++p) {
        sc.push_back(split(rank, p, c.round));
        rc.push_back(split(p, rank, c.round));
      }
      return comm.allToAllList(sends, sc, recvs, rc, c.t, co);
    }
    case Kind::ReduceScatterV: {
      std::vector<const void*> sends(b.begin(), b.begin() + n);
      std::vector<size_t> counts;
      for (int r = 0; r < n; ++r) counts.push_back(vCount(c, r));
      return comm.reduceScatterV(sends, counts, c.inPlace ? b[size_t(rank)] : b[N], c.t, c.op, co);
    }
    case Kind::Broadcast:  // root: [input, output] or [buffer]; others: [output]
      return comm.broadcast(root ? b[0] : nullptr, b.back(), c.count, c.t, c.root, co);
    case Kind::Reduce:  // [input] and on the root [output] unless in place
      return comm.reduce(b[0], root ? b.back() : nullptr, c.count, c.t, c.op, c.root, co);
  }
  return nullptr;
}

constexpr size_t kGuard = 64;

// Initial contents of every buffer: inputs from (seed, rank, buffer), outputs all 0xff.
std::vector<std::vector<char>> initial(const GCase& c, const Layout& l, int rank, uint64_t seed) {
  const size_t es = dtypeSize(c.t);
  std::vector<std::vector<char>> v;
  for (size_t i = 0; i < l.elems.size(); ++i) {
    if (!l.input[i]) {
      v.emplace_back(l.elems[i] * es, char(0xff));
      continue;
    }
    if (c.kind == Kind::ReduceScatterV || c.kind == Kind::Reduce) {
      v.push_back(genBuf(c.t, c.op, seed * 64 + i, rank, l.elems[i]));
      continue;
    }
    std::vector<char> x(l.elems[i] * es);
    for (size_t k = 0; k < x.size(); ++k) x[k] = char(mix(seed * 977 + uint64_t(rank) * 31 + i * 7919 + k) >> 24);
    v.push_back(std::move(x));
  }
  return v;
}

// One call's device buffers (offset into allocations with guard bytes after each).
struct GBufs {
  std::vector<char*> alloc, ptr;
  std::vector<size_t> bytes;
  GBufs(const GCase& c, const Layout& l) {
    for (size_t e : l.elems) {
      const size_t b = e * dtypeSize(c.t);
      char* p = nullptr;
      CK(cudaMalloc(&p, c.offset + b + kGuard));
      alloc.push_back(p);
      ptr.push_back(p + c.offset);
      bytes.push_back(b);
    }
  }
  ~GBufs() {
    for (char* p : alloc) (void)cudaFree(p);
  }
  void load(const std::vector<std::vector<char>>& init, const GCase& c, cudaStream_t s) {
    for (size_t i = 0; i < ptr.size(); ++i) {
      CK(cudaMemsetAsync(alloc[i], 0xff, c.offset + bytes[i] + kGuard, s));
      if (bytes[i]) CK(cudaMemcpyAsync(ptr[i], init[i].data(), bytes[i], cudaMemcpyHostToDevice, s));
    }
    CK(cudaStreamSynchronize(s));  // pageable sources
  }
  // Every buffer's contents; guards: every byte around them still 0xff.
  std::vector<std::vector<char>> read(bool& guards) const {
    std::vector<std::vector<char>> out;
    guards = true;
    for (size_t i = 0; i < ptr.size(); ++i) {
      const size_t off = size_t(ptr[i] - alloc[i]);
      std::vector<char> all = d2h(alloc[i], off + bytes[i] + kGuard);
      for (size_t k = 0; k < all.size(); ++k)
        if ((k < off || k >= off + bytes[i]) && uint8_t(all[k]) != 0xff) guards = false;
      out.emplace_back(all.begin() + long(off), all.begin() + long(off + bytes[i]));
    }
    return out;
  }
};

// The twin's result: the same call on host copies of the same buffers.
std::vector<std::vector<char>> twinResult(Comm& twin, const GCase& c, int rank, int n,
                                          std::vector<std::vector<char>> bufs) {
  std::vector<char*> p;
  for (auto& b : bufs) p.push_back(b.empty() ? nullptr : b.data());
  callGrouped(twin, c, rank, n, p, CollOptions{});
  return bufs;
}

void expectSame(const GCase& c, const std::vector<std::vector<char>>& got,
                const std::vector<std::vector<char>>& want, int rank, const char* what) {
  MP_CHECK(got.size() == want.size(), "%s: %zu buffers, twin %zu", describe(c).c_str(), got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t k = 0; k < got[i].size(); ++k)
      MP_CHECK(got[i][k] == want[i][k],
               "%s (%s): rank %d buffer %zu byte %zu differs from the host twin (0x%02x vs 0x%02x)",
               describe(c).c_str(), what, rank, i, k, unsigned(uint8_t(got[i][k])),
               unsigned(uint8_t(want[i][k])));
}

std::vector<GCase> groupedCases(int n) {
  std::vector<GCase> v;
  auto add = [&](Kind k, DataType t, size_t count, int root, int round, bool inPlace, size_t off,
                 RedOpKind op = RedOpKind::SUM) {
    GCase c;
    c.kind = k;
    c.t = t;
    c.count = count;
    c.root = root;
    c.round = round;
    c.inPlace = inPlace;
    c.offset = off;
    c.op = op;
    c.hintDda = v.size() % 2 == 1;
    v.push_back(c);
  };
  for (Kind k : {Kind::Scatter, Kind::Gather, Kind::GatherSingle}) {
    for (int root = 0; root < n; ++root) add(k, DataType::f32, 1031 + size_t(root), root, 1, false, 0);
    add(k, DataType::bf16, 20011, n - 1, 1, false, 2);  // several chunks, 2-byte aligned
    add(k, DataType::u8, 333, 1 % n, 1, false, 1);      // odd address, odd count
    add(k, DataType::f64, 1, 0, 1, false, 0);           // one element
    add(k, DataType::f32, 0, 0, 1, false, 0);           // nothing to move
  }
  for (int round = 0; round < 4; ++round) {
    add(Kind::AllGatherV, DataType::f32, 777, 0, round, false, 0);
    add(Kind::AllGatherV, DataType::bf16, 4099, 0, round, true, 0);
    add(Kind::AllToAllList, DataType::u8, 5, 0, round, false, 3);
    add(Kind::AllToAllList, DataType::f64, 5, 0, round, false, 0);
    add(Kind::ReduceScatterV, DataType::f32, 1001, 0, round, false, 0);
    add(Kind::ReduceScatterV, DataType::bf16, 1001, 0, round, true, 2);
  }
  for (RedOpKind op : {RedOpKind::AVG, RedOpKind::PRODUCT, RedOpKind::MIN, RedOpKind::MAX})
    for (DataType t : {DataType::f16, DataType::i32, DataType::f64})
      add(Kind::ReduceScatterV, t, 515, 0, 2, op == RedOpKind::MIN, 0, op);
  add(Kind::AllGatherV, DataType::i64, 20001, 0, 3, false, 8);  // a block of 20001+ elements
  for (int root = 0; root < n; ++root) {
    add(Kind::Broadcast, DataType::f32, 2049 + size_t(root), root, 1, root % 2 == 1, 0);
    add(Kind::Reduce, DataType::f32, 2049 + size_t(root), root, 1, root % 2 == 0, 0);
  }
  add(Kind::Broadcast, DataType::u8, 40001, n - 1, 1, false, 3);
  add(Kind::Reduce, DataType::bf16, 40001, n - 1, 1, false, 2);
  for (RedOpKind op : {RedOpKind::AVG, RedOpKind::PRODUCT, RedOpKind::MIN, RedOpKind::MAX})
    add(Kind::Reduce, DataType::f16, 515, 1 % n, 1, false, 0, op);
  add(Kind::Reduce, DataType::i64, 1, 0, 1, false, 0, RedOpKind::MAX);
  return v;
}

CollOptions optsOf(const GCase& c, cudaStream_t s) {
  CollOptions co;
  co.stream = s;
  if (c.hintDda) co.hints = {{"algo", "dda"}};
  return co;
}

void runGrouped(bool small, uint64_t seed0) {
  runTwinRanksWith(sharedWorldSize(), [&](int rank, int size, std::shared_ptr<Store> store) {
    return gpuComm(rank, size, std::move(store), "grouped", small);
  }, "grouped_twin", [&](TwinRank& r) {
    const int rank = r.rank, size = r.size;
    auto &gpu = r.gpu, &twin = r.twin;
    Stream& st = r.st;
    const std::vector<GCase> cases = groupedCases(size);
    // One call at a time.
    uint64_t seed = seed0;
    for (const GCase& c : cases) {
      const Layout l = layoutOf(c, rank, size);
      const auto init = initial(c, l, rank, ++seed);
      GBufs b(c, l);
      b.load(init, c, st.s);
      callGrouped(*gpu, c, rank, size, b.ptr, optsOf(c, st.s));
      CK(cudaStreamSynchronize(st.s));
      bool guards = false;
      const auto got = b.read(guards);
      MP_CHECK(guards, "%s: wrote outside a buffer", describe(c).c_str());
      expectSame(c, got, twinResult(*twin, c, rank, size, init), rank, "single call");
    }
    // Every case again, back to back without a host sync, each with its own buffers.
    std::vector<std::unique_ptr<GBufs>> bufs;
    std::vector<std::vector<std::vector<char>>> inits;
    for (const GCase& c : cases) {
      const Layout l = layoutOf(c, rank, size);
      inits.push_back(initial(c, l, rank, ++seed));
      bufs.push_back(std::make_unique<GBufs>(c, l));
      bufs.back()->load(inits.back(), c, st.s);
    }
    for (size_t i = 0; i < cases.size(); ++i)
      callGrouped(*gpu, cases[i], rank, size, bufs[i]->ptr, optsOf(cases[i], st.s));
    CK(cudaStreamSynchronize(st.s));
    for (size_t i = 0; i < cases.size(); ++i) {
      bool guards = false;
      const auto got = bufs[i]->read(guards);
      MP_CHECK(guards, "%s: back to back: wrote outside a buffer", describe(cases[i]).c_str());
      expectSame(cases[i], got, twinResult(*twin, cases[i], rank, size, inits[i]), rank, "back to back");
    }
  });
}

}  // namespace

TEST(GpuSharedGrouped, GroupedFormsEqualHostTwin) {
  GPU_REQUIRE(1);
  runGrouped(false, 100);
}

// A 2 MiB staging and 4 blocks: the larger messages take many chunks per block.
TEST(GpuSharedGrouped, SmallStagingManyChunksEqualsHostTwin) {
  GPU_REQUIRE(1);
  runGrouped(true, 200);
}

// A graph of one call of each form (a fresh comm: the first pipelined call grows the staging
// inside the capture), replayed three times with new inputs loaded before each replay.
TEST(GpuSharedGrouped, GraphReplayEqualsHostTwin) {
  GPU_REQUIRE(1);
  runTwinRanksWith(sharedWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    return gpuComm(rank, size, std::move(store), "grouped_graph");
  }, "grouped_graph_twin", [&](TwinRank& r) {
    const int rank = r.rank, size = r.size;
    auto &gpu = r.gpu, &twin = r.twin;
    Stream& st = r.st;
    std::vector<GCase> g(8);
    const Kind kinds[] = {Kind::Scatter, Kind::Gather, Kind::GatherSingle, Kind::AllGatherV,
                          Kind::AllToAllList, Kind::ReduceScatterV, Kind::Broadcast, Kind::Reduce};
    for (size_t i = 0; i < g.size(); ++i) {
      g[i].kind = kinds[i];
      g[i].t = i % 2 ? DataType::bf16 : DataType::f32;
      g[i].count = 3001 + 17 * i;
      g[i].root = int(i) % size;
      g[i].round = 2;
      g[i].inPlace = kinds[i] == Kind::ReduceScatterV || kinds[i] == Kind::Reduce;
    }
    std::vector<std::unique_ptr<GBufs>> bufs;
    std::vector<Layout> lay;
    for (const GCase& c : g) {
      lay.push_back(layoutOf(c, rank, size));
      bufs.push_back(std::make_unique<GBufs>(c, lay.back()));
      bufs.back()->load(initial(c, lay.back(), rank, 1), c, st.s);
    }
    Graph graph(st.s, [&] {
      for (size_t i = 0; i < g.size(); ++i) callGrouped(*gpu, g[i], rank, size, bufs[i]->ptr, optsOf(g[i], st.s));
    });
    std::vector<std::vector<std::vector<char>>> init;
    graph.replay(3, [&](int rep) {
      init.clear();
      for (size_t i = 0; i < g.size(); ++i) {
        init.push_back(initial(g[i], lay[i], rank, 300 + 10 * uint64_t(rep) + i));
        bufs[i]->load(init.back(), g[i], st.s);
      }
    }, [&](int rep) {
      for (size_t i = 0; i < g.size(); ++i) {
        bool guards = false;
        const auto got = bufs[i]->read(guards);
        MP_CHECK(guards, "%s: replay %d wrote outside a buffer", describe(g[i]).c_str(), rep);
        expectSame(g[i], got, twinResult(*twin, g[i], rank, size, init[i]), rank, "graph replay");
      }
    });
  });
}

// A late rank on the rooted and grouped forms (docs/design/failure.md): the last rank
// sleeps twice the timeout before call kLate of kCalls asynchronous calls of one form. Outputs
// start as a plausible stale value (bytes 0x40: 3.0f); after the calls every output buffer is
// either exact (the host twin's bytes) or NaN in every element, never the stale value or another
// one; inputs come back unchanged; a rank with any output that is not exact got an error; the
// calls before the late one are exact; nothing waits much longer than one timeout. The timeout
// (3 s) follows CCLX_TEST_TIME_SCALE (helpers/scale.h).
TEST(GpuSharedGrouped, LateRankGivesExactOrNaN) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize();
  constexpr int kCalls = 5, kLate = 2;
  const auto timeout = test::expiring(std::chrono::seconds(3));
  const double T = std::chrono::duration<double>(timeout).count();
  const Kind kinds[] = {Kind::Broadcast, Kind::Reduce, Kind::ReduceScatterV, Kind::AllGatherV,
                        Kind::AllToAllList, Kind::Gather, Kind::Scatter};
  for (Kind kind : kinds) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      const int late = size - 1;
      GCase c;
      c.kind = kind;
      c.t = DataType::f32;
      c.count = 5003;
      c.round = 1;
      c.root = 0;
      c.hintDda = true;
      auto gpu = gpuComm(rank, size, store, "grouped_late", false, timeout);
      auto twin = hostTwin(rank, size, store, "grouped_late_twin");
      Stream st;
      const Layout l = layoutOf(c, rank, size);
      std::vector<std::vector<std::vector<char>>> init;
      std::vector<std::unique_ptr<GBufs>> bufs;
      for (int i = 0; i < kCalls; ++i) {
        init.push_back(initial(c, l, rank, 700 + uint64_t(i)));
        for (size_t k = 0; k < l.elems.size(); ++k)
          if (!l.input[k]) init.back()[k].assign(init.back()[k].size(), char(0x40));
        bufs.push_back(std::make_unique<GBufs>(c, l));
        bufs.back()->load(init.back(), c, st.s);
      }
      std::vector<std::shared_ptr<Work>> work(kCalls);
      std::vector<bool> error(kCalls, false);
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) {
        if (rank == late && i == kLate) {
          std::this_thread::sleep_for(2 * timeout);
          t0 = std::chrono::steady_clock::now();
        }
        CollOptions co = optsOf(c, st.s);
        co.async = true;
        try {
          work[size_t(i)] = callGrouped(*gpu, c, rank, size, bufs[size_t(i)]->ptr, co);
        } catch (const Error&) {
          error[size_t(i)] = true;  // the comm had already failed: no output written
        }
      }
      CK(cudaDeviceSynchronize());
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      MP_CHECK(waited <= T + test::guardSeconds(2.0 + 0.5 * size), "%s: rank %d waited %.1f s",
               kindName(kind), rank, waited);
      bool anyError = false, anyNan = false;
      int exactCalls = 0;
      for (int i = 0; i < kCalls; ++i) {
        if (work[size_t(i)]) {
          try {
            (void)work[size_t(i)]->isCompleted();
          } catch (const Error&) {
            error[size_t(i)] = true;
          }
        }
        anyError = anyError || error[size_t(i)];
        bool guards = false;
        const auto got = bufs[size_t(i)]->read(guards);
        MP_CHECK(guards, "%s call %d: wrote outside a buffer", kindName(kind), i);
        const auto want = twinResult(*twin, c, rank, size, init[size_t(i)]);
        bool exact = true;
        for (size_t k = 0; k < got.size(); ++k) {
          if (l.input[k]) {
            MP_CHECK(got[k] == init[size_t(i)][k], "%s call %d: rank %d input %zu changed",
                     kindName(kind), i, rank, k);
            continue;
          }
          if (!work[size_t(i)] && error[size_t(i)]) {  // refused at the call: left untouched
            MP_CHECK(got[k] == init[size_t(i)][k], "%s call %d: refused but written",
                     kindName(kind), i);
            continue;
          }
          if (got[k] == want[k]) continue;
          exact = false;
          for (size_t b = 0; b < got[k].size(); ++b)
            MP_CHECK(uint8_t(got[k][b]) == 0xff,
                     "%s call %d: rank %d output %zu byte %zu is neither exact nor NaN (0x%02x)",
                     kindName(kind), i, rank, k, b, unsigned(uint8_t(got[k][b])));
          anyNan = true;
        }
        if (exact && work[size_t(i)]) ++exactCalls;
        if (i < kLate) MP_CHECK(exact, "%s call %d: rank %d not exact before the late call",
                                kindName(kind), i, rank);
      }
      MP_CHECK(!anyNan || anyError, "%s: rank %d has NaN outputs but got no error", kindName(kind),
               rank);
      MP_CHECK(anyError, "%s: rank %d got no error although rank %d was %.1f s late",
               kindName(kind), rank, late, 2 * T);
      std::printf("[grouped-late] %s rank %d: %d of %d calls exact, NaN %s, %.1f s\n",
                  kindName(kind), rank, exactCalls, kCalls, anyNan ? "yes" : "no", waited);
      twin->finalize();
      gpu->abort();
    }, std::chrono::seconds(240));
    test::echoTagged(res.log, "[grouped-late]");
    ASSERT_TRUE(res.ok()) << kindName(kind) << "\n" << res.log;
  }
}

#endif  // CCLX_HAVE_CUDA
