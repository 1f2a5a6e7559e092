// CclxWindow: torchcomms' TorchCommWindow over one cclx::Window (src/torchcomms), what
// CclxBackend::new_window returns.
//
// Contract (cclx::Window's, include/cclx/cclx.hpp): tensor_register / tensor_deregister / clone
// are collective over the comm (every rank the same element count and dtype; a mismatch fails on
// every rank and registers nothing). put(t, dst, off) copies t into dst's registered tensor at
// element off without dst taking part; signal(dst) adds one to dst's counter for this rank once
// every earlier put from this rank to dst is visible there; wait_signal(src) consumes one signal
// from src. Nothing else orders puts: a rank reads what a peer put only after the wait_signal that
// consumed the peer's later signal. CUDA comms: the three are ordered on the caller's current
// stream (async_op: the returned work holds them; otherwise complete for torchcomms, ordered on
// the stream), capturable in CUDA graphs, and watched by the comm's (or the call's) timeout, which
// names the rank that never signalled. CPU comms: each call has finished when it returns.
//
// Memory: CUDA comms register tensors of the comm's device (any allocation; the allocator of
// torchcomms.get_mem_allocator("cclx") gives memory every cclx transport maps). CPU comms need
// memory peers can map: a CPU tensor whose storage is not in shared memory has its storage moved
// into a new shared-memory file at registration (every view of the storage follows), as cclx's
// Python windows do. map_remote_tensor(r) is a view of r's registered tensor (its shape and dtype)
// where get_attr(r) is UNIFIED, valid until tensor_deregister; it raises otherwise.
//
// Device API (torchcomms' TorchCommDeviceWindow with cclx's backend, CclxDeviceBackend in
// <cclx/torchcomms/device_window.hpp>): get_device_window returns the device address of the
// window's handle (cclx::Window::deviceWindow: collective on the first call, every rank the same
// counts; it lives until tensor_deregister); register_local_buffer gives {data_ptr, nbytes} of a
// tensor of the comm's device (cclx's puts are stores by the calling threads: nothing to
// register) and deregister_local_buffer clears it. Not wired: register_local_buffer_handle /
// deregister_local_buffer_handle (a RegisteredBuffer in device memory, for Triton), which keep
// torchcomms' "not supported" error.
#pragma once

#include "torchcomms/convert.h"

#include <comms/torchcomms/TorchCommWindow.hpp>
#include <comms/torchcomms/TorchWork.hpp>

#include <memory>

// torchcomms releases with the device API (0.3 and later) declare its window methods.
#if __has_include(<comms/torchcomms/device/TorchCommDeviceWindow.hpp>)
#define CCLX_TC_DEVICE_API 1
#else
#define CCLX_TC_DEVICE_API 0
#endif

namespace cclx::tc {

class CclxWindow : public tcx::TorchCommWindow {
 public:
  /// Collective over `comm`: a window with nothing registered.
  CclxWindow(std::shared_ptr<Comm> comm, const at::Device& device);
  ~CclxWindow() override = default;

  void tensor_register(const at::Tensor& tensor, bool owning = true) override;
  void tensor_deregister() override;
  std::shared_ptr<tcx::TorchCommWindow> clone() override;

  c10::intrusive_ptr<tcx::TorchWork> put(const at::Tensor& tensor, int dstRank,
                                         size_t targetOffsetNelems, bool asyncOp,
                                         const tcx::PutOptions& options = {}) override;
  at::Tensor map_remote_tensor(int rank) override;
  c10::intrusive_ptr<tcx::TorchWork> signal(int peerRank, bool asyncOp,
                                            const tcx::SignalOptions& options = {}) override;
  c10::intrusive_ptr<tcx::TorchWork> wait_signal(
      int peerRank, bool asyncOp, const tcx::WaitSignalOptions& options = {}) override;
  std::shared_ptr<tcx::TorchCommWindowAttr> get_attr(int peerRank) override;

#if CCLX_TC_DEVICE_API
  void* get_device_window(int signal_count = -1, int counter_count = -1,
                          int barrier_count = 1) override;
  tcx::RegisteredBuffer register_local_buffer(const at::Tensor& tensor) override;
  void deregister_local_buffer(tcx::RegisteredBuffer& buf) override;
#endif

 private:
  Window& win(const char* what);
  /// The work of one window call: held until done when async on a CUDA comm, else complete.
  c10::intrusive_ptr<tcx::TorchWork> done(bool asyncOp, std::shared_ptr<Work> w,
                                          std::vector<at::Tensor> keep,
                                          std::chrono::milliseconds timeout) const;

  std::shared_ptr<Comm> comm_;
  at::Device device_;
  std::shared_ptr<Window> win_;
};

}  // namespace cclx::tc
