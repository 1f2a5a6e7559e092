// The per-rank harness of the GPU suites whose ranks may share GPUs (test_gpu_shared*,
// test_gpu_rmsnorm, test_gpu_failure, test_gpu_faults, the window suites): the world size, each
// rank's GPU (rank r on GPU r % count), its CUDA comm and its host twin (a CPU comm of the same
// ranks that runs the same algorithm on the same inputs, so results compare bit for bit), a
// stream, a suite run on every rank with both comms made and finalized around it, and the
// CUDA-graph tail (capture once, replay with fresh inputs, check each replay). Empty in builds
// without CUDA.
#pragma once

#if defined(CCLX_HAVE_CUDA)

#include <cclx/cclx.hpp>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "helpers/gpu_util.h"
#include "helpers/mp.h"

namespace gputest {

/// Ranks of a suite: CCLX_TEST_RANKS (default `dflt`), clamped to 2..8.
inline int sharedWorldSize(int dflt = 4) {
  const char* v = std::getenv("CCLX_TEST_RANKS");
  int n = v && *v ? std::atoi(v) : dflt;
  return n < 2 ? 2 : n > 8 ? 8 : n;
}

/// CUDA devices this process sees (initializes CUDA: call it in a rank).
inline int deviceCount() {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  return n;
}

/// The GPU of rank r: r % the number of GPUs.
inline int deviceOf(int rank) { return rank % deviceCount(); }

/// Rank r's CUDA comm `name` on GPU r % count; abortOnError unset: the process's default.
inline std::shared_ptr<Comm> sharedGpuComm(int rank, int size, std::shared_ptr<Store> store,
                                           const std::string& name,
                                           std::chrono::milliseconds timeout = std::chrono::seconds(120),
                                           std::optional<bool> abortOnError = std::nullopt) {
  Options o;
  o.name = name;
  o.timeout = timeout;
  o.abortOnError = abortOnError;
  return Comm::create(DeviceSpec::cuda(deviceOf(rank)), o, std::move(store), rank, size);
}

/// The host twin of a GPU comm: a CPU comm `name` of the same ranks (120 s timeout).
inline std::shared_ptr<Comm> hostTwin(int rank, int size, std::shared_ptr<Store> store,
                                      const std::string& name,
                                      std::optional<bool> abortOnError = std::nullopt) {
  Options o;
  o.name = name;
  o.timeout = std::chrono::seconds(120);
  o.abortOnError = abortOnError;
  return test::makeCpuComm(rank, size, std::move(store), o);
}

/// A non-blocking stream on the current device.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
};

/// One rank of a twin suite: its GPU comm, its host twin and a stream (made after the comms,
/// which select the rank's GPU).
struct TwinRank {
  int rank = 0;
  int size = 0;
  std::shared_ptr<Store> store;
  std::shared_ptr<Comm> gpu;
  std::shared_ptr<Comm> twin;
  Stream st;
};

/// Runs fn(TwinRank&) on n ranks. Each rank makes its GPU comm with makeGpu(rank, size, store)
/// and its host twin `twinName` first, and finalizes both after fn returned; the test fails with
/// the ranks' log when any rank fails.
template <class MakeGpu, class F>
void runTwinRanksWith(int n, MakeGpu&& makeGpu, const std::string& twinName, F&& fn,
                  std::chrono::seconds timeout = std::chrono::seconds(600)) {
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = makeGpu(rank, size, store);
    auto twin = hostTwin(rank, size, store, twinName);
    TwinRank r{rank, size, store, gpu, twin};  // the stream after the comms: on the rank's GPU
    fn(r);
    r.gpu->finalize();
    r.twin->finalize();
  }, timeout);
  ASSERT_TRUE(res.ok()) << res.log;
}

/// As above with the GPU comm sharedGpuComm(rank, size, store, gpuName).
template <class F>
void runTwinRanks(int n, const std::string& gpuName, const std::string& twinName, F&& fn,
                  std::chrono::seconds timeout = std::chrono::seconds(600)) {
  runTwinRanksWith(
      n, [&](int rank, int size, std::shared_ptr<Store> store) {
        return sharedGpuComm(rank, size, std::move(store), gpuName);
      },
      twinName, std::forward<F>(fn), timeout);
}

/// A CUDA graph of the calls record() enqueues on `s` (captured in `mode`), instantiated once;
/// replay() and launch() run it again, the destructor frees it.
class Graph {
 public:
  template <class Record>
  Graph(cudaStream_t s, Record&& record, cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal)
      : s_(s) {
    CK(cudaStreamBeginCapture(s_, mode));
    record();
    CK(cudaStreamEndCapture(s_, &graph_));
    CK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~Graph() {
    CK(cudaGraphExecDestroy(exec_));
    CK(cudaGraphDestroy(graph_));
  }
  Graph(const Graph&) = delete;

  /// One replay on the capture stream (not synchronized).
  void launch() { CK(cudaGraphLaunch(exec_, s_)); }

  /// `replays` times: refill(rep) (fresh inputs), one replay, a stream sync, check(rep).
  template <class Refill, class Check>
  void replay(int replays, Refill&& refill, Check&& check) {
    for (int rep = 0; rep < replays; ++rep) {
      refill(rep);
      launch();
      CK(cudaStreamSynchronize(s_));
      check(rep);
    }
  }

 private:
  cudaStream_t s_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace gputest

#endif  // CCLX_HAVE_CUDA
