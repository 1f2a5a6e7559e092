// CPU tensors on a CUDA comm (src/torchcomms). torchcomms' backends take host tensors on a GPU
// communicator (c10d routes both devices of a process group to one comm, and
// TorchComm.tensor_register documents CPU collectives on it); cclx's CUDA comms move device
// memory only, so the backend stages such tensors through device twins.
//
// Contract: an operation with at least one staged tensor completes inside the call, whatever
// async_op asks. Inputs are copied to the device on the caller's current stream before the
// operation is enqueued; the operation runs on the comm's internal stream, which waits for that
// stream; the host then waits for the operation (its error or timeout is raised, and no output
// is written back) and copies every staged output back. Its TorchWork is complete when returned.
// Tensors already on the comm's device are used in place, as without staging.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cclx/cclx.hpp>

#include <chrono>
#include <utility>
#include <vector>

namespace cclx::tc {

/// True when `t` goes through a device twin on a comm on `commDev`: a CPU tensor on a CUDA comm.
inline bool stagedOn(const at::Device& commDev, const at::Tensor& t) {
  return commDev.type() == at::kCUDA && t.defined() && t.device().is_cpu();
}

class Staging {
 public:
  explicit Staging(const at::Device& dev) : dev_(dev) {}
  /// `t` as the operation reads it: contiguous and on the comm's device (a CPU tensor on a CUDA
  /// comm: a device copy). Throws for an undefined tensor or one on another device.
  at::Tensor in(const at::Tensor& t, const char* what);
  /// `t` as the operation writes it: `t` itself when on the comm's device; for a CPU tensor on a
  /// CUDA comm a device twin holding its contents, copied back by complete(). Outputs must be
  /// contiguous.
  at::Tensor out(const at::Tensor& t, const char* what);
  /// True once a tensor of this operation went through a device twin.
  bool staged() const { return staged_; }
  /// Staged operations: waits on the host for `w` (throws its error; outputs stay untouched),
  /// then copies the twins back into the caller's tensors.
  void complete(Work* w, std::chrono::milliseconds timeout);

 private:
  at::Device dev_;
  bool staged_ = false;
  std::vector<std::pair<at::Tensor, at::Tensor>> outs_;  // (caller's CPU tensor, device twin)
};

}  // namespace cclx::tc
