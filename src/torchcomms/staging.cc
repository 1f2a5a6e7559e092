// Device twins for CPU tensors on a CUDA comm (staging.h).
#include "torchcomms/staging.h"

#include <ATen/ATen.h>

#include "torchcomms/convert.h"

namespace cclx::tc {

at::Tensor Staging::in(const at::Tensor& t, const char* what) {
  if (!stagedOn(dev_, t)) {
    // An input is read in a contiguous copy where needed; checkTensor rejects the undefined
    // tensor and any other device.
    at::Tensor c = t.defined() && !t.is_contiguous() ? t.contiguous() : t;
    checkTensor(c, dev_, what);
    return c;
  }
  staged_ = true;
  return t.contiguous().to(dev_, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor Staging::out(const at::Tensor& t, const char* what) {
  if (!stagedOn(dev_, t)) {
    checkTensor(t, dev_, what);
    return t;
  }
  checkTensor(t, t.device(), what);  // defined and contiguous
  staged_ = true;
  at::Tensor twin = t.to(dev_, /*non_blocking=*/false, /*copy=*/true);
  outs_.emplace_back(t, twin);
  return twin;
}

void Staging::complete(Work* w, std::chrono::milliseconds timeout) {
  if (!staged_) return;
  if (w) w->waitBlocking(timeout);
  for (auto& [cpu, twin] : outs_) cpu.copy_(twin);
  outs_.clear();
}

}  // namespace cclx::tc
