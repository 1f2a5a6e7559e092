// The local part of the unfused allreduce + RMSNorm sequence: residual add, norm and FP8
// quantization of every row from the allreduce result, with gpu/fused/row.cuh's epilogue (the
// same bits as the fused kernels and the host twin).
//
// Contract: no peer memory and no waiting; block b handles rows b, b + G, ...; each thread reads
// its vectors of `ar` and `residual` before it writes the same vectors of the outputs, so ar may be
// the output y (the allreduce ran into it) or x (in place), and residualOut may be residual.
#include "gpu/fused/row.cuh"

#include "gpu/fused/fused.h"

namespace cclx {
namespace {

using namespace fused;

template <class T>
__global__ void __launch_bounds__(512) rmsLocalKernel(RowArgs a, const char* ar) {
  __shared__ RowShared sh;
  const RowOps<T> ops(a);
  for (size_t row = blockIdx.x; row < a.tokens; row += gridDim.x) {
    float acc[kMaxAcc] = {};
    int i = 0;
    for (size_t v = threadIdx.x; v < ops.V; v += blockDim.x, ++i) {
      Words x, r;
      ops.load(ar, row, v, x);
      ops.residual(row, v, i, x, r, acc);
    }
    ops.finishRow(row, acc, sh, [](size_t, const Words&) {}, [](size_t, const uint32_t*) {},
                  [](float) {});
  }
}

}  // namespace

void launchRmsLocal(const CollArgs& a, const void* ar, const DeviceCtx& ctx, void* stream) {
  constexpr const char* kWhat = "RMSNorm epilogue";
  const auto kernel = dev::dispatchDtype(dev::RowTypes{}, a.dtype, kWhat,
                                         [&]<class T>() { return &rmsLocalKernel<T>; });
  const RmsNormArgs& m = a.rms;
  if (m.tokens == 0) return;
  const RowArgs args{static_cast<const char*>(m.x), static_cast<const char*>(m.residual),
                     static_cast<char*>(m.residualOut), static_cast<const char*>(m.weight),
                     static_cast<char*>(m.out), static_cast<uint8_t*>(m.fp8Out), m.scales,
                     m.staticScale, m.tokens, m.hidden, m.eps};
  const int threads = rowThreads(rms::rowVecs(m.hidden, dtypeSize(a.dtype)));
  const int sms = ctx.smCount > 0 ? ctx.smCount : 32;
  const int grid = int(std::min<size_t>(m.tokens, size_t(sms) * (2048 / threads)));
  dev::launchKernel(kWhat, kernel, grid, threads, stream, args, static_cast<const char*>(ar));
}

}  // namespace cclx
