// Shared pieces of the GPU window suites (test_gpu_window, test_gpu_window_vmm): world size, a
// GPU comm per rank (rank r on GPU r % count), an expected error, stream options with a put path.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "helpers/gpu_util.h"

namespace winutil {

using namespace cclx;

/// CCLX_TEST_RANKS, 2..8 (default 2).
inline int worldSize() {
  const char* v = std::getenv("CCLX_TEST_RANKS");
  int n = v && *v ? std::atoi(v) : 2;
  return n < 2 ? 2 : n > 8 ? 8 : n;
}

/// The GPU of rank r: r % the number of GPUs.
inline int deviceOf(int rank) {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  return rank % n;
}

inline std::shared_ptr<Comm> gpuComm(int rank, int size, std::shared_ptr<Store> store,
                                     const char* name,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  Options o;
  o.name = name;
  o.timeout = timeout;
  return Comm::create(DeviceSpec::cuda(deviceOf(rank)), o, std::move(store), rank, size);
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
