// Shared pieces of the GPU window suites (test_gpu_window, test_gpu_window_vmm): world size, the
// per-rank setup and teardown (a GPU comm per rank, rank r on GPU r % count, and a stream; the
// harness is helpers/gpu_ranks.h), an expected error, stream options with a put path.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"

namespace winutil {

using namespace cclx;

/// CCLX_TEST_RANKS, 2..8 (default 2).
inline int worldSize() { return gputest::sharedWorldSize(2); }

using gputest::deviceOf;

inline std::shared_ptr<Comm> gpuComm(int rank, int size, std::shared_ptr<Store> store,
                                     const char* name,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  return gputest::sharedGpuComm(rank, size, std::move(store), name, timeout);
}

/// Runs fn(comm, rank, n, s) on worldSize() ranks: each makes its GPU comm `name` (its GPU the
/// current device) and a non-blocking stream s first, and destroys them after fn. Returns the
/// ranks' result.
template <typename F>
test::MpResult onWindowRanks(const char* name, F&& fn,
                             std::chrono::milliseconds commTimeout = std::chrono::seconds(120),
                             std::chrono::seconds timeout = std::chrono::seconds(300)) {
  return test::runRanks(worldSize(), [&](int rank, int n, std::shared_ptr<Store> store) {
    auto comm = gpuComm(rank, n, store, name, commTimeout);
    CK(cudaSetDevice(deviceOf(rank)));
    gputest::Stream st;
    fn(*comm, rank, n, st.s);
  }, timeout);
}

/// Runs f, which must throw cclx::Error with `code`; returns the message.
template <typename F>
std::string expectError(cclxResult_t code, F&& f, const char* what) {
  try {
    f();
  } catch (const Error& e) {
    MP_CHECK(e.code() == code, "%s: code %d (%s), want %d", what, int(e.code()), e.what(),
             int(code));
    return e.what();
  }
  MP_CHECK(false, "%s succeeded", what);
  return "";
}

/// Options of a window call on stream s, with hint put_path when given.
inline CollOptions on(cudaStream_t s, const char* path = nullptr) {
  CollOptions o;
  o.stream = s;
  if (path) o.hints["put_path"] = path;
  return o;
}

}  // namespace winutil
