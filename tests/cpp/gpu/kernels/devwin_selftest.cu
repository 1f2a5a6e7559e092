// cclx's own device-window kernels for the GPU tests (devwin_selftest.h): every method of
// cclx::DeviceWindow, without torchcomms.
#include <cclx/device_window.cuh>

#include "gpu/kernels/devwin_selftest.h"
#include "gpu/kernels/window_selftest.h"

namespace cclx {
namespace devwintest {
namespace {

__device__ void note(int* status, int st) {
  if (st != kDevWinOk) atomicCAS(status, 0, st);
}

// Contract: launchRing in the header.
__global__ void ringKernel(RingArgs a) {
  auto* w = static_cast<DeviceWindow*>(a.win);
  const DevScope sc = DevScope(a.scope);
  const int b = int(blockIdx.x), t = int(threadIdx.x), nt = int(blockDim.x);
  const int rank = w->rank(), n = w->numRanks(), next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const uint64_t r0 = a.round[b];
  char* src = a.src + size_t(b) * a.block;
  const char* from = a.mine + a.lead + (size_t(b) * n + prev) * a.block;
  __syncthreads();  // every thread read the round before thread 0 moves it
  for (int k = 0; k < a.iters; ++k) {
    const uint64_t r = r0 + uint64_t(k);
    for (size_t i = size_t(t); i < a.block; i += size_t(nt))
      src[i] = char(wintest::byteOf(rank * 64 + b, r, i));
    __syncthreads();
    note(a.status, w->put(a.lead + (size_t(b) * n + rank) * a.block, src, a.block, next, b, b, sc));
    note(a.status, w->waitSignalFrom(prev, b, DevCmp::GE, r + 1, sc));
    unsigned long long bad = 0;
    for (size_t i = size_t(t); i < a.block; i += size_t(nt))
      bad += uint8_t(from[i]) != wintest::byteOf(prev * 64 + b, r, i);
    if (bad) atomicAdd(a.bad, bad);
    note(a.status, w->waitCounter(b, DevCmp::GE, r + 1, sc));
    __syncthreads();  // every thread's check before this rank's arrival
    note(a.status, w->barrier(b, sc));
  }
  if (t == 0) a.round[b] = r0 + uint64_t(a.iters);
}

// Contract: launchOps in the header.
__global__ void opsKernel(DeviceWindow* w, const char* src, int* ok, void** addrs) {
  const int rank = w->rank(), n = w->numRanks(), next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int i = 0;
  ok[i++] = w->signal(next, 1, DevSignalOp::SET, 100 + rank) == 0;
  // The barrier: no rank adds to a slot before its owner saw the value set.
  ok[i++] = w->waitSignalFrom(prev, 1, DevCmp::EQ, 100 + prev) == 0 && w->barrier(1) == 0;
  ok[i++] = w->signal(next, 1, DevSignalOp::ADD, 5) == 0;
  ok[i++] = w->waitSignalFrom(prev, 1, DevCmp::EQ, 105 + prev) == 0;
  const uint64_t v = 105 + prev;
  ok[i++] = w->waitSignalFrom(prev, 1, DevCmp::GT, v - 1) == 0 &&
            w->waitSignalFrom(prev, 1, DevCmp::GE, v) == 0 &&
            w->waitSignalFrom(prev, 1, DevCmp::NE, 0) == 0 &&
            w->waitSignalFrom(prev, 1, DevCmp::LE, v) == 0 &&
            w->waitSignalFrom(prev, 1, DevCmp::LT, v + 1) == 0;
  ok[i++] = w->readSignal(1) == v;
  bool all = true;
  for (int r = 0; r < n; ++r) all = all && w->signal(r, 2, DevSignalOp::ADD, 1) == 0;
  ok[i++] = all && w->waitSignal(2, DevCmp::EQ, uint64_t(n)) == 0;
  ok[i++] = w->readSignal(2) == uint64_t(n);
  ok[i++] = w->barrier(1) == 0;  // every rank read signal 2 before anyone resets it
  w->resetSignal(2);
  ok[i++] = w->readSignal(2) == 0;
  // A put to this rank's own window counts its local completion.
  ok[i++] = w->put(0, src, 64, rank, -1, 1) == 0 && w->waitCounter(1, DevCmp::EQ, 1) == 0 &&
            w->readCounter(1) == 1;
  w->resetCounter(1);
  ok[i++] = w->readCounter(1) == 0;
  // A plain store through the next rank's address, published by fence + signal.
  auto* there = static_cast<uint32_t*>(w->peerAddress(next));
  there[64 + rank] = 0xC0DE0000u + uint32_t(rank);
  ok[i++] = w->fence() == 0 && w->signal(next, 3) == 0 &&
            w->waitSignalFrom(prev, 3, DevCmp::GE, 1) == 0 &&
            static_cast<const uint32_t*>(w->data())[64 + prev] == 0xC0DE0000u + uint32_t(prev);
  // Argument errors: nothing done.
  ok[i++] = w->put(w->bytes() - 2, src, 4, next) == kDevWinInvalid &&
            w->put(0, src, 4, n) == kDevWinInvalid && w->signal(next, 99) == kDevWinInvalid &&
            w->waitSignal(99, DevCmp::GE, 0) == kDevWinInvalid &&
            w->waitSignalFrom(-1, 0, DevCmp::GE, 0) == kDevWinInvalid &&
            w->waitCounter(99, DevCmp::GE, 0) == kDevWinInvalid &&
            w->barrier(99) == kDevWinInvalid && w->flush(DevScope(5)) == kDevWinInvalid &&
            w->readSignal(99) == 0 && w->readCounter(99) == 0;
  for (int r = 0; r < n; ++r) addrs[r] = w->peerAddress(r);
  addrs[n] = w->multimemAddress(0);
  ok[i++] = w->peerAddress(n) == nullptr && w->peerAddress(-1) == nullptr &&
            w->multimemAddress(4096) == nullptr && w->flush() == 0;
  ok[i++] = w->barrier(0) == 0;
}

// Contract: launchFailure in the header.
__global__ void failureKernel(DeviceWindow* w, const char* src, int peer, bool waitFirst,
                              int* status) {
  int i = 0;
  if (waitFirst) status[i++] = w->waitSignalFrom(peer, 0, DevCmp::GE, 1);
  status[i++] = w->put(0, src, 4, peer, 0);
  status[i++] = w->signal(peer, 0);
  status[i++] = w->barrier(0);
  if (!waitFirst) status[i++] = w->waitSignalFrom(peer, 0, DevCmp::GE, 1);
}

}  // namespace

void launchRing(const RingArgs& a, int blocks, int threads, cudaStream_t s) {
  ringKernel<<<blocks, threads, 0, s>>>(a);
}

void launchOps(void* win, const char* src, int* ok, void** addrs, cudaStream_t s) {
  opsKernel<<<1, 1, 0, s>>>(static_cast<DeviceWindow*>(win), src, ok, addrs);
}

void launchFailure(void* win, const char* src, int peer, bool waitFirst, int* status,
                   cudaStream_t s) {
  failureKernel<<<1, 1, 0, s>>>(static_cast<DeviceWindow*>(win), src, peer, waitFirst, status);
}

}  // namespace devwintest
}  // namespace cclx
