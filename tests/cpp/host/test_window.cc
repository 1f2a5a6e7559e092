// One-sided windows on CPU comms (host shared memory), 2..8 processes: a ring of puts with
// signals, many puts then one signal, element offsets at both edges, out-of-bounds puts and
// size mismatches refused with nothing written, a peer that never signals (a timeout naming it,
// the window poisoned), deregister and re-register, direct access to peers' windows, memory peers
// cannot map, and the C API.
#include <gtest/gtest.h>

#include <cclx/cclx.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "helpers/mp.h"

using namespace std::chrono_literals;
using cclx::DataType;

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Byte i of what rank `r` sends in round `k`: fresh in every round, never all zeros.
uint8_t byteOf(int r, uint64_t k, size_t i) {
  return uint8_t(mix(uint64_t(r) * 1000003u + k * 7919u + i) | 1u);
}

void fill(std::vector<char>& v, int r, uint64_t k) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = char(byteOf(r, k, i));
}

// A window of `count` elements of `t` in shared memory (freed with the struct).
struct SharedBuf {
  char* p = nullptr;
  size_t bytes = 0;
  SharedBuf(size_t count, DataType t) : bytes(count * cclx::dtypeSize(t)) {
    p = static_cast<char*>(cclx::allocShared(bytes));
  }
  ~SharedBuf() { cclx::freeShared(p); }
  SharedBuf(const SharedBuf&) = delete;
};

template <typename F>
std::string expectError(cclxResult_t code, F&& f, const char* what) {
  try {
    f();
  } catch (const cclx::Error& e) {
    MP_CHECK(e.code() == code, "%s: code %d (%s), want %d", what, int(e.code()), e.what(), int(code));
    return e.what();
  }
  MP_CHECK(false, "%s succeeded", what);
  return "";
}

struct Ring {
  int world;
  DataType t;
  size_t count;
};

class WindowRing : public ::testing::TestWithParam<Ring> {};

