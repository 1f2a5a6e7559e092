// torchcomms' TorchCommDeviceWindow methods for the cclx backend (CclxDeviceBackend,
// <cclx/torchcomms/device_window.hpp>): each forwards to cclx's device-window code
// (src/gpu/devwin/ops.cuh), so both APIs share one implementation. Device code: nvcc, with
// torchcomms' source tree and cclx's include/ and src/ on the include path.
//
// Return values: 0, -1 (a bad argument: nothing done) or -2 (the window failed: a wait passed the
// comm's timeout or the comm was aborted; the host sees why through the comm's error words).
// read_signal / read_counter return 0 for a bad id; reset_signal / reset_counter (void) ignore
// one. put's counter_id counts local completion (the source may be reused); puts are stores by
// the calling threads, so flush() is a barrier of the group and fence() a system-scope fence.
// get_multimem_address() is null (no multicast). docs/design/device-window.md.
#pragma once

#if !defined(__CUDACC__)
#error "<cclx/torchcomms/device_window.cuh> is device code: compile it with nvcc"
#endif

#include <cclx/device_window.cuh>
#include <cclx/torchcomms/device_window.hpp>

namespace torchcomms::device {

namespace cclx_detail {
__device__ __forceinline__ ::cclx::DevScope scopeOf(CoopScope s) {
  return ::cclx::DevScope(int(s));
}
__device__ __forceinline__ ::cclx::DevCmp cmpOf(CmpOp c) { return ::cclx::DevCmp(int(c)); }
}  // namespace cclx_detail

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::signal(int peer, int signal_id,
                                                                       SignalOp op, uint64_t value,
                                                                       CoopScope scope) {
  return ::cclx::devwin::signal(comm_, peer, signal_id, ::cclx::DevSignalOp(int(op)), value,
                                cclx_detail::scopeOf(scope));
}

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::put(
    size_t dst_offset, const torch::comms::RegisteredBuffer& src_buf, size_t src_offset,
    int dst_rank, size_t bytes, int signal_id, int counter_id, CoopScope scope) {
  return ::cclx::devwin::put(comm_, window_, dst_offset, src_buf.base_ptr, src_buf.size,
                             src_offset, dst_rank, bytes, signal_id, counter_id,
                             cclx_detail::scopeOf(scope));
}

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::wait_signal(int signal_id,
                                                                            CmpOp cmp,
                                                                            uint64_t value,
                                                                            CoopScope scope) {
  return ::cclx::devwin::waitSignal(comm_, window_, signal_id, -1, cclx_detail::cmpOf(cmp), value,
                                    cclx_detail::scopeOf(scope));
}

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::wait_signal_from(
    int peer, int signal_id, CmpOp cmp, uint64_t value, CoopScope scope) {
  if (peer < 0) return ::cclx::kDevWinInvalid;
  return ::cclx::devwin::waitSignal(comm_, window_, signal_id, peer, cclx_detail::cmpOf(cmp),
                                    value, cclx_detail::scopeOf(scope));
}

template <>
__device__ inline uint64_t TorchCommDeviceWindow<CclxDeviceBackend>::read_signal(
    int signal_id) const {
  return ::cclx::devwin::readSignal(comm_, signal_id);
}

template <>
__device__ inline void TorchCommDeviceWindow<CclxDeviceBackend>::reset_signal(int signal_id,
                                                                              CoopScope scope) {
  ::cclx::devwin::resetSignal(comm_, signal_id, cclx_detail::scopeOf(scope));
}

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::wait_counter(int counter_id,
                                                                             CmpOp cmp,
                                                                             uint64_t value,
                                                                             CoopScope scope) {
  return ::cclx::devwin::waitCounter(comm_, window_, counter_id, cclx_detail::cmpOf(cmp), value,
                                     cclx_detail::scopeOf(scope));
}

template <>
__device__ inline uint64_t TorchCommDeviceWindow<CclxDeviceBackend>::read_counter(
    int counter_id) const {
  return ::cclx::devwin::readCounter(comm_, counter_id);
}

template <>
__device__ inline void TorchCommDeviceWindow<CclxDeviceBackend>::reset_counter(int counter_id,
                                                                               CoopScope scope) {
  ::cclx::devwin::resetCounter(comm_, counter_id, cclx_detail::scopeOf(scope));
}

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::fence() {
  return ::cclx::devwin::fence();
}

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::flush(CoopScope scope) {
  return ::cclx::devwin::flush(cclx_detail::scopeOf(scope));
}

template <>
__device__ inline int TorchCommDeviceWindow<CclxDeviceBackend>::barrier(int barrier_id,
                                                                        CoopScope scope) {
  return ::cclx::devwin::barrier(comm_, window_, barrier_id, cclx_detail::scopeOf(scope));
}

template <>
__device__ inline void* TorchCommDeviceWindow<CclxDeviceBackend>::get_nvlink_address(int peer) {
  return ::cclx::devwin::peerAddress(comm_, window_, peer);
}

template <>
__device__ inline void* TorchCommDeviceWindow<CclxDeviceBackend>::get_multimem_address(
    size_t offset) {
  return ::cclx::devwin::multimemAddress(offset);
}

}  // namespace torchcomms::device
