// Device windows, the host side on CPU comms (the twin of the CUDA transport's: the same
// collective creation, layout and lifetime, with the resource areas in shared memory and the
// handle in host memory), 2..4 processes and one of 9: the layout of the resource area; the
// handle against the window's mappings; every rank's resource area mapped by every other (a slot
// written through a peer's mapping lands in the peer's own area); the same handle from later
// calls; counts that differ across ranks, out of range, or above the existing handle's refused;
// the handle before registration or after deregistration refused; a new handle after a new
// registration; the C API; a window destroyed without deregistration; more ranks than a device
// window spans.
#include <gtest/gtest.h>

#include <cclx/cclx.h>
#include <cclx/cclx.hpp>
#include <cclx/device_window.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "helpers/mp.h"

using namespace std::chrono_literals;
using cclx::DataType;
using cclx::DeviceWindowHandle;
using cclx::DeviceWindowLayout;

namespace {

template <typename F>
std::string expectError(cclxResult_t code, F&& f, const char* what) {
  try {
    f();
  } catch (const cclx::Error& e) {
    MP_CHECK(e.code() == code, "%s: code %d (%s), want %d", what, int(e.code()), e.what(),
             int(code));
    return e.what();
  }
  MP_CHECK(false, "%s succeeded", what);
  return "";
}

struct SharedBuf {
  char* p = nullptr;
  size_t bytes = 0;
  explicit SharedBuf(size_t b) : bytes(b) { p = static_cast<char*>(cclx::allocShared(bytes)); }
  ~SharedBuf() { cclx::freeShared(p); }
  SharedBuf(const SharedBuf&) = delete;
};

uint64_t* slot(char* area, size_t offset, int id, int n, int sender) {
  return reinterpret_cast<uint64_t*>(area + offset) + size_t(id) * size_t(n) + size_t(sender);
}

TEST(DeviceWindowLayout, SectionsAlignedDisjointAndSized) {
  for (int n : {1, 2, 3, 8})
    for (int s : {0, 1, 7, 64})
      for (int c : {0, 3})
        for (int b : {0, 1, 2}) {
          const DeviceWindowLayout l = cclx::deviceWindowLayout(n, s, c, b);
          EXPECT_EQ(l.stateOffset, 0u);
          EXPECT_EQ(l.signalOffset, 64u);
          for (size_t off : {l.signalOffset, l.barrierOffset, l.counterOffset, l.epochOffset})
            EXPECT_EQ(off % 64, 0u);
          EXPECT_GE(l.barrierOffset, l.signalOffset + size_t(s) * n * 8);
          EXPECT_GE(l.counterOffset, l.barrierOffset + size_t(b) * n * 8);
          EXPECT_GE(l.epochOffset, l.counterOffset + size_t(c) * 8);
          EXPECT_GE(l.bytes, l.epochOffset + size_t(b) * 8);
          EXPECT_EQ(l.bytes % 256, 0u);
        }
  // The handle mirrors torchcomms' TorchCommDeviceWindow member sequence.
  EXPECT_EQ(offsetof(DeviceWindowHandle, comm), 0u);
  EXPECT_EQ(offsetof(DeviceWindowHandle, window), sizeof(cclx::DeviceWindowComm));
  EXPECT_EQ(offsetof(DeviceWindowHandle, base),
            sizeof(cclx::DeviceWindowComm) + sizeof(cclx::DeviceWindowPeers));
  EXPECT_LT(offsetof(DeviceWindowHandle, ginEnabled), sizeof(DeviceWindowHandle));
}

// Creation, the handle, the mappings of the resource areas, later calls and the lifetime.
TEST(DeviceWindowHost, CreateMapReuseRelease) {
  for (int n : {2, 3, 4}) {
    auto res = cclx::test::runRanks(n, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
      cclx::Options o;
      o.timeout = 120s;
      auto comm = cclx::test::makeCpuComm(rank, size, store, o);
      SharedBuf buf(4096);
      auto w = comm->newWindow();
      expectError(cclxInvalidUsage, [&] { w->deviceWindow(); }, "before registration");
      expectError(cclxInvalidUsage, [&] { w->deviceWindowHandle(); }, "handle before the call");
      w->registerBuffer(buf.p, 1000, DataType::f32);
      expectError(cclxInvalidArgument, [&] { w->deviceWindow(1, 1, -1); }, "negative barriers");
      expectError(cclxInvalidArgument, [&] { w->deviceWindow(cclx::kDevWinMaxIds + 1, 0, 1); },
                  "too many signals");
      void* p = w->deviceWindow(-1, 3, 2);
      MP_CHECK(p != nullptr, "no handle");
      const DeviceWindowHandle& h = w->deviceWindowHandle();
      MP_CHECK(std::memcmp(p, &h, sizeof(h)) == 0, "the placed handle differs from the built one");
      MP_CHECK(h.rank == rank && h.numRanks == size && h.base == buf.p && h.size == 4000 &&
                   h.signalBufferHandle == 0 && !h.ginEnabled,
               "handle fields");
      const DeviceWindowLayout l = cclx::deviceWindowLayout(size, size, 3, 2);
      const cclx::DeviceWindowComm& c = h.comm;
      MP_CHECK(c.rank == rank && c.size == size && c.signalCount == size && c.counterCount == 3 &&
                   c.barrierCount == 2 && c.signalOffset == l.signalOffset &&
                   c.barrierOffset == l.barrierOffset && c.counterOffset == l.counterOffset &&
                   c.epochOffset == l.epochOffset && c.stateOffset == 0 && c.windowBytes == 4000 &&
                   c.timeoutMs == 120000u && c.timeoutNs == 120000ull * 1000000ull,
               "comm part: counts, layout, timeout");
      for (int r = 0; r < size; ++r)
        MP_CHECK(h.window.base[r] == w->remotePtr(r) && c.res[r] != nullptr, "rank %d", r);
      for (int r = size; r < cclx::kDevWinMaxRanks; ++r)
        MP_CHECK(h.window.base[r] == nullptr && c.res[r] == nullptr, "slot %d beyond size", r);
      // Fresh areas are zero.
      for (size_t i = 0; i < l.bytes; ++i) MP_CHECK(c.res[rank][i] == 0, "area byte %zu", i);
      comm->barrier();  // every rank checked its area before anyone writes into it
      // Every rank writes signal slot [1][rank] and barrier slot [1][rank] of every peer through
      // its mapping; each reads its own area afterwards.
      for (int r = 0; r < size; ++r) {
        *slot(c.res[r], c.signalOffset, 1, size, rank) = 1000u + uint64_t(rank);
        *slot(c.res[r], c.barrierOffset, 1, size, rank) = 2000u + uint64_t(rank);
      }
      comm->barrier();
      for (int r = 0; r < size; ++r) {
        MP_CHECK(*slot(c.res[rank], c.signalOffset, 1, size, r) == 1000u + uint64_t(r) &&
                     *slot(c.res[rank], c.barrierOffset, 1, size, r) == 2000u + uint64_t(r) &&
                     *slot(c.res[rank], c.signalOffset, 0, size, r) == 0,
                 "rank %d's slots in this rank's area", r);
      }
      // Later calls: the same handle when the counts fit, an error when they do not.
      MP_CHECK(w->deviceWindow(-1, 3, 2) == p && w->deviceWindow(1, 0, 0) == p, "same handle");
      const std::string m = expectError(cclxInvalidArgument, [&] { w->deviceWindow(1, 4, 1); },
                                        "more counters than the handle has");
      MP_CHECK(m.find("3 counters") != std::string::npos, "message: %s", m.c_str());
      comm->barrier();
      w->deregisterBuffer();
      expectError(cclxInvalidUsage, [&] { w->deviceWindowHandle(); }, "handle after release");
      // A new registration gets a new device window.
      w->registerBuffer(buf.p + 64, 100, DataType::i32);
      void* p2 = w->deviceWindow(2, 0, 1);
      MP_CHECK(p2 != nullptr && w->deviceWindowHandle().base == buf.p + 64 &&
                   w->deviceWindowHandle().comm.signalCount == 2,
               "handle after re-registration");
      w->deregisterBuffer();
      comm->finalize();
    });
    ASSERT_TRUE(res.ok()) << "ranks " << n << ": " << res.log;
  }
}

