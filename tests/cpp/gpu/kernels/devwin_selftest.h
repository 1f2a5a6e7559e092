// Device kernels of tests/cpp/gpu/test_gpu_device_window.cc: cclx's own kernels on device windows
// (cclx::DeviceWindow, <cclx/device_window.cuh>), no torchcomms code. Plain C++ header; the
// `win` arguments are what Window::deviceWindow() returned.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace cclx {
namespace devwintest {

/// A ring of rounds, each block of the grid on its own: block b of rank r fills its source with
/// byteOf(64 r + b, R, i) for round R, puts it into the next rank's window at byte
/// lead + (b * n + r) * block with signal b and counter b, waits for signal b from the previous
/// rank to reach R + 1, checks the previous rank's block (mismatched bytes into *bad), waits for
/// its counter b to reach R + 1 and meets every rank at barrier b. The round numbers live on the
/// device (round[b]: rounds done), so a CUDA graph of launches replays with no host involvement.
/// scope: a DevScope value; the launch is `blocks` blocks of `threads` threads (THREAD: 1, WARP:
/// 32, BLOCK: any). status: the first non-zero status a call returned (0: none).
struct RingArgs {
  void* win;
  char* src;        // blocks * block bytes
  const char* mine;  // this rank's window
  size_t block, lead;
  int scope, iters;
  uint64_t* round;  // [blocks]
  unsigned long long* bad;
  int* status;
};
void launchRing(const RingArgs& a, int blocks, int threads, cudaStream_t s);

/// Checks (1 = passed) of signal SET / ADD and every comparison, aggregated waits, read and reset
/// of signals and counters, stores through peer addresses ordered by fence + signal, argument
/// errors, and the addresses (addrs[r] = peerAddress(r), addrs[n] = multimemAddress(0)). One
/// thread per rank; the window has at least 4 signals, 2 counters, 2 barriers and 512 bytes.
constexpr int kOpsChecks = 16;
void launchOps(void* win, const char* src, int* ok, void** addrs, cudaStream_t s);

/// The failure path, one thread: waitFirst: status = {waitSignalFrom(peer, 0, GE, 1), put,
/// signal, barrier(0)}; else {put, signal, barrier(0), waitSignalFrom(peer, 0, GE, 1)}.
void launchFailure(void* win, const char* src, int peer, bool waitFirst, int* status,
                   cudaStream_t s);

}  // namespace devwintest
}  // namespace cclx
