// One-sided windows on GPU comms, any number of ranks on however many GPUs there are (rank r on
// GPU r % count; ranks sharing a GPU reach each other through CUDA IPC like peers on NVLink, and
// their kernels time-slice, so this checks behaviour, never speed): a ring of puts with signals
// (copy engine and SM stores, odd sizes and unaligned offsets, the rest of the window untouched),
// many puts on one stream then one signal on another, edges and out-of-bounds puts refused with
// nothing written, size mismatches, deregister and re-register inside one allocation, direct
// access, CCLX_TEST_WINDOW_ROUNDS (default 10^4) back-to-back rounds with the data generated and
// checked on the device, the same rounds replayed from a CUDA graph, and a source that never
// signals (a timeout naming it, the window poisoned).
//
// World size: CCLX_TEST_RANKS (default 2); scripts/gpu_shared.sh runs it at 2, 3, 4, 5 and 8.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/kernels/window_selftest.h"
#include "helpers/gpu_util.h"
#include "helpers/win_util.h"

using namespace cclx;
using namespace gputest;
using namespace winutil;
using namespace std::chrono_literals;

namespace {

// CCLX_TEST_WINDOW_ROUNDS, else 10^4 scaled by CCLX_TEST_TIME_SCALE (helpers/scale.h).
uint64_t rounds() { return test::rounds(10000, "CCLX_TEST_WINDOW_ROUNDS"); }

std::vector<char> pattern(int rank, uint64_t round, size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char(wintest::byteOf(rank, round, i));
  return v;
}

struct RingCase {
  DataType t;
  size_t count;      // elements per block (one block per source rank)
  size_t lead;       // elements before the first block (unaligned offsets when odd)
  size_t srcShift;   // bytes the source is shifted from a 256-byte boundary
  const char* path;  // "ce", "sm" or "auto"
};

// Ring: every rank puts its block into the next rank's window at block `rank`, signals, waits for
// the previous rank and checks the block from it (and that nothing else changed), 20 rounds.
TEST(GpuWindow, Ring) {
  GPU_REQUIRE(1);
  auto res = onWindowRanks("win_ring", [](Comm& comm, int rank, int n, cudaStream_t s) {
    const RingCase cases[] = {{DataType::f32, 1031, 0, 0, "sm"},   {DataType::f32, 1031, 0, 0, "ce"},
                              {DataType::u8, 4099, 3, 1, "sm"},    {DataType::u8, 77, 1, 5, "ce"},
                              {DataType::bf16, 70001, 1, 2, "auto"}, {DataType::f64, 1, 0, 8, "sm"},
                              {DataType::i64, 1 << 18, 0, 0, "auto"}};
    for (const RingCase& c : cases) {
      const size_t es = dtypeSize(c.t), total = c.lead + c.count * size_t(n), block = c.count * es;
      DevBuf win(total * es, 0);
      win.poison(0x5A);
      DevBuf src(block + 256, 0);
      auto w = comm.newWindow();
      w->registerBuffer(win.base, total, c.t);
      MP_CHECK(std::string(w->transport()) == "ipc", "transport %s", w->transport());
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      for (uint64_t k = 0; k < 20; ++k) {
        const std::vector<char> mine = pattern(rank, k, block);
        CK(cudaMemcpyAsync(src.base + c.srcShift, mine.data(), block, cudaMemcpyHostToDevice, s));
        CK(cudaStreamSynchronize(s));
        w->put(src.base + c.srcShift, c.count, next, c.lead + size_t(rank) * c.count, on(s, c.path));
        w->signal(next, on(s));
        w->waitSignal(prev, on(s));
        CK(cudaStreamSynchronize(s));
        std::vector<char> got = d2h(win.base, total * es);
        const size_t at = (c.lead + size_t(prev) * c.count) * es;
        std::vector<char> want = pattern(prev, k, block);
        MP_CHECK(std::memcmp(got.data() + at, want.data(), block) == 0,
                 "%s x %zu path %s round %llu: the block from rank %d differs", dtypeName(c.t),
                 c.count, c.path, (unsigned long long)k, prev);
        for (size_t i = 0; i < got.size(); ++i)
          if (i < at || i >= at + block)
            MP_CHECK(uint8_t(got[i]) == 0x5A, "%s: byte %zu outside the block was written",
                     dtypeName(c.t), i);
        comm.barrier(on(s));  // the next round overwrites the block only after it was read
        CK(cudaStreamSynchronize(s));
      }
      w->deregisterBuffer();
    }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Rank 0 puts 64 pieces into rank 1's window on stream A (half of them async), then signals on
// stream B without any stream ordering by the caller: the signal still follows every put.
TEST(GpuWindow, ManyPutsThenOneSignalAcrossStreams) {
  GPU_REQUIRE(1);
  auto res = test::runRanks(worldSize(), [](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = gpuComm(rank, n, store, "win_many");
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    const size_t count = 64 * 4099 + 17;
    DevBuf win(count * 4, 0);
    win.poison(0);
    std::vector<char> all = pattern(0, 3, count * 4);
    char* src = h2d(all);
    auto w = comm->newWindow();
    w->registerBuffer(win.base, count, DataType::f32);
    if (rank == 0) {
      for (size_t i = 0; i < 65; ++i) {
        const size_t s0 = ((i * 37) % 65) * 4099;  // 37 and 65 coprime: every piece once
        if (s0 >= count) continue;
        const size_t c = std::min<size_t>(4099, count - s0);
        CollOptions o = on(a, i % 3 == 0 ? "ce" : "sm");
        o.async = i % 2 == 0;
        w->put(src + s0 * 4, c, 1, s0, o);
      }
      w->signal(1, on(b));
    } else if (rank == 1) {
      w->waitSignal(0, on(b));
      CK(cudaStreamSynchronize(b));
      MP_CHECK(d2h(win.base, count * 4) == all, "rank 1's window differs after the signal");
    }
    CK(cudaDeviceSynchronize());
    comm->barrier();
    CK(cudaDeviceSynchronize());
    w->deregisterBuffer();
    CK(cudaFree(src));
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Edges accepted, out-of-bounds puts refused before anything is enqueued, size and dtype
// mismatches refused on every rank naming the ranks, a window registered at an offset inside a
// larger allocation (as torch's caching allocator hands out), deregistered and registered again
// at another offset, and direct access to the peers' windows.
TEST(GpuWindow, EdgesMismatchesReregisterRemote) {
  GPU_REQUIRE(1);
  auto res = onWindowRanks("win_edges", [](Comm& comm, int rank, int n, cudaStream_t s) {
    const size_t count = 1000;
    DevBuf arena(1 << 20, 0);  // one allocation, windows inside it
    arena.poison(0x11);
    char* src = h2d(pattern(rank, 9, count * 4 + 8));
    auto w = comm.newWindow();
    const size_t bad = rank == n - 1 ? count + 1 : count;
    std::string m = expectError(cclxInvalidArgument,
                                [&] { w->registerBuffer(arena.base + 4096, bad, DataType::i32); },
                                "size mismatch");
    MP_CHECK(m.find(strFormat("rank %d: %zu x i32", n - 1, count + 1)) != std::string::npos,
             "message: %s", m.c_str());
    expectError(cclxInvalidUsage, [&] { w->signal(0, on(s)); }, "signal before registration");
    for (size_t off : {size_t(4096 + 4), size_t(300000 + 12)}) {
      char* buf = arena.base + off;
      w->registerBuffer(buf, count, DataType::i32);
      expectError(cclxInvalidUsage, [&] { w->registerBuffer(buf, count, DataType::i32); }, "twice");
      const int peer = (rank + 1) % n, prev = (rank + n - 1) % n;
      for (auto [cnt, at] : {std::pair<size_t, size_t>{count + 1, 0}, {1, count}, {2, count - 1},
                             {SIZE_MAX, 1}, {1, SIZE_MAX}})
        expectError(cclxInvalidArgument, [&] { w->put(src, cnt, peer, at, on(s)); }, "oob put");
      expectError(cclxInvalidArgument, [&] { w->put(src, 1, n, 0, on(s)); }, "put to rank n");
      expectError(cclxInvalidUsage, [&] { w->put(&count, 1, peer, 0, on(s)); }, "host source");
      CK(cudaStreamSynchronize(s));
      comm.barrier(on(s));
      CK(cudaStreamSynchronize(s));
      std::vector<char> before = d2h(buf, count * 4);
      for (char c : before) MP_CHECK(uint8_t(c) == 0x11, "a refused put wrote");
      comm.barrier(on(s));  // every rank checked before the puts below
      w->put(src, 1, peer, 0, on(s, "sm"));
      w->put(src + 4, 1, peer, count - 1, on(s, "ce"));
      w->put(src, 0, peer, count, on(s));  // nothing at the very end: allowed
      w->signal(peer, on(s));
      w->waitSignal(prev, on(s));
      CK(cudaStreamSynchronize(s));
      std::vector<char> got = d2h(buf, count * 4);
      std::vector<char> want = pattern(prev, 9, 8);
      MP_CHECK(std::memcmp(got.data(), want.data(), 4) == 0 &&
                   std::memcmp(got.data() + (count - 1) * 4, want.data() + 4, 4) == 0,
               "edges at offset %zu", off);
      for (size_t i = 4; i < (count - 1) * 4; ++i) MP_CHECK(uint8_t(got[i]) == 0x11, "byte %zu", i);
      // Direct access: every rank's window as mapped here.
      comm.barrier(on(s));
      CK(cudaStreamSynchronize(s));
      for (int r = 0; r < n; ++r) {
        MP_CHECK(w->access(r) == WinAccess::Unified, "access(%d)", r);
        std::vector<char> theirs = d2h(w->remotePtr(r), 4);
        MP_CHECK(std::memcmp(theirs.data(), pattern((r + n - 1) % n, 9, 4).data(), 4) == 0,
                 "rank %d's window as mapped here", r);
      }
      MP_CHECK(w->remotePtr(rank) == buf, "own remotePtr");
      comm.barrier(on(s));
      CK(cudaStreamSynchronize(s));
      w->deregisterBuffer();
      arena.poison(0x11);
    }
    CK(cudaFree(src));
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// One round of the back-to-back tests on stream s: wait until the next rank consumed the previous
// round (ack window), generate, put, signal, wait for the previous rank, check on the device,
// acknowledge, advance the round. Everything stays on the device.
struct Rounds {
  int rank, n, next, prev;
  size_t block;  // bytes per put (odd)
  size_t lead;   // window bytes before block 0 (odd)
  char* src;     // one byte past a 256-byte boundary
  DevBuf win, srcBuf;
  uint64_t* round;
  unsigned long long* bad;
  std::shared_ptr<Window> data, ack;
  DevBuf ackBuf{16, 0};

  Rounds(Comm& comm, int r, int size, size_t blk)
      : rank(r), n(size), next((r + 1) % size), prev((r + size - 1) % size), block(blk), lead(3),
        win(3 + blk * size_t(size), 0), srcBuf(blk + 1, 0) {
    win.poison(0);
    src = srcBuf.base + 1;
    CK(cudaMalloc(&round, sizeof(uint64_t)));
    CK(cudaMemset(round, 0, sizeof(uint64_t)));
    CK(cudaMalloc(&bad, sizeof(unsigned long long)));
    CK(cudaMemset(bad, 0, sizeof(unsigned long long)));
    data = comm.newWindow();
    data->registerBuffer(win.base, lead + block * size_t(n), DataType::u8);
    ack = comm.newWindow();
    ack->registerBuffer(ackBuf.base, 1, DataType::u8);
  }
  ~Rounds() {
    (void)cudaFree(round);
    (void)cudaFree(bad);
  }
  // Every rank starts with one acknowledgement from its next rank in hand.
  void prime(cudaStream_t s) { ack->signal(prev, on(s)); }
  void one(cudaStream_t s, const char* path) {
    ack->waitSignal(next, on(s));
    wintest::fill(src, block, rank, round, s);
    data->put(src, block, next, lead + size_t(rank) * block, on(s, path));
    data->signal(next, on(s));
    data->waitSignal(prev, on(s));
    wintest::check(win.base + lead + size_t(prev) * block, block, prev, round, bad, s);
    ack->signal(prev, on(s));
    wintest::nextRound(round, s);
  }
  void drainAck(cudaStream_t s) { ack->waitSignal(next, on(s)); }
  unsigned long long mismatches() {
    unsigned long long b = 0;
    CK(cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost));
    return b;
  }
  uint64_t roundsDone() {
    uint64_t v = 0;
    CK(cudaMemcpy(&v, round, sizeof(v), cudaMemcpyDeviceToHost));
    return v;
  }
  void close() {
    data->deregisterBuffer();
    ack->deregisterBuffer();
  }
};

TEST(GpuWindow, BackToBackRounds) {
  GPU_REQUIRE(1);
  const uint64_t total = rounds();
  auto res = onWindowRanks("win_rounds", [total](Comm& comm, int rank, int n, cudaStream_t s) {
    Rounds r(comm, rank, n, 4096 + 5);
    r.prime(s);
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t k = 0; k < total; ++k) r.one(s, k % 2 ? "ce" : "sm");
    r.drainAck(s);
    CK(cudaStreamSynchronize(s));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MP_CHECK(r.roundsDone() == total, "rounds done %llu", (unsigned long long)r.roundsDone());
    MP_CHECK(r.mismatches() == 0, "%llu bytes differed over %llu rounds", r.mismatches(),
             (unsigned long long)total);
    if (rank == 0)
      std::printf("[window rounds] %d ranks: %llu eager rounds in %.2f s\n", n,
                  (unsigned long long)total, sec);
    comm.barrier(on(s));
    CK(cudaStreamSynchronize(s));
    r.close();
  }, 600s, std::chrono::seconds(1800));
  ASSERT_TRUE(res.ok()) << res.log;
  test::echoTagged(res.log, "[window rounds]");
}

// The same rounds captured once in a CUDA graph (one round per graph: counters and expected
// values live on the device) and replayed; then eager rounds on the same windows continue.
TEST(GpuWindow, GraphReplay) {
  GPU_REQUIRE(1);
  const uint64_t total = rounds();
  auto res = onWindowRanks("win_graph", [total](Comm& comm, int rank, int n, cudaStream_t s) {
    Rounds r(comm, rank, n, 8191);
    r.prime(s);
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    r.one(s, "sm");
    r.one(s, "ce");
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t k = 0; k < total / 2; ++k) CK(cudaGraphLaunch(ge, s));
    for (int k = 0; k < 3; ++k) r.one(s, "auto");
    r.drainAck(s);
    CK(cudaStreamSynchronize(s));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MP_CHECK(r.roundsDone() == total / 2 * 2 + 3, "rounds done %llu",
             (unsigned long long)r.roundsDone());
    MP_CHECK(r.mismatches() == 0, "%llu bytes differed", r.mismatches());
    if (rank == 0)
      std::printf("[window rounds] %d ranks: %llu graph-replayed rounds in %.2f s\n", n,
                  (unsigned long long)(total / 2 * 2), sec);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    comm.barrier(on(s));
    CK(cudaStreamSynchronize(s));
    r.close();
  }, 600s, std::chrono::seconds(1800));
  ASSERT_TRUE(res.ok()) << res.log;
  test::echoTagged(res.log, "[window rounds]");
}

// A source that never signals: the wait stops at its timeout, names the source and poisons the
// window; the comm fails on every rank (the abort word), and later calls say so.
TEST(GpuWindow, PeerNeverSignals) {
  GPU_REQUIRE(1);
  auto res = test::runRanks(worldSize(), [](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = gpuComm(rank, n, store, "win_timeout");
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DevBuf win(4096, 0);
    win.poison(0);
    auto w = comm->newWindow();
    w->registerBuffer(win.base, 1024, DataType::f32);
    if (rank == 1) {
      CollOptions o = on(s);
      o.timeout = test::expiring(1500ms);
      auto work = w->waitSignal(0, o);
      std::string m = expectError(cclxTimeout, [&] { work->waitBlocking(60s); }, "wait on rank 0");
      MP_CHECK(m.find("rank(s) 0") != std::string::npos, "message does not name rank 0: %s", m.c_str());
      std::vector<char> got = d2h(win.base, 4096);
      for (size_t i = 0; i < got.size(); ++i) MP_CHECK(uint8_t(got[i]) == 0xFF, "byte %zu not poisoned", i);
      expectError(cclxTimeout, [&] { w->signal(0, on(s)); }, "signal after the timeout");
    }
    store->set(strFormat("win_timeout_%d", rank), "1");
    for (int r = 0; r < n; ++r) store->get(strFormat("win_timeout_%d", r), 120s);
    if (rank != 1) {
      // The abort word reached this rank: its next call (or the watchdog before it) fails.
      const auto t0 = std::chrono::steady_clock::now();
      bool failed = false;
      while (!failed && std::chrono::steady_clock::now() - t0 < 30s) {
        try {
          w->signal((rank + 1) % n, on(s));
          CK(cudaStreamSynchronize(s));
        } catch (const Error& e) {
          failed = e.code() == cclxTimeout || e.code() == cclxRemoteError;
          MP_CHECK(failed, "unexpected error %s", e.what());
        }
      }
      MP_CHECK(failed, "rank %d never saw rank 1's timeout", rank);
    }
    CK(cudaStreamDestroy(s));
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace

#endif  // CCLX_HAVE_CUDA
