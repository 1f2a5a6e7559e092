// Device-side codec checks (see fp8_selftest.h). Test support only; not used by the collectives.
#include <cuda_runtime.h>

#include "algos/fp8_device.cuh"
#include "algos/fp8_selftest.h"
#include "core/error.h"

namespace cclx {
namespace fp8 {
namespace {

#define FP8_CK(call)                                                                   \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    CCLX_REQUIRE(e_ == cudaSuccess, cclxCudaError, "%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

// Each thread checks a strided set of patterns; counts go to *count, the smallest bad pattern to
// *first (atomicMin). No inter-thread waiting.
__global__ void cvtCheckKernel(unsigned long long* count, uint32_t* first) {
  uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (1ull << 32); u += 2 * stride) {
    uint32_t a = uint32_t(u), b = uint32_t(u + stride < (1ull << 32) ? u + stride : u);
    float x0 = __uint_as_float(a), x1 = __uint_as_float(b);
    uint32_t hw = fp8dev::cvtPair(x0, x1);
    bool nan0 = (a & 0x7fffffffu) > 0x7f800000u, nan1 = (b & 0x7fffffffu) > 0x7f800000u;
    if (!nan0 && (hw & 0xffu) != f32ToE4m3(x0)) { atomicAdd(count, 1ull); atomicMin(first, a); }
    if (!nan1 && b != a && (hw >> 8) != f32ToE4m3(x1)) { atomicAdd(count, 1ull); atomicMin(first, b); }
  }
}

__global__ void cvtKernel(const float* in, size_t n, uint8_t* out) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = uint8_t(fp8dev::cvtPair(in[i], 0.f) & 0xffu);
}

// One group of B/16 lanes per block of B values; all lanes reach the shuffles.
template <int B>
__global__ void roundTripKernel(const float* in, size_t nb, uint8_t* codes, Meta* metas, float* out) {
  constexpr int G = B / fp8dev::kEPT, GPC = fp8dev::kThreads / G;
  const int lane = threadIdx.x % G, grp = threadIdx.x / G;
  const size_t blk = size_t(blockIdx.x) * GPC + grp;
  const bool act = blk < nb;
  float v[fp8dev::kEPT];
  size_t i0 = act ? blk * B + size_t(lane) * fp8dev::kEPT : 0;
  fp8dev::load16(in, i0, act ? fp8dev::kEPT : 0, v);
  Meta meta;
  uint4 c = fp8dev::quantize16(v, G, meta);
  if (!act) return;
  *reinterpret_cast<uint4*>(codes + i0) = c;
  if (lane == 0) metas[blk] = meta;
  fp8dev::dequantize16(c, meta, v);
  fp8dev::store16(out, i0, fp8dev::kEPT, v);
}

template <class T>
struct DevArr {
  T* p = nullptr;
  explicit DevArr(size_t n) { FP8_CK(cudaMalloc(&p, n * sizeof(T) + 16)); }
  ~DevArr() { (void)cudaFree(p); }
};

}  // namespace

uint64_t deviceCvtMismatches(uint32_t* first) {
  DevArr<unsigned long long> count(1);
  DevArr<uint32_t> f(1);
  FP8_CK(cudaMemset(count.p, 0, 8));
  FP8_CK(cudaMemset(f.p, 0xff, 4));
  cvtCheckKernel<<<4096, 256>>>(count.p, f.p);
  FP8_CK(cudaGetLastError());
  FP8_CK(cudaDeviceSynchronize());
  unsigned long long c = 0;
  FP8_CK(cudaMemcpy(&c, count.p, 8, cudaMemcpyDeviceToHost));
  FP8_CK(cudaMemcpy(first, f.p, 4, cudaMemcpyDeviceToHost));
  return c;
}

void deviceCvt(const float* in, size_t n, uint8_t* out) {
  if (n == 0) return;
  DevArr<float> din(n);
  DevArr<uint8_t> dout(n);
  FP8_CK(cudaMemcpy(din.p, in, n * 4, cudaMemcpyHostToDevice));
  cvtKernel<<<unsigned((n + 255) / 256), 256>>>(din.p, n, dout.p);
  FP8_CK(cudaGetLastError());
  FP8_CK(cudaMemcpy(out, dout.p, n, cudaMemcpyDeviceToHost));
}

void deviceRoundTrip(const float* in, size_t nb, int B, uint8_t* codes, Meta* metas, float* out) {
  CCLX_ARG_CHECK(B == 32 || B == 64 || B == 128 || B == 256, "block size %d", B);
  if (nb == 0) return;
  const size_t n = nb * size_t(B);
  DevArr<float> din(n), dout(n);
  DevArr<uint8_t> dc(n);
  DevArr<Meta> dm(nb);
  FP8_CK(cudaMemcpy(din.p, in, n * 4, cudaMemcpyHostToDevice));
  const size_t gpc = size_t(fp8dev::kThreads) / size_t(B / fp8dev::kEPT);
  unsigned grid = unsigned((nb + gpc - 1) / gpc);
  switch (B) {
    case 32: roundTripKernel<32><<<grid, fp8dev::kThreads>>>(din.p, nb, dc.p, dm.p, dout.p); break;
    case 64: roundTripKernel<64><<<grid, fp8dev::kThreads>>>(din.p, nb, dc.p, dm.p, dout.p); break;
    case 128: roundTripKernel<128><<<grid, fp8dev::kThreads>>>(din.p, nb, dc.p, dm.p, dout.p); break;
    default: roundTripKernel<256><<<grid, fp8dev::kThreads>>>(din.p, nb, dc.p, dm.p, dout.p); break;
  }
  FP8_CK(cudaGetLastError());
  FP8_CK(cudaMemcpy(codes, dc.p, n, cudaMemcpyDeviceToHost));
  FP8_CK(cudaMemcpy(metas, dm.p, nb * sizeof(Meta), cudaMemcpyDeviceToHost));
  FP8_CK(cudaMemcpy(out, dout.p, n * 4, cudaMemcpyDeviceToHost));
}

}  // namespace fp8
}  // namespace cclx
