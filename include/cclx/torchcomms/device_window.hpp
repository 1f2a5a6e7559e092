// cclx as a backend of torchcomms' device API: the backend traits type beside NCCLX's
// (NCCLDeviceBackend) and Pipes' (PrimsDeviceBackend), so that
// torchcomms::device::TorchCommDeviceWindow<CclxDeviceBackend> (DeviceWindowCclx) runs on cclx's
// peer-memory windows. Host-safe (no device code): include it from C++ that only passes the
// handle around; kernels include <cclx/torchcomms/device_window.cuh>.
//
// Needs torchcomms' headers on the include path (a torchcomms source tree:
// comms/torchcomms/device/TorchCommDeviceWindow.hpp and comms/torchcomms/RegisteredBuffer.hpp);
// nothing else of torchcomms. The handle: Window::deviceWindow() (C++), the window's
// get_device_window() (Python, torchcomms' window of the cclx backend) returns its device address;
// a RegisteredBuffer for put() is {base_ptr, size} of any device memory of this GPU (no
// registration: cclx puts are stores by the calling threads).
#pragma once

#include <cclx/device_window.h>

#include <cstddef>
#include <type_traits>

#include "comms/torchcomms/device/TorchCommDeviceWindow.hpp"

namespace torchcomms::device {

/// Comm: cclx::DeviceWindowComm (failure words, resource areas, counts); Window:
/// cclx::DeviceWindowPeers (every rank's window as mapped here). No create_device_window: the
/// handle comes from the cclx window (host side, above).
struct CclxDeviceBackend {
  using Comm = ::cclx::DeviceWindowComm;
  using Window = ::cclx::DeviceWindowPeers;
};

using DeviceWindowCclx = TorchCommDeviceWindow<CclxDeviceBackend>;
using RegisteredBufferCclx = torch::comms::RegisteredBuffer;

namespace cclx_check {
using H = ::cclx::DeviceWindowHandle;
using T = DeviceWindowCclx;
static_assert(std::is_standard_layout_v<T> && std::is_standard_layout_v<H>);
static_assert(sizeof(T) == sizeof(H) && alignof(T) == alignof(H),
              "TorchCommDeviceWindow<CclxDeviceBackend> must have cclx's handle layout");
static_assert(offsetof(T, comm_) == offsetof(H, comm) && offsetof(T, window_) == offsetof(H, window) &&
              offsetof(T, base_) == offsetof(H, base) && offsetof(T, size_) == offsetof(H, size) &&
              offsetof(T, rank_) == offsetof(H, rank) &&
              offsetof(T, num_ranks_) == offsetof(H, numRanks) &&
              offsetof(T, signal_buffer_handle_) == offsetof(H, signalBufferHandle) &&
              offsetof(T, gin_enabled_) == offsetof(H, ginEnabled),
              "TorchCommDeviceWindow's members moved: cclx's handle layout must follow");
static_assert(int(CmpOp::EQ) == int(::cclx::DevCmp::EQ) && int(CmpOp::NE) == int(::cclx::DevCmp::NE) &&
              int(CmpOp::LT) == int(::cclx::DevCmp::LT) && int(CmpOp::LE) == int(::cclx::DevCmp::LE) &&
              int(CmpOp::GT) == int(::cclx::DevCmp::GT) && int(CmpOp::GE) == int(::cclx::DevCmp::GE));
static_assert(int(SignalOp::SET) == int(::cclx::DevSignalOp::SET) &&
              int(SignalOp::ADD) == int(::cclx::DevSignalOp::ADD));
static_assert(int(CoopScope::THREAD) == int(::cclx::DevScope::THREAD) &&
              int(CoopScope::WARP) == int(::cclx::DevScope::WARP) &&
              int(CoopScope::BLOCK) == int(::cclx::DevScope::BLOCK));
}  // namespace cclx_check

}  // namespace torchcomms::device
