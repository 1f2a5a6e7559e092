// Fused allreduce + residual add + RMSNorm (+ FP8) on GPUs (Comm::allReduceRmsNorm): the one-shot
// and two-shot peer kernels, each a DeviceAlgo (gpu/algo.h), and the local epilogue kernel of the
// unfused sequence (an allreduce, then this kernel on its result). core/elements/rmsnorm.h holds the
// element rules, core/select/select.cc when each runs, host/algos/rmsnorm.cc the CPU twins. Plain C++.
#pragma once

#include <memory>

#include "gpu/algo.h"

namespace cclx {

std::unique_ptr<DeviceAlgo> makeFusedOneShot();  // "fused_oneshot" (oneshot.cu)
std::unique_ptr<DeviceAlgo> makeFusedTwoShot();  // "fused_twoshot" (twoshot.cu)

/// Enqueues the residual add, norm and quantization of every row of `a` (an AllReduceRmsNorm) on
/// `stream` from `ar`, the allreduce result of a.rms.x (the layout of x; may be a.rms.out or
/// a.rms.x). One kernel, no peer memory (local.cu).
void launchRmsLocal(const CollArgs& a, const void* ar, const DeviceCtx& ctx, void* stream);

}  // namespace cclx
