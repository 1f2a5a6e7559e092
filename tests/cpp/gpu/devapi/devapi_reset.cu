// cclx's kernels beside torchcomms' device-API test kernels (devapi_reset.h).
#include "gpu/devapi/devapi_reset.h"

#include "comms/torchcomms/device/ncclx/TorchCommDeviceNCCLX.cuh"

namespace cclx::devapitest {

namespace {

using torchcomms::device::CmpOp;
using torchcomms::device::CoopScope;
using torchcomms::device::DeviceWindowNCCL;
using torchcomms::device::RegisteredBufferNCCL;
using torchcomms::device::SignalOp;

// One thread: this rank's signals back to 0, then every rank's arrival (contract in the header).
__global__ void resetSignalsKernel(DeviceWindowNCCL* win, int signals, int barrierId,
                                   int* status) {
  for (int s = 0; s < signals; ++s) win->reset_signal(s);
  *status = win->barrier(barrierId);
}

// Contract: devapi_reset.h (launchBadArguments).
constexpr int kBad = kBadArgumentCalls;
__global__ void badArgumentsKernel(DeviceWindowNCCL* win, RegisteredBufferNCCL src, int* status) {
  const int n = win->num_ranks();
  const size_t size = win->size();
  int i = 0;
  status[i++] = win->put(0, src, 0, n, 4, -1, -1);                 // rank out of range
  status[i++] = win->put(size - 2, src, 0, 0, 4, -1, -1);          // past the window's end
  status[i++] = win->put(0, src, src.size, 0, 4, -1, -1);          // past the source's end
  status[i++] = win->put(0, src, 0, 0, 4, 1 << 20, -1);            // signal id out of range
  status[i++] = win->put(0, src, 0, 0, 4, -1, 1 << 20);            // counter id out of range
  status[i++] = win->signal(-1, 0, SignalOp::ADD, 1);              // rank out of range
  status[i++] = win->signal(0, -1, SignalOp::ADD, 1);              // signal id out of range
  status[i++] = win->signal(0, 0, SignalOp(7), 1);                 // unknown operation
  status[i++] = win->wait_signal(1 << 20, CmpOp::GE, 0);           // signal id out of range
  status[i++] = win->wait_signal_from(n, 0, CmpOp::GE, 0);         // rank out of range
  status[i++] = win->barrier(1 << 20);                             // barrier id out of range
  status[i++] = win->flush(CoopScope(9));                          // unknown scope
  status[kBad] = win->barrier(0);
}

}  // namespace

void launchResetSignals(DeviceWindowNCCL* win, int signals, int barrierId, int* status,
                        cudaStream_t stream) {
  resetSignalsKernel<<<1, 1, 0, stream>>>(win, signals, barrierId, status);
}

void launchBadArguments(DeviceWindowNCCL* win, RegisteredBufferNCCL src, int* status,
                        cudaStream_t stream) {
  badArgumentsKernel<<<1, 1, 0, stream>>>(win, src, status);
}

}  // namespace cclx::devapitest
