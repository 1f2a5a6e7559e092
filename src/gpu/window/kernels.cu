// Device side of one-sided windows (gpu/window/window.h): put by SM stores, signal, wait.
// Every kernel follows the failure model (device/fail.cuh): it reads the comm's abort word at
// entry and pushes nothing to a peer once it is raised, and its one spin loop polls through a
// dev::Waiter.
#include "gpu/device/copy.cuh"
#include "gpu/device/sync.cuh"
#include "gpu/device/launch.cuh"
#include "gpu/window/window.h"

namespace cclx {
namespace {

// Put: plain stores into the destination's window (peer memory, or this rank's own). Nothing
// orders them here: the kernel's completion does, and the signal kernel that follows in stream
// order publishes them (see winSignalKernel). Entry: with the abort word raised nothing is
// written to the peer.
__global__ void winPutKernel(WinPutParams p) {
  if (dev::abortedAtEntry(p.fail)) return;
  dev::copyBytes(p.src, p.dst, p.bytes, size_t(blockIdx.x) * blockDim.x + threadIdx.x,
                 size_t(gridDim.x) * blockDim.x);
}

// Signal: counts[me] in the destination's slot += 1, release-ordered at system scope. Every
// earlier put of this rank to that destination came before this kernel in stream order (the host
// orders streams, WinCalls) and therefore completed: its stores (SM stores of a finished kernel,
// or a finished copy-engine copy) are performed at the destination. The system fence and the
// release add order them, and everything else this GPU wrote before, before the new count for
// any reader that loads it with acquire. With the abort word raised nothing is signalled: the
// destination's wait then stops on the abort word, never on data that did not arrive.
__global__ void winSignalKernel(WinSignalParams p) {
  if (dev::abortedAtEntry(p.fail)) return;
  if (threadIdx.x == 0) {
    dev::fenceSystem();
    dev::atomAddReleaseSys(p.count, 1);
  }
}

// Wait: the next signal from src is number waited[src] + 1; thread 0 spins (acquire, system
// scope, through a Waiter) until counts[src] reaches it, the block barrier then orders every
// later access of the stream after that acquire. Exit paths: success, abort at entry, and a wait
// that stopped (abort word, host request, deadline: recorded in the error words, the abort word
// raised on every rank with src as the missing rank) all advance waited[src]; the last two
// poison the whole window first (0xFF bytes), so a consumer never reads stale data as new.
__global__ void winWaitKernel(WinWaitParams p) {
  const uint64_t target = *p.waited + 1;
  bool failed = dev::abortedAtEntry(p.fail);  // also the barrier after every thread read waited
  if (!failed) {
    int stop = 0;
    if (threadIdx.x == 0) {
      dev::Waiter w(p.fail, dev::deadlineAfter(p.fail.timeoutNs));
      stop = !dev::waitFlagGE(p.count, target, w, p.src);
    }
    failed = dev::syncThreadsOr(stop) != 0;
  }
  if (failed) dev::poisonAll(p.window, p.bytes);
  dev::fenceAfterWait();
  __syncthreads();
  if (threadIdx.x == 0) *p.waited = target;
}

// A slot taken for a new window: what its waits consumed starts at what was sent into it
// (no signal is in flight into a free slot, see ipc.cc).
__global__ void winBaselineKernel(char* slot, int n) {
  const int r = threadIdx.x;
  if (r < n)
    reinterpret_cast<uint64_t*>(slot + kWinWaitedOffset)[r] =
        *reinterpret_cast<const uint64_t*>(slot + size_t(r) * kWinCountStride);
}

}  // namespace

void launchWinPut(const WinPutParams& p, int blocks, void* stream) {
  dev::launchKernel("window put", winPutKernel, blocks, 512, stream, p);
}

void launchWinSignal(const WinSignalParams& p, void* stream) {
  dev::launchKernel("window signal", winSignalKernel, 1, 32, stream, p);
}

void launchWinWait(const WinWaitParams& p, void* stream) {
  dev::launchKernel("window wait", winWaitKernel, 1, 256, stream, p);
}

void launchWinBaseline(char* slot, int n, void* stream) {
  dev::launchKernel("window baseline", winBaselineKernel, 1, 32, stream, slot, n);
}

}  // namespace cclx