// Counts that differ across ranks: refused on every rank, naming the ranks; nothing is made.
TEST(DeviceWindowHost, MismatchedCountsRefusedEverywhere) {
  auto res = cclx::test::runRanks(3, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, size, store);
    SharedBuf buf(1024);
    auto w = comm->newWindow();
    w->registerBuffer(buf.p, 256, DataType::f32);
    const std::string m = expectError(
        cclxInvalidArgument, [&] { w->deviceWindow(rank == 2 ? 5 : 4, 0, 1); }, "mismatch");
    MP_CHECK(m.find("ranks 0, 1: 4 signals, 0 counters, 1 barriers") != std::string::npos &&
                 m.find("rank 2: 5 signals") != std::string::npos,
             "message: %s", m.c_str());
    expectError(cclxInvalidUsage, [&] { w->deviceWindowHandle(); }, "no handle after the refusal");
    // The comm and the window still work: the agreeing call succeeds.
    MP_CHECK(w->deviceWindow(4, 0, 1) != nullptr, "after the refusal");
    w->deregisterBuffer();
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// The C API; a window destroyed without deregistration; 9 ranks (above kDevWinMaxRanks).
TEST(DeviceWindowHost, CApiDestroyAndTooManyRanks) {
  auto res = cclx::test::runRanks(2, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, size, store);
    SharedBuf buf(1024);
    {
      auto w = comm->newWindow();
      w->registerBuffer(buf.p, 256, DataType::u8);
      MP_CHECK(w->deviceWindow() != nullptr, "handle");
      comm->barrier();
    }  // destroyed while registered: this rank's mappings released, nothing freed under a peer
    comm->barrier();
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;

  res = cclx::test::runRanks(2, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    cclxUniqueId id{};
    // The C API's own rendezvous: rank 0's id through the test's store.
    if (rank == 0) {
      MP_CHECK(cclxGetUniqueId(&id) == cclxSuccess, "unique id");
      store->set("devwin_c_id", std::string(id.internal, sizeof(id.internal)));
    } else {
      const std::string v = store->get("devwin_c_id", 60s);
      std::memcpy(id.internal, v.data(), sizeof(id.internal));
    }
    cclxComm_t comm = nullptr;
    MP_CHECK(cclxCommInitRank(&comm, size, id, rank, -1) == cclxSuccess, "init");
    void* mem = nullptr;
    MP_CHECK(cclxMemAllocShared(&mem, 1024) == cclxSuccess, "alloc");
    cclxWindow_t w = nullptr;
    MP_CHECK(cclxWinCreate(&w, mem, 256, cclxFloat32, comm) == cclxSuccess, "win");
    void* h = nullptr;
    MP_CHECK(cclxWinGetDeviceWindow(w, -1, -1, 1, nullptr) == cclxInvalidArgument, "null out");
    MP_CHECK(cclxWinGetDeviceWindow(w, 2, 1, 1, &h) == cclxSuccess && h != nullptr, "handle");
    void* h2 = nullptr;
    MP_CHECK(cclxWinGetDeviceWindow(w, 2, 1, 1, &h2) == cclxSuccess && h2 == h, "same handle");
    MP_CHECK(cclxWinGetDeviceWindow(w, 2, 1, 2, &h2) == cclxInvalidArgument, "more barriers");
    MP_CHECK(cclxWinFree(w) == cclxSuccess, "free");
    MP_CHECK(cclxMemFreeShared(mem) == cclxSuccess, "free mem");
    MP_CHECK(cclxCommFinalize(comm) == cclxSuccess && cclxCommDestroy(comm) == cclxSuccess, "fin");
  });
  ASSERT_TRUE(res.ok()) << res.log;

  res = cclx::test::runRanks(9, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    auto comm = cclx::test::makeCpuComm(rank, size, store);
    SharedBuf buf(256);
    auto w = comm->newWindow();
    w->registerBuffer(buf.p, 64, DataType::f32);
    const std::string m =
        expectError(cclxUnsupported, [&] { w->deviceWindow(); }, "9 ranks");
    MP_CHECK(m.find("at most 8 ranks") != std::string::npos, "message: %s", m.c_str());
    w->deregisterBuffer();
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace
