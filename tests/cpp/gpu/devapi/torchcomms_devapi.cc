// torchcomms' device-API stress kernels (DeviceApiTestKernels.cu, compiled unmodified from a
// torchcomms tree; devapi.cmake) on cclx's device windows: cclx's host harness in place of
// torchcomms' DeviceApiTest.cpp. Each rank (CCLX_TEST_RANKS of them, default 2, rank r on GPU
// r % count: ranks may share a GPU) makes a cclx comm, windows over cuMem memory (cclx::memAlloc,
// as torchcomms' tests allocate from the comm's allocator), takes each window's device handle
// (Window::deviceWindow) and launches their kernels: each case runs once eagerly, then as a CUDA
// graph (their kernel behind cclx's reset kernel, devapi_reset.h) replayed CCLX_TEST_DEVAPI_REPLAYS
// times (default 2). After every run it checks their results array (1 per iteration) and the
// windows' contents (the block from the previous rank holds its last iteration's pattern, every
// other byte is untouched). NUM_ITERATIONS (their variable; default 20, scaled by
// CCLX_TEST_TIME_SCALE below 1) sets the iterations; CCLX_TEST_DEVAPI_MAX_BYTES leaves out the
// larger messages (named).
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <cclx/cclx.hpp>
#include <cclx/device_window.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comms/torchcomms/tests/integration/cpp/DeviceApiTestKernels.cuh"
#include "gpu/devapi/devapi_reset.h"
#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"
#include "helpers/win_util.h"

using namespace cclx;
using namespace gputest;
using namespace winutil;
using namespace std::chrono_literals;
using torchcomms::device::CoopScope;
using torchcomms::device::DeviceWindowNCCL;
using torchcomms::device::RegisteredBufferNCCL;
namespace tct = torchcomms::device::test;

namespace {

int envInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  const int n = v && *v ? std::atoi(v) : dflt;
  return n < 1 ? 1 : n;
}
// NUM_ITERATIONS (torchcomms' variable), else 20 scaled by CCLX_TEST_TIME_SCALE (helpers/scale.h).
int iterations() { return int(test::rounds(20, "NUM_ITERATIONS")); }
int replays() { return envInt("CCLX_TEST_DEVAPI_REPLAYS", 2); }
// CCLX_TEST_DEVAPI_MAX_BYTES: message sizes above it are left out, each named on stdout
// (compute-sanitizer's quick mode: one thread copying 16 MiB under memcheck outlasts the step).
size_t maxBytes() {
  const char* v = std::getenv("CCLX_TEST_DEVAPI_MAX_BYTES");
  return v && *v ? size_t(std::strtoull(v, nullptr, 10)) : ~size_t(0);
}
bool leftOut(int rank, size_t bytes, const char* what) {
  if (bytes <= maxBytes()) return false;
  if (rank == 0)
    std::printf("[devapi] left out: %s of %zu B (CCLX_TEST_DEVAPI_MAX_BYTES=%zu)\n", what, bytes,
                maxBytes());
  return true;
}

int threadsFor(CoopScope s) { return s == CoopScope::BLOCK ? 256 : s == CoopScope::WARP ? 32 : 1; }
const char* scopeName(CoopScope s) {
  return s == CoopScope::BLOCK ? "block" : s == CoopScope::WARP ? "warp" : "thread";
}

// torchcomms' createWindowSetup: a window of count * n elements (zeroed, cuMem memory) whose
// device handle has the given counts, and a source buffer of count elements (cudaMalloc, a
// separate allocation as theirs).
struct WinSetup {
  Comm& comm;
  int rank, n;
  size_t count, es;
  char* win = nullptr;
  char* src = nullptr;
  std::shared_ptr<Window> w;
  DeviceWindowNCCL* dev = nullptr;
  RegisteredBufferNCCL srcBuf{};

  WinSetup(Comm& c, int r, int size, size_t cnt, DataType t, int signals, int counters, int barriers)
      : comm(c), rank(r), n(size), count(cnt), es(dtypeSize(t)) {
    win = static_cast<char*>(memAlloc(count * size_t(n) * es));
    CK(cudaMemset(win, 0, count * size_t(n) * es));
    CK(cudaMalloc(&src, count * es));
    CK(cudaMemset(src, 0, count * es));
    CK(cudaDeviceSynchronize());
    w = comm.newWindow();
    w->registerBuffer(win, count * size_t(n), t);
    dev = static_cast<DeviceWindowNCCL*>(w->deviceWindow(signals, counters, barriers));
    srcBuf.base_ptr = src;
    srcBuf.size = count * es;
    comm.barrier();
    CK(cudaDeviceSynchronize());
  }
  ~WinSetup() {
    CK(cudaDeviceSynchronize());
    w->deregisterBuffer();
    memFree(win);
    CK(cudaFree(src));
  }
  int next() const { return (rank + 1) % n; }
  int prev() const { return (rank + n - 1) % n; }
};

struct Results {
  int* d = nullptr;
  int n;
  explicit Results(int count) : n(count) {
    CK(cudaMalloc(&d, sizeof(int) * size_t(n)));
    CK(cudaMemset(d, 0, sizeof(int) * size_t(n)));
  }
  ~Results() { (void)cudaFree(d); }
  void clear(cudaStream_t s) { CK(cudaMemsetAsync(d, 0, sizeof(int) * size_t(n), s)); }
  // torchcomms' checkKernelResults: every entry 1.
  void check(const std::string& tag) const {
    std::vector<int> h(static_cast<size_t>(n));
    CK(cudaMemcpy(h.data(), d, sizeof(int) * size_t(n), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i)
      MP_CHECK(h[size_t(i)] == 1, "%s: verification failed at iteration %d", tag.c_str(), i);
  }
};

// The window after a ring of puts: block prev holds `want` (float or half pattern of iteration
// last), every other element is 0.
void checkRingWindow(const WinSetup& s, bool half, int last, const std::string& tag) {
  const std::vector<char> got = d2h(s.win, s.count * size_t(s.n) * s.es);
  for (int b = 0; b < s.n; ++b)
    for (size_t i = 0; i < s.count; ++i) {
      const char* p = got.data() + (size_t(b) * s.count + i) * s.es;
      float v;
      if (half) {
        __half h;
        std::memcpy(&h, p, 2);
        v = __half2float(h);
      } else {
        std::memcpy(&v, p, 4);
      }
      const float want = b != s.prev() ? 0.0f
                         : half        ? float((s.prev() + 1) * 10 + last % 100)
                                       : float((s.prev() + 1) * 1000 + last);
      MP_CHECK(v == want, "%s: window block %d element %zu is %g, want %g", tag.c_str(), b, i,
               double(v), double(want));
    }
}

// One case: `launch` once eagerly, then captured behind the reset kernel and replayed; `check`
// after every run (the run's index: 0 eager, then the replays).
void eagerThenGraph(WinSetup& s, cudaStream_t st, int signals, const std::function<void()>& clear,
                    const std::function<void(cudaStream_t)>& launch,
                    const std::function<void(int)>& check) {
  launch(st);
  CK(cudaStreamSynchronize(st));
  check(0);
  int* status = nullptr;
  CK(cudaMalloc(&status, sizeof(int)));
  {
    Graph g(st, [&] {
      clear();
      devapitest::launchResetSignals(s.dev, signals, 0, status, st);
      launch(st);
    });
    for (int r = 1; r <= replays(); ++r) {
      CK(cudaMemset(status, 0xff, sizeof(int)));
      g.launch();
      CK(cudaStreamSynchronize(st));
      int h = -9;
      CK(cudaMemcpy(&h, status, sizeof(int), cudaMemcpyDeviceToHost));
      MP_CHECK(h == 0, "replay %d: the reset kernel's barrier returned %d", r, h);
      check(r);
    }
  }
  CK(cudaFree(status));
}

// Runs fn(comm, rank, n, stream) on CCLX_TEST_RANKS ranks.
template <class F>
void onRanks(const char* name, F&& fn) {
  auto res = onWindowRanks(name, std::forward<F>(fn), 120s, std::chrono::seconds(1800));
  ASSERT_TRUE(res.ok()) << res.log;
  test::echoTagged(res.log, "[devapi]");
}

// StressPut (their msg sizes and scopes) and StressPutHalf.
TEST(DevApiTorchcomms, StressPut) {
  GPU_REQUIRE(1);
  onRanks("devapi_put", [](Comm& comm, int rank, int n, cudaStream_t st) {
    struct Case {
      size_t bytes;
      CoopScope scope;
    };
    const Case cases[] = {{4, CoopScope::THREAD},       {1024, CoopScope::THREAD},
                          {1 << 20, CoopScope::THREAD}, {16 << 20, CoopScope::THREAD},
                          {1024, CoopScope::WARP},      {1024, CoopScope::BLOCK},
                          {1 << 20, CoopScope::WARP},   {1 << 20, CoopScope::BLOCK}};
    for (const Case& c : cases) {
      if (leftOut(rank, c.bytes, "StressPut")) continue;
      const auto t0 = std::chrono::steady_clock::now();
      const int iters = c.bytes >= (16u << 20) ? std::min(iterations(), 3) : iterations();
      const size_t count = std::max<size_t>(1, c.bytes / 4);
      WinSetup s(comm, rank, n, count, DataType::f32, n, -1, 2);
      Results res(iters);
      const std::string tag = strFormat("StressPut(%zu B, %s)", c.bytes, scopeName(c.scope));
      eagerThenGraph(
          s, st, 1, [&] { res.clear(st); },
          [&](cudaStream_t x) {
            tct::launchStressPutKernel(s.dev, s.srcBuf, reinterpret_cast<float*>(s.src),
                                       reinterpret_cast<float*>(s.win), 0, size_t(rank) * count * 4,
                                       count * 4, count, s.next(), s.prev(), 0, iters, c.scope,
                                       threadsFor(c.scope), res.d, x);
          },
          [&](int run) {
            res.check(strFormat("%s run %d", tag.c_str(), run));
            checkRingWindow(s, false, iters - 1, strFormat("%s run %d", tag.c_str(), run));
          });
      if (rank == 0)
        std::printf("[devapi] %d ranks: %s x %d iterations, eager + %d replays: %.2f s\n", n,
                    tag.c_str(), iters, replays(),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // Half precision: their PutHalf case (1 KiB, thread scope).
    const int iters = iterations();
    const size_t count = 1024 / 2;
    WinSetup s(comm, rank, n, count, DataType::f16, n, -1, 2);
    Results res(iters);
    eagerThenGraph(
        s, st, 1, [&] { res.clear(st); },
        [&](cudaStream_t x) {
          tct::launchStressPutHalfKernel(s.dev, s.srcBuf, s.src, s.win, 0, size_t(rank) * count * 2,
                                         count * 2, count, s.next(), s.prev(), 0, iters,
                                         CoopScope::THREAD, 1, res.d, x);
        },
        [&](int run) {
          res.check(strFormat("StressPutHalf run %d", run));
          checkRingWindow(s, true, iters - 1, strFormat("StressPutHalf run %d", run));
        });
  });
}

// StressSignal and StressBarrier, every scope.
TEST(DevApiTorchcomms, StressSignalAndBarrier) {
  GPU_REQUIRE(1);
  onRanks("devapi_sig", [](Comm& comm, int rank, int n, cudaStream_t st) {
    const int iters = iterations();
    for (CoopScope sc : {CoopScope::THREAD, CoopScope::WARP, CoopScope::BLOCK}) {
      {
        WinSetup s(comm, rank, n, 1, DataType::f32, n, -1, 1);
        eagerThenGraph(
            s, st, 1, [] {},
            [&](cudaStream_t x) {
              tct::launchStressSignalKernel(s.dev, s.next(), s.prev(), 0, iters, sc,
                                            threadsFor(sc), x);
            },
            [&](int) {});  // completing is the check: a lost signal never completes
      }
      {
        WinSetup s(comm, rank, n, 1, DataType::f32, -1, -1, 2);
        eagerThenGraph(
            s, st, 0, [] {},
            [&](cudaStream_t x) {
              tct::launchStressBarrierKernel(s.dev, iters, sc, threadsFor(sc), x);
            },
            [&](int) {});
      }
    }
    comm.barrier(on(st));  // the comm is healthy afterwards
    CK(cudaStreamSynchronize(st));
  });
}

// StressCombined (1 KiB, 1 MiB) and the aggregated signal with read and reset.
TEST(DevApiTorchcomms, StressCombinedAndAggregated) {
  GPU_REQUIRE(1);
  onRanks("devapi_comb", [](Comm& comm, int rank, int n, cudaStream_t st) {
    const int iters = iterations();
    for (size_t bytes : {size_t(1024), size_t(1) << 20}) {
      if (leftOut(rank, bytes, "StressCombined")) continue;
      const size_t count = bytes / 4;
      WinSetup s(comm, rank, n, count, DataType::f32, n, -1, 4);
      Results res(iters);
      const std::string tag = strFormat("StressCombined(%zu B)", bytes);
      eagerThenGraph(
          s, st, 1, [&] { res.clear(st); },
          [&](cudaStream_t x) {
            tct::launchStressCombinedKernel(s.dev, s.srcBuf, reinterpret_cast<float*>(s.src),
                                            reinterpret_cast<float*>(s.win), 0,
                                            size_t(rank) * bytes, bytes, count, s.next(), s.prev(),
                                            0, 0, iters, res.d, x);
          },
          [&](int run) {
            res.check(strFormat("%s run %d", tag.c_str(), run));
            checkRingWindow(s, false, iters - 1, strFormat("%s run %d", tag.c_str(), run));
          });
    }
    WinSetup s(comm, rank, n, 1, DataType::f32, n, -1, 2);
    Results res(iters);
    eagerThenGraph(
        s, st, 1, [&] { res.clear(st); },
        [&](cudaStream_t x) {
          tct::launchStressAggregatedSignalKernel(s.dev, s.next(), 0, iters, res.d, x);
        },
        [&](int run) { res.check(strFormat("StressAggregatedSignal run %d", run)); });
  });
}

// GetMultimemAddress (null: no multicast), argument errors, several windows at once on
// several streams (their MultiWindow), and windows made and released in a loop (their
// WindowLifecycle).
TEST(DevApiTorchcomms, AddressesErrorsWindowsLifecycle) {
  GPU_REQUIRE(1);
  onRanks("devapi_misc", [](Comm& comm, int rank, int n, cudaStream_t st) {
    {
      WinSetup s(comm, rank, n, 1024, DataType::f32, n, -1, 1);
      int64_t* d = nullptr;
      CK(cudaMalloc(&d, sizeof(int64_t)));
      eagerThenGraph(
          s, st, 1, [&] { CK(cudaMemsetAsync(d, 0x5a, sizeof(int64_t), st)); },
          [&](cudaStream_t x) { tct::launchGetMultimemAddressKernel(s.dev, 0, d, x); },
          [&](int run) {
            int64_t h = -1;
            CK(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
            MP_CHECK(h == 0, "get_multimem_address run %d: %lld, want null", run, (long long)h);
          });
      CK(cudaFree(d));
      int* status = nullptr;
      const int k = devapitest::kBadArgumentCalls;
      CK(cudaMalloc(&status, sizeof(int) * (k + 1)));
      devapitest::launchBadArguments(s.dev, s.srcBuf, status, st);
      CK(cudaStreamSynchronize(st));
      std::vector<int> h(size_t(k) + 1);
      CK(cudaMemcpy(h.data(), status, sizeof(int) * (k + 1), cudaMemcpyDeviceToHost));
      for (int i = 0; i < k; ++i) MP_CHECK(h[size_t(i)] == -1, "bad call %d returned %d", i, h[size_t(i)]);
      MP_CHECK(h[size_t(k)] == 0, "the barrier after the bad calls returned %d", h[size_t(k)]);
      CK(cudaFree(status));
      comm.barrier(on(st));
      CK(cudaStreamSynchronize(st));
      const std::vector<char> got = d2h(s.win, 1024 * size_t(n) * 4);
      for (char c : got) MP_CHECK(c == 0, "a refused call wrote into the window");
    }
    const int iters = std::max(1, iterations() / 2);
    {  // MultiWindow: four windows, one stream each, all kernels in flight together
      const int windows = envInt("STRESS_WINDOW_COUNT", 4);
      std::vector<std::unique_ptr<WinSetup>> ws;
      std::vector<std::unique_ptr<Results>> rs;
      std::vector<cudaStream_t> streams(static_cast<size_t>(windows));
      for (int i = 0; i < windows; ++i) {
        ws.push_back(std::make_unique<WinSetup>(comm, rank, n, 1024, DataType::f32, n, -1, 2));
        rs.push_back(std::make_unique<Results>(iters));
        CK(cudaStreamCreateWithFlags(&streams[size_t(i)], cudaStreamNonBlocking));
      }
      for (int i = 0; i < windows; ++i) {
        WinSetup& s = *ws[size_t(i)];
        tct::launchStressPutKernel(s.dev, s.srcBuf, reinterpret_cast<float*>(s.src),
                                   reinterpret_cast<float*>(s.win), 0, size_t(rank) * 4096, 4096,
                                   1024, s.next(), s.prev(), 0, iters, CoopScope::THREAD, 1,
                                   rs[size_t(i)]->d, streams[size_t(i)]);
      }
      for (int i = 0; i < windows; ++i) {
        CK(cudaStreamSynchronize(streams[size_t(i)]));
        rs[size_t(i)]->check(strFormat("MultiWindow[%d]", i));
        checkRingWindow(*ws[size_t(i)], false, iters - 1, strFormat("MultiWindow[%d]", i));
        CK(cudaStreamDestroy(streams[size_t(i)]));
      }
    }
    const int cycles = envInt("STRESS_LIFECYCLE_CYCLES", 10);
    for (int c = 0; c < cycles; ++c) {  // WindowLifecycle
      WinSetup s(comm, rank, n, 256, DataType::f32, n, -1, 2);
      Results res(1);
      tct::launchStressPutKernel(s.dev, s.srcBuf, reinterpret_cast<float*>(s.src),
                                 reinterpret_cast<float*>(s.win), 0, size_t(rank) * 1024, 1024, 256,
                                 s.next(), s.prev(), 0, 1, CoopScope::THREAD, 1, res.d, st);
      CK(cudaStreamSynchronize(st));
      res.check(strFormat("WindowLifecycle[%d]", c));
    }
  });
}

}  // namespace

#endif  // CCLX_HAVE_CUDA