// Every rank puts into the next rank's window (its own block, at element offset rank*count)
// and signals it, then waits for the previous rank and checks what arrived: 100 rounds (10 for
// megabytes) back to back, fresh data each round, with the rest of the window untouched.
TEST_P(WindowRing, PutsWithSignals) {
  const Ring p = GetParam();
  auto res = cclx::test::runRanks(p.world, [p](int rank, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, n, store);
    const size_t es = cclx::dtypeSize(p.t), total = p.count * size_t(n);
    SharedBuf buf(total, p.t);
    std::memset(buf.p, 0x5A, buf.bytes);
    auto win = comm->newWindow();
    win->registerBuffer(buf.p, total, p.t);
    MP_CHECK(win->registered() && win->count() == total && win->dtype() == p.t, "state");
    MP_CHECK(std::string(win->transport()) == "shm", "transport %s", win->transport());
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<char> src(p.count * es), want(p.count * es);
    const uint64_t rounds = p.count * es > (1u << 20) ? 10 : 100;
    for (uint64_t k = 0; k < rounds; ++k) {
      fill(src, rank, k);
      win->put(src.data(), p.count, next, size_t(rank) * p.count);
      win->signal(next);
      win->waitSignal(prev);
      fill(want, prev, k);
      MP_CHECK(std::memcmp(buf.p + size_t(prev) * p.count * es, want.data(), want.size()) == 0,
               "round %llu: block of rank %d differs", (unsigned long long)k, prev);
      // Nobody else writes here: every other block keeps its fill.
      for (int b = 0; b < n; ++b) {
        if (b == prev) continue;
        const char* q = buf.p + size_t(b) * p.count * es;
        for (size_t i = 0; i < p.count * es; ++i)
          MP_CHECK(uint8_t(q[i]) == 0x5A, "block %d byte %zu was written", b, i);
      }
      // The next round overwrites the block only after this rank read it.
      comm->barrier();
    }
    win->deregisterBuffer();
    MP_CHECK(!win->registered(), "still registered");
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

INSTANTIATE_TEST_SUITE_P(Sizes, WindowRing,
                         ::testing::Values(Ring{2, DataType::f32, 1031}, Ring{3, DataType::u8, 7},
                                           Ring{4, DataType::bf16, 4099}, Ring{5, DataType::f64, 1},
                                           Ring{8, DataType::i64, 333}, Ring{2, DataType::u8, 3 << 20}),
                         [](const auto& i) {
                           return std::to_string(i.param.world) + "ranks_" +
                                  cclx::dtypeName(i.param.t) + "_" + std::to_string(i.param.count);
                         });

// Rank 0 writes rank 1's whole window in 64 puts of odd sizes at scattered offsets, back to back,
// then signals once; rank 1 finds every put after its one wait. Also a rank's puts into its own
// window and a signal to itself.
TEST(Window, ManyPutsThenOneSignal) {
  auto res = cclx::test::runRanks(3, [](int rank, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, n, store);
    const size_t count = 64 * 97 + 13;
    SharedBuf buf(count, DataType::f32);
    std::memset(buf.p, 0, buf.bytes);
    auto win = comm->newWindow();
    win->registerBuffer(buf.p, count, DataType::f32);
    std::vector<char> all(count * 4);
    fill(all, 0, 77);
    if (rank == 0) {
      // Pieces in a scrambled order; together they cover the window exactly once.
      std::vector<size_t> starts;
      for (size_t s = 0; s < count; s += 97) starts.push_back(s);
      for (size_t i = 0; i < starts.size(); ++i) {
        const size_t s = starts[(i * 37) % starts.size()];
        const size_t c = std::min<size_t>(97, count - s);
        win->put(all.data() + s * 4, c, 1, s);
      }
      win->signal(1);
    } else if (rank == 1) {
      win->waitSignal(0);
      MP_CHECK(std::memcmp(buf.p, all.data(), all.size()) == 0, "window differs after the signal");
    }
    // Self: put into the own window, signal self, wait on self.
    std::vector<char> mine(40);
    fill(mine, rank, 5);
    comm->barrier();
    win->put(mine.data(), 10, rank, count - 10);
    win->signal(rank);
    win->waitSignal(rank);
    MP_CHECK(std::memcmp(buf.p + (count - 10) * 4, mine.data(), 40) == 0, "self put");
    win->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Puts at both edges (first element, last element, the whole window, zero elements at the end);
// puts past the end and overflowing offsets are refused before anything is written.
TEST(Window, EdgesAndOutOfBounds) {
  auto res = cclx::test::runRanks(2, [](int rank, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, n, store);
    const size_t count = 1000;
    SharedBuf buf(count, DataType::i32);
    std::memset(buf.p, 0x11, buf.bytes);
    auto win = comm->newWindow();
    win->registerBuffer(buf.p, count, DataType::i32);
    std::vector<int32_t> v(count + 1);
    for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t(mix(i) | 1);
    const int peer = 1 - rank;
    if (rank == 0) {
      for (auto [cnt, off] : {std::pair<size_t, size_t>{count + 1, 0}, {1, count}, {2, count - 1},
                              {1, SIZE_MAX}, {SIZE_MAX, 1}, {SIZE_MAX / 4, SIZE_MAX / 4 * 3}}) {
        std::string m = expectError(cclxInvalidArgument, [&] { win->put(v.data(), cnt, peer, off); },
                                    "out-of-bounds put");
        MP_CHECK(m.find("do not fit") != std::string::npos, "message: %s", m.c_str());
      }
      expectError(cclxInvalidArgument, [&] { win->put(v.data(), 1, 2, 0); }, "put to rank 2");
      expectError(cclxInvalidArgument, [&] { win->put(v.data(), 1, -1, 0); }, "put to rank -1");
      expectError(cclxInvalidArgument, [&] { win->signal(2); }, "signal to rank 2");
      expectError(cclxInvalidArgument, [&] { win->waitSignal(-1); }, "wait on rank -1");
      win->signal(peer);  // "nothing written so far"
    } else {
      win->waitSignal(peer);
      for (size_t i = 0; i < buf.bytes; ++i)
        MP_CHECK(uint8_t(buf.p[i]) == 0x11, "byte %zu written by a refused put", i);
    }
    comm->barrier();
    if (rank == 0) {
      win->put(v.data(), 1, peer, 0);
      win->put(v.data() + 1, 1, peer, count - 1);
      win->put(v.data(), 0, peer, count);  // nothing, at the very end: allowed
      win->signal(peer);
      comm->barrier();
      win->put(v.data(), count, peer, 0);
      win->signal(peer);
    } else {
      win->waitSignal(peer);
      const int32_t* w = reinterpret_cast<const int32_t*>(buf.p);
      MP_CHECK(w[0] == v[0] && w[count - 1] == v[1], "edges: %d %d", w[0], w[count - 1]);
      for (size_t i = 1; i < count - 1; ++i) MP_CHECK(uint32_t(w[i]) == 0x11111111u, "element %zu", i);
      comm->barrier();
      win->waitSignal(peer);
      MP_CHECK(std::memcmp(buf.p, v.data(), buf.bytes) == 0, "whole window");
    }
    win->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Ranks registering different sizes or dtypes: every rank gets cclxInvalidArgument naming the
// ranks, nothing is registered, and a correct registration on the same window works afterwards.
TEST(Window, SizeMismatchThenRegister) {
  auto res = cclx::test::runRanks(4, [](int rank, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, n, store);
    SharedBuf buf(600, DataType::f32);
    auto win = comm->newWindow();
    const size_t bad = rank == 2 ? 512 : 500;
    std::string m = expectError(cclxInvalidArgument, [&] { win->registerBuffer(buf.p, bad, DataType::f32); },
                                "size mismatch");
    MP_CHECK(m.find("ranks 0, 1, 3: 500 x f32") != std::string::npos &&
                 m.find("rank 2: 512 x f32") != std::string::npos, "message: %s", m.c_str());
    MP_CHECK(!win->registered(), "registered after a mismatch");
    expectError(cclxInvalidUsage, [&] { win->put(buf.p, 1, 0, 0); }, "put without a buffer");
    m = expectError(cclxInvalidArgument,
                    [&] { win->registerBuffer(buf.p, 500, rank == 1 ? DataType::i32 : DataType::f32); },
                    "dtype mismatch");
    MP_CHECK(m.find("rank 1: 500 x i32") != std::string::npos, "message: %s", m.c_str());
    win->registerBuffer(buf.p, 500, DataType::f32);
    expectError(cclxInvalidUsage, [&] { win->registerBuffer(buf.p, 500, DataType::f32); },
                "double registration");
    std::vector<float> one(1, float(rank + 1));
    win->put(one.data(), 1, (rank + 1) % n, 499);
    win->signal((rank + 1) % n);
    win->waitSignal((rank + n - 1) % n);
    MP_CHECK(reinterpret_cast<float*>(buf.p)[499] == float((rank + n - 1) % n + 1), "after mismatch");
    win->deregisterBuffer();
    expectError(cclxInvalidUsage, [&] { win->deregisterBuffer(); }, "double deregistration");
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// A source that never signals: the wait fails within its timeout naming the source, the window
// is poisoned, and the comm is unusable; the silent rank sees the failure on its next operation.
TEST(Window, PeerNeverSignals) {
  auto res = cclx::test::runRanks(3, [](int rank, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, n, store);
    SharedBuf buf(256, DataType::f32);
    std::memset(buf.p, 0, buf.bytes);
    auto win = comm->newWindow();
    win->registerBuffer(buf.p, 256, DataType::f32);
    if (rank == 2) {
      win->signal(1);  // rank 1 consumes this one, then waits for rank 0, which never signals
      store->get("window-timeout-seen", 60s);
      return;
    }
    if (rank == 1) {
      win->waitSignal(2);
      cclx::CollOptions o;
      o.timeout = 500ms;
      auto t0 = std::chrono::steady_clock::now();
      std::string m = expectError(cclxTimeout, [&] { win->waitSignal(0, o); }, "wait on rank 0");
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t0).count();
      MP_CHECK(ms >= 450 && ms < 5000, "the wait took %lld ms", (long long)ms);
      MP_CHECK(m.find("[0]") != std::string::npos && m.find("wait_signal") != std::string::npos,
               "message does not name rank 0 and the wait: %s", m.c_str());
      for (size_t i = 0; i < buf.bytes; ++i)
        MP_CHECK(uint8_t(buf.p[i]) == 0xFF, "byte %zu not poisoned", i);
      expectError(cclxInvalidUsage, [&] { win->signal(0); }, "signal after the timeout");
      expectError(cclxInvalidUsage, [&] { comm->barrier(); }, "barrier after the timeout");
      store->set("window-timeout-seen", "1");
      return;
    }
    // Rank 0: rank 1 timed out waiting for it; its next operation towards rank 1 says so.
    store->get("window-timeout-seen", 60s);
    std::string m = expectError(cclxTimeout, [&] { win->signal(1); }, "signal to the failed rank");
    MP_CHECK(m.find("rank 1 timed out") != std::string::npos, "message: %s", m.c_str());
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Deregister, then register another buffer of another size and type on the same window; and a
// second window on the same comm next to the first. Also direct access (map_remote_tensor).
TEST(Window, ReregisterAndRemoteAccess) {
  auto res = cclx::test::runRanks(4, [](int rank, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, n, store);
    auto win = comm->newWindow();
    auto other = comm->newWindow();
    SharedBuf b2(64, DataType::u8);
    other->registerBuffer(b2.p, 64, DataType::u8);
    for (int round = 0; round < 3; ++round) {
      const DataType t = round == 1 ? DataType::f16 : DataType::f64;
      const size_t count = 100 + 37 * size_t(round);
      SharedBuf buf(count, t);
      std::vector<char> mine(buf.bytes);
      fill(mine, rank, uint64_t(round));
      std::memcpy(buf.p, mine.data(), buf.bytes);
      win->registerBuffer(buf.p, count, t);
      MP_CHECK(win->remotePtr(rank) == buf.p, "own remotePtr");
      comm->barrier();
      for (int r = 0; r < n; ++r) {
        MP_CHECK(win->access(r) == cclx::WinAccess::Unified, "access(%d)", r);
        std::vector<char> want(buf.bytes);
        fill(want, r, uint64_t(round));
        MP_CHECK(std::memcmp(win->remotePtr(r), want.data(), want.size()) == 0,
                 "round %d: rank %d's window as mapped here differs", round, r);
      }
      // Puts on the second window do not touch the first.
      std::vector<char> small(8);
      fill(small, rank, 99);
      other->put(small.data(), 8, (rank + 1) % n, size_t(rank) * 8);
      other->signal((rank + 1) % n);
      other->waitSignal((rank + n - 1) % n);
      fill(small, (rank + n - 1) % n, 99);
      MP_CHECK(std::memcmp(b2.p + size_t((rank + n - 1) % n) * 8, small.data(), 8) == 0, "other");
      comm->barrier();
      MP_CHECK(std::memcmp(buf.p, mine.data(), buf.bytes) == 0, "own window changed");
      win->deregisterBuffer();
      expectError(cclxInvalidUsage, [&] { win->remotePtr(0); }, "remotePtr after deregister");
    }
    other->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Private memory cannot be mapped by peers: refused on every rank, naming the rank.
TEST(Window, PrivateMemoryRefused) {
  auto res = cclx::test::runRanks(2, [](int rank, int n, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, n, store);
    std::vector<float> priv(128);
    SharedBuf shared(128, DataType::f32);
    auto win = comm->newWindow();
    std::string m = expectError(cclxInvalidArgument, [&] {
      win->registerBuffer(rank == 1 ? priv.data() : reinterpret_cast<float*>(shared.p), 128, DataType::f32);
    }, "private memory");
    MP_CHECK(m.find("rank 1:") != std::string::npos && m.find("allocShared") != std::string::npos,
             "message: %s", m.c_str());
    MP_CHECK(!win->registered(), "registered");
    win->registerBuffer(shared.p, 128, DataType::f32);
    win->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// The C API: create, put, signal, wait, remote pointer, free.
TEST(Window, CApi) {
  auto res = cclx::test::runRanks(2, [](int rank, int n, std::shared_ptr<cclx::Store> store) {
    cclxUniqueId id{};
    if (rank == 0) {
      MP_CHECK(cclxGetUniqueId(&id) == cclxSuccess, "uid");
      store->set("capi-uid", std::string(id.internal, sizeof(id.internal)));
    } else {
      std::string v = store->get("capi-uid", 30s);
      std::memcpy(id.internal, v.data(), sizeof(id.internal));
    }
    cclxComm_t c = nullptr;
    MP_CHECK(cclxCommInitRank(&c, n, id, rank, -1) == cclxSuccess, "%s", cclxGetLastError(nullptr));
    void* mem = nullptr;
    MP_CHECK(cclxMemAllocShared(&mem, 256 * sizeof(int64_t)) == cclxSuccess, "alloc");
    cclxWindow_t w = nullptr;
    MP_CHECK(cclxWinCreate(&w, mem, 256, cclxInt64, c) == cclxSuccess, "%s", cclxGetLastError(c));
    std::vector<int64_t> v(256);
    for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(mix(i + size_t(rank) * 1000));
    const int peer = 1 - rank;
    MP_CHECK(cclxPut(v.data(), 256, peer, 0, w, nullptr) == cclxSuccess, "put");
    MP_CHECK(cclxPut(v.data(), 2, peer, 255, w, nullptr) == cclxInvalidArgument, "oob put accepted");
    MP_CHECK(cclxSignal(peer, w, nullptr) == cclxSuccess, "signal");
    MP_CHECK(cclxWaitSignal(peer, w, nullptr) == cclxSuccess, "%s", cclxGetLastError(c));
    for (size_t i = 0; i < 256; ++i)
      MP_CHECK(static_cast<int64_t*>(mem)[i] == int64_t(mix(i + size_t(peer) * 1000)), "element %zu", i);
    void* rp = nullptr;
    MP_CHECK(cclxWinRemotePtr(w, peer, &rp) == cclxSuccess && rp != nullptr, "remote ptr");
    MP_CHECK(cclxWinFree(w) == cclxSuccess, "%s", cclxGetLastError(c));
    MP_CHECK(cclxMemFreeShared(mem) == cclxSuccess, "free");
    MP_CHECK(cclxCommFinalize(c) == cclxSuccess, "finalize");
    MP_CHECK(cclxCommDestroy(c) == cclxSuccess, "destroy");
    // Rank 0 serves the C API's store: it stays until rank 1 is done with it.
    if (rank == 1) store->set("capi-done", "1");
    else store->get("capi-done", 30s);
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace
