// cclx::DeviceWindow: one-sided communication from inside a kernel on a cclx window (the handle
// of Window::deviceWindow(), <cclx/device_window.h>). Device code: compile with nvcc, with cclx's
// include/ and src/ folders on the include path (the CMake target cclx::device gives both). The
// same methods under torchcomms' names: <cclx/torchcomms/device_window.cuh>.
//
//   __global__ void k(cclx::DeviceWindow* win, const float* src, size_t n) {
//     const int next = (win->rank() + 1) % win->numRanks();
//     win->put(win->rank() * n * 4, src, n * 4, next, /*signalId=*/0, -1, cclx::DevScope::BLOCK);
//     win->waitSignal(0, cclx::DevCmp::GE, 1, cclx::DevScope::BLOCK);  // the previous rank's data
//   }
//   k<<<1, 256, 0, stream>>>(static_cast<cclx::DeviceWindow*>(w->deviceWindow()), src, n);
//
// What each call guarantees, costs and returns (kDevWinOk, kDevWinInvalid, kDevWinFailed):
// src/gpu/devwin/ops.cuh, docs/design/device-window.md. Every method with a DevScope is called by
// the whole group (one thread, a full converged warp, or the whole block) with equal arguments.
#pragma once

#if !defined(__CUDACC__)
#error "<cclx/device_window.cuh> is device code: compile it with nvcc (host code: <cclx/device_window.h>)"
#endif

#include <cclx/device_window.h>

#include <type_traits>

#include "gpu/devwin/ops.cuh"

namespace cclx {

struct DeviceWindow : DeviceWindowHandle {
  __device__ int rank() const { return comm.rank; }
  __device__ int numRanks() const { return comm.size; }
  __device__ void* data() const { return base; }
  __device__ size_t bytes() const { return size; }

  /// Copies `bytes` from src (device memory of this GPU) into rank dst's window at byte
  /// dstOffset; then counter counterId += 1 and dst's signal signalId (from this rank) += 1,
  /// when >= 0.
  __device__ int put(size_t dstOffset, const void* src, size_t bytes, int dst, int signalId = -1,
                     int counterId = -1, DevScope scope = DevScope::THREAD) {
    return devwin::put(comm, window, dstOffset, src, 0, 0, dst, bytes, signalId, counterId, scope);
  }
  /// Signal signalId of rank peer, slot of this rank: = value (SET) or += value (ADD), after the
  /// group's earlier stores.
  __device__ int signal(int peer, int signalId, DevSignalOp op = DevSignalOp::ADD,
                        uint64_t value = 1, DevScope scope = DevScope::THREAD) {
    return devwin::signal(comm, peer, signalId, op, value, scope);
  }
  /// Waits until the sum of this rank's slots of signalId <cmp> value.
  __device__ int waitSignal(int signalId, DevCmp cmp, uint64_t value,
                            DevScope scope = DevScope::THREAD) {
    return devwin::waitSignal(comm, window, signalId, -1, cmp, value, scope);
  }
  /// Waits until this rank's slot of signalId from `peer` <cmp> value.
  __device__ int waitSignalFrom(int peer, int signalId, DevCmp cmp, uint64_t value,
                                DevScope scope = DevScope::THREAD) {
    if (peer < 0) return kDevWinInvalid;
    return devwin::waitSignal(comm, window, signalId, peer, cmp, value, scope);
  }
  __device__ uint64_t readSignal(int signalId) const { return devwin::readSignal(comm, signalId); }
  __device__ void resetSignal(int signalId, DevScope scope = DevScope::THREAD) {
    devwin::resetSignal(comm, signalId, scope);
  }
  __device__ int waitCounter(int counterId, DevCmp cmp, uint64_t value,
                             DevScope scope = DevScope::THREAD) {
    return devwin::waitCounter(comm, window, counterId, cmp, value, scope);
  }
  __device__ uint64_t readCounter(int counterId) const {
    return devwin::readCounter(comm, counterId);
  }
  __device__ void resetCounter(int counterId, DevScope scope = DevScope::THREAD) {
    devwin::resetCounter(comm, counterId, scope);
  }
  __device__ int fence() { return devwin::fence(); }
  __device__ int flush(DevScope scope = DevScope::THREAD) { return devwin::flush(scope); }
  __device__ int barrier(int barrierId, DevScope scope = DevScope::THREAD) {
    return devwin::barrier(comm, window, barrierId, scope);
  }
  /// Rank peer's window as this GPU addresses it (loads and stores; this rank: its own).
  __device__ void* peerAddress(int peer) const { return devwin::peerAddress(comm, window, peer); }
  /// Always null: cclx makes no multicast mappings.
  __device__ void* multimemAddress(size_t offset = 0) const {
    return devwin::multimemAddress(offset);
  }
};

static_assert(sizeof(DeviceWindow) == sizeof(DeviceWindowHandle) &&
                  std::is_standard_layout_v<DeviceWindow>,
              "DeviceWindow is the handle's layout");

}  // namespace cclx
