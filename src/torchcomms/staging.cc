// Device twins for CPU tensors on a CUDA comm (staging.h).
#include "torchcomms/staging.h"

#include <ATen/ATen.h>

#include "torchcomms/convert.h"

namespace cclx::tc {

bool Staging::stages(const at::Tensor& t) const {
  return dev_.type() == at::kCUDA && t.device().is_cpu();
}

at::Tensor Staging::in(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw Error(cclxInvalidArgument, std::string(what) + ": undefined tensor");
  at::Tensor c = t.is_contiguous() ? t : t.contiguous();
  if (!stages(c)) {
    checkTensor(c, dev_, what);
    return c;
  }
  staged_ = true;
  return c.to(dev_, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor Staging::out(const at::Tensor& t, const char* what) {
  if (!t.defined() || !stages(t)) {
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
