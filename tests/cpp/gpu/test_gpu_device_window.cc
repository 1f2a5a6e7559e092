// Device windows on GPU comms with cclx's own kernels (gpu/kernels/devwin_selftest.cu: every
// method of cclx::DeviceWindow, no torchcomms code), any number of ranks on however many GPUs
// there are (rank r on GPU r % count; ranks sharing a GPU reach each other through CUDA IPC):
// the handle as the host built it against the window's mappings; rings of put + signal + counter
// + barrier rounds at every scope with odd sizes and offsets, several blocks each on its own ids,
// eager and replayed from one CUDA graph (round numbers on the device); signal SET / ADD, every
// comparison, aggregated waits, read / reset, counters, stores through peer addresses, argument
// errors; a source that never signals (the wait returns kDevWinFailed at the comm's timeout, the
// window is poisoned, later calls fail on every rank, and the host raises cclxTimeout naming the
// source); the handle's lifetime across deregistration.
//
// World size: CCLX_TEST_RANKS (default 2). CCLX_TEST_DEVWIN_ROUNDS (default 50, scaled by
// CCLX_TEST_TIME_SCALE below 1): rounds per launch.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <cclx/device_window.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/kernels/devwin_selftest.h"
#include "helpers/gpu_util.h"
#include "helpers/win_util.h"

using namespace cclx;
using namespace gputest;
using namespace winutil;
using namespace std::chrono_literals;

namespace {

// CCLX_TEST_DEVWIN_ROUNDS, else 50 scaled by CCLX_TEST_TIME_SCALE (helpers/scale.h).
int roundsPerRun() { return int(test::rounds(50, "CCLX_TEST_DEVWIN_ROUNDS")); }

template <class T>
T* devAlloc(size_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, sizeof(T) * n));
  CK(cudaMemset(p, 0, sizeof(T) * n));
  return p;
}

template <class T>
T fromDev(const T* p) {
  T v{};
  CK(cudaMemcpy(&v, p, sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// The handle as built: this rank's window, every rank's mapping, the counts and layout.
void checkHandle(Window& w, int rank, int n, int s, int c, int b) {
  const DeviceWindowHandle& h = w.deviceWindowHandle();
  MP_CHECK(h.rank == rank && h.numRanks == n && h.base == w.data() &&
               h.size == w.count() * dtypeSize(w.dtype()) && h.signalBufferHandle == 0 &&
               !h.ginEnabled,
           "handle fields");
  const DeviceWindowLayout l = deviceWindowLayout(n, s, c, b);
  MP_CHECK(h.comm.rank == rank && h.comm.size == n && h.comm.signalCount == s &&
               h.comm.counterCount == c && h.comm.barrierCount == b &&
               h.comm.signalOffset == l.signalOffset && h.comm.barrierOffset == l.barrierOffset &&
               h.comm.counterOffset == l.counterOffset && h.comm.epochOffset == l.epochOffset &&
               h.comm.windowBytes == h.size && h.comm.err != nullptr && h.comm.timeoutMs > 0,
           "handle comm part");
  for (int r = 0; r < n; ++r)
    MP_CHECK(h.window.base[r] == w.remotePtr(r) && h.comm.res[r] != nullptr &&
                 h.comm.ctl[r] != nullptr,
             "rank %d's mappings", r);
  for (int r = n; r < kDevWinMaxRanks; ++r)
    MP_CHECK(h.window.base[r] == nullptr && h.comm.res[r] == nullptr, "slot %d beyond size", r);
}

// Rings at every scope, several blocks, odd sizes and offsets: eagerly, then one CUDA graph of
// two launches replayed, then eagerly again on the same window.
TEST(GpuDeviceWindow, RingRoundsEagerAndGraph) {
  GPU_REQUIRE(1);
  auto res = onWindowRanks("devwin_ring", [](Comm& comm, int rank, int n, cudaStream_t st) {
    struct Case {
      DevScope scope;
      int blocks, threads;
      size_t block;
    };
    const Case cases[] = {{DevScope::THREAD, 1, 1, 1031},
                          {DevScope::WARP, 2, 32, 4099},
                          {DevScope::BLOCK, 3, 256, 65537},
                          {DevScope::BLOCK, 4, 96, 16}};
    const int iters = roundsPerRun();
    for (const Case& c : cases) {
      const size_t lead = 3, bytes = lead + c.block * size_t(c.blocks) * size_t(n);
      DevBuf win(bytes, 0);
      win.poison(0);
      DevBuf src(c.block * size_t(c.blocks) + 1, 0);
      auto w = comm.newWindow();
      w->registerBuffer(win.base, bytes, DataType::u8);
      void* h = w->deviceWindow(c.blocks, c.blocks, c.blocks);
      MP_CHECK(w->deviceWindow(c.blocks - 1, 0, 1) == h, "a second call gives the same handle");
      checkHandle(*w, rank, n, c.blocks, c.blocks, c.blocks);
      devwintest::RingArgs a{};
      a.win = h;
      a.src = src.base + 1;  // odd: the puts go byte-wise or in 2-byte units
      a.mine = win.base;
      a.block = c.block;
      a.lead = lead;
      a.scope = int(c.scope);
      a.iters = iters;
      a.round = devAlloc<uint64_t>(size_t(c.blocks));
      a.bad = devAlloc<unsigned long long>(1);
      a.status = devAlloc<int>(1);
      const auto t0 = std::chrono::steady_clock::now();
      devwintest::launchRing(a, c.blocks, c.threads, st);
      CK(cudaStreamSynchronize(st));
      {
        Graph g(st, [&] {
          devwintest::launchRing(a, c.blocks, c.threads, st);
          devwintest::launchRing(a, c.blocks, c.threads, st);
        });
        for (int r = 0; r < 3; ++r) g.launch();
        CK(cudaStreamSynchronize(st));
      }
      devwintest::launchRing(a, c.blocks, c.threads, st);
      CK(cudaStreamSynchronize(st));
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int want = iters * 8;  // 1 eager + 3 replays of 2 + 1 eager launches
      for (int b = 0; b < c.blocks; ++b)
        MP_CHECK(fromDev(a.round + b) == uint64_t(want), "block %d: rounds done %llu, want %d", b,
                 (unsigned long long)fromDev(a.round + b), want);
      MP_CHECK(fromDev(a.status) == 0, "scope %d: a call returned %d", int(c.scope),
               fromDev(a.status));
      MP_CHECK(fromDev(a.bad) == 0, "scope %d: %llu bytes differed", int(c.scope),
               fromDev(a.bad));
      const std::vector<char> got = d2h(win.base, bytes);
      for (size_t i = 0; i < lead; ++i) MP_CHECK(got[i] == 0, "byte %zu before the blocks", i);
      if (rank == 0)
        std::printf("[devwin] %d ranks: scope %d, %d blocks x %zu B: %d rounds in %.2f s\n", n,
                    int(c.scope), c.blocks, c.block, want, sec);
      CK(cudaFree(a.round));
      CK(cudaFree(a.bad));
      CK(cudaFree(a.status));
      w->deregisterBuffer();
    }
  }, 120s, std::chrono::seconds(1800));
  ASSERT_TRUE(res.ok()) << res.log;
  test::echoTagged(res.log, "[devwin]");
}

// Signal operations and comparisons, counters, peer addresses, argument errors.
TEST(GpuDeviceWindow, SignalsCountersAddresses) {
  GPU_REQUIRE(1);
  auto res = onWindowRanks("devwin_ops", [](Comm& comm, int rank, int n, cudaStream_t st) {
    DevBuf win(4096, 0);
    win.poison(0);
    DevBuf src(64, 0);
    src.poison(0x3c);
    auto w = comm.newWindow();
    w->registerBuffer(win.base, 1024, DataType::f32);
    void* h = w->deviceWindow(4, 2, 2);
    int* ok = devAlloc<int>(devwintest::kOpsChecks);
    void** addrs = devAlloc<void*>(size_t(n) + 1);
    devwintest::launchOps(h, src.base, ok, addrs, st);
    CK(cudaStreamSynchronize(st));
    std::vector<int> got(devwintest::kOpsChecks);
    CK(cudaMemcpy(got.data(), ok, sizeof(int) * got.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < got.size(); ++i) MP_CHECK(got[i] == 1, "check %zu failed", i);
    std::vector<void*> a(size_t(n) + 1);
    CK(cudaMemcpy(a.data(), addrs, sizeof(void*) * a.size(), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; ++r)
      MP_CHECK(a[size_t(r)] == w->remotePtr(r), "peerAddress(%d) is not rank %d's mapping", r, r);
    MP_CHECK(a[size_t(n)] == nullptr, "multimemAddress is not null");
    const std::vector<char> mine = d2h(win.base, 64);
    for (char c : mine) MP_CHECK(uint8_t(c) == 0x3c, "the put to this rank's own window");
    CK(cudaFree(ok));
    CK(cudaFree(addrs));
    comm.barrier(on(st));
    CK(cudaStreamSynchronize(st));
    w->deregisterBuffer();
    // A new registration gets a new device window; the old handle is gone.
    w->registerBuffer(win.base, 512, DataType::f32);
    expectError(cclxInvalidUsage, [&] { w->deviceWindowHandle(); }, "handle before the call");
    MP_CHECK(w->deviceWindow() != nullptr, "device window after re-registration");
    checkHandle(*w, rank, n, n, n, 1);
    w->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Rank 1 waits for a signal rank 0 never sends: the wait returns kDevWinFailed at the comm's
// timeout (5 s scaled, the comm's when the handle was made), poisons rank 1's window, and every later call fails; the other ranks' calls fail at
// entry once the abort word reached them; every host sees the comm failed.
TEST(GpuDeviceWindow, PeerNeverSignals) {
  GPU_REQUIRE(1);
  auto res = test::runRanks(worldSize(), [](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = sharedGpuComm(rank, n, store, "devwin_timeout", 120s, false);
    CK(cudaSetDevice(deviceOf(rank)));
    Stream st;
    DevBuf win(4096, 0);
    win.poison(0);
    DevBuf src(64, 0);
    auto w = comm->newWindow();
    w->registerBuffer(win.base, 1024, DataType::f32);
    // The handle's waits take the comm's timeout when it is made.
    const auto timeout = test::expiring(5000ms);
    comm->setTimeout(timeout);
    void* h = w->deviceWindow(1, 0, 1);
    comm->setTimeout(120s);
    MP_CHECK(w->deviceWindowHandle().comm.timeoutMs == uint32_t(timeout.count()),
             "the handle's timeout");
    int* status = devAlloc<int>(4);
    if (rank == 1) {
      devwintest::launchFailure(h, src.base, 0, true, status, st.s);
      CK(cudaStreamSynchronize(st.s));
      store->set("devwin_timeout_failed", "1");
    } else {
      store->get("devwin_timeout_failed", 120s);
      devwintest::launchFailure(h, src.base, (rank + 1) % n, false, status, st.s);
      CK(cudaStreamSynchronize(st.s));
    }
    std::vector<int> got(4);
    CK(cudaMemcpy(got.data(), status, sizeof(int) * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 4; ++i)
      MP_CHECK(got[size_t(i)] == kDevWinFailed, "call %d returned %d, want kDevWinFailed", i,
               got[size_t(i)]);
    const std::vector<char> data = d2h(win.base, 4096);
    for (size_t i = 0; i < data.size(); ++i)
      MP_CHECK(uint8_t(data[i]) == 0xFF, "byte %zu of the window not poisoned", i);
    // The host: the comm failed (rank 1 timed out waiting for rank 0).
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg;
    while (msg.empty() && std::chrono::steady_clock::now() - t0 < 30s) {
      try {
        comm->barrier(on(st.s));
        CK(cudaStreamSynchronize(st.s));
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxTimeout || e.code() == cclxRemoteError, "unexpected %s",
                 e.what());
        msg = e.what();
      }
    }
    MP_CHECK(!msg.empty(), "rank %d's comm never failed", rank);
    if (rank == 1)
      MP_CHECK(msg.find("rank(s) 0") != std::string::npos, "message does not name rank 0: %s",
               msg.c_str());
    CK(cudaFree(status));
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace

#endif  // CCLX_HAVE_CUDA
