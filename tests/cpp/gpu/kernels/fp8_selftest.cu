// Device-side codec checks (see fp8_selftest.h). Test support only; not used by the collectives.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "gpu/fp8/device.cuh"
#include "gpu/kernels/fp8_selftest.h"
#include "base/error.h"

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

// The 16-bit conversions of the collectives' loads and stores (fp8dev::pack2, fp8dev::toF32)
// against the software ones of dtype_math.h: every float -> bf16 and -> f16 (a NaN must give a
// NaN), and every f16 -> float. count[0..2] = bf16 / f16 / widening mismatches.
__device__ __forceinline__ bool nan16(uint32_t h, uint32_t infBits) {
  return (h & 0x7fffu) > infBits;
}
__global__ void cvt16CheckKernel(unsigned long long* count, uint32_t* first) {
  uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (1ull << 32); u += stride) {
    const uint32_t a = uint32_t(u);
    const float x = __uint_as_float(a);
    const bool nan = (a & 0x7fffffffu) > 0x7f800000u;
    const uint32_t b = fp8dev::pack2<bf16_t>(x, 0.f) & 0xffffu;
    const uint32_t h = fp8dev::pack2<f16_t>(0.f, x) >> 16;
    if (nan ? !nan16(b, 0x7f80u) : b != math::f32ToBf16(x)) {
      atomicAdd(&count[0], 1ull);
      atomicMin(&first[0], a);
    }
    if (nan ? !nan16(h, 0x7c00u) : h != math::f32ToF16(x)) {
      atomicAdd(&count[1], 1ull);
      atomicMin(&first[1], a);
    }
    if (u < 65536) {
      const float w = fp8dev::toF32<f16_t>(uint16_t(u)), ref = math::f16ToF32(uint16_t(u));
      const bool bad = nan16(a, 0x7c00u) ? !(w != w) : __float_as_uint(w) != __float_as_uint(ref);
      if (bad) {
        atomicAdd(&count[2], 1ull);
        atomicMin(&first[2], a);
      }
    }
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

// Phase-timing kernels: the collectives' building blocks on one device, grid-stride over
// rounds of 2 * GPC blocks per CTA (CTA-uniform trip count, so all lanes reach the shuffles).
template <int B>
__global__ void __launch_bounds__(fp8dev::kThreads, 1)
    quantPassKernel(const bf16_t* in, size_t count, size_t nb, uint8_t* codes, Meta* metas) {
  constexpr int G = B / fp8dev::kEPT, GPC = fp8dev::kThreads / G;
  const int lane = threadIdx.x % G, grp = threadIdx.x / G;
  for (size_t r0 = size_t(blockIdx.x) * 2 * GPC; r0 < nb; r0 += size_t(gridDim.x) * 2 * GPC) {
    const size_t ua = r0 + grp, ub = ua + GPC;
    float va[fp8dev::kEPT], vb[fp8dev::kEPT];
    fp8dev::loadBlock16x2<bf16_t, B>(in, ua, ua < nb ? count : 0, ub, ub < nb ? count : 0, lane,
                                     va, vb);
    Meta ma, mb;
    const uint4 ca = fp8dev::quantize16(va, G, ma);
    const uint4 cb = fp8dev::quantize16(vb, G, mb);
    if (ua < nb) {
      *reinterpret_cast<uint4*>(codes + ua * B + lane * fp8dev::kEPT) = ca;
      if (lane == 0) metas[ua] = ma;
    }
    if (ub < nb) {
      *reinterpret_cast<uint4*>(codes + ub * B + lane * fp8dev::kEPT) = cb;
      if (lane == 0) metas[ub] = mb;
    }
  }
}

template <int B>
__global__ void __launch_bounds__(fp8dev::kThreads, 1)
    dequantPassKernel(const uint8_t* codes, const Meta* metas, size_t count, size_t nb,
                      bf16_t* out) {
  constexpr int G = B / fp8dev::kEPT, GPC = fp8dev::kThreads / G;
  const int lane = threadIdx.x % G, grp = threadIdx.x / G;
  for (size_t r0 = size_t(blockIdx.x) * 2 * GPC; r0 < nb; r0 += size_t(gridDim.x) * 2 * GPC) {
    const size_t u[2] = {r0 + grp, r0 + grp + GPC};
    uint4 c[2];
    Meta m[2];
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (u[k] < nb) {
        c[k] = *reinterpret_cast<const uint4*>(codes + u[k] * B + lane * fp8dev::kEPT);
        m[k] = metas[u[k]];
      }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (u[k] >= nb) continue;
      float v[fp8dev::kEPT];
      fp8dev::dequantize16(c[k], m[k], v);
      fp8dev::storeBlock16<bf16_t, B>(out, u[k], count, lane, v);
    }
  }
}

__global__ void __launch_bounds__(fp8dev::kThreads, 1)
    peerWriteKernel(const uint4* src, uint4* dst, size_t n16) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n16; i += stride) dst[i] = src[i];
}

int passGrid() {
  int dev = 0, sms = 0;
  FP8_CK(cudaGetDevice(&dev));
  FP8_CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms > 0 && sms < fp8dev::kMaxCtas ? sms : fp8dev::kMaxCtas;
}

template <class Launch>
double timeLaunches(int iters, Launch launch) {
  cudaEvent_t e0, e1;
  FP8_CK(cudaEventCreate(&e0));
  FP8_CK(cudaEventCreate(&e1));
  launch();  // warm-up
  FP8_CK(cudaGetLastError());
  FP8_CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) launch();
  FP8_CK(cudaEventRecord(e1));
  FP8_CK(cudaEventSynchronize(e1));
  FP8_CK(cudaGetLastError());
  float ms = 0;
  FP8_CK(cudaEventElapsedTime(&ms, e0, e1));
  FP8_CK(cudaEventDestroy(e0));
  FP8_CK(cudaEventDestroy(e1));
  return 1000.0 * double(ms) / double(iters);
}

// timeLaunches over launch(std::integral_constant<int, B>(), grid) with the collectives' grid
// (passGrid); B is 32, 64, 128 or 256 (anything else launches as 256).
template <class Launch>
double timeBlockPass(int B, int iters, Launch launch) {
  const int grid = passGrid();
  auto go = [&] {
    switch (B) {
      case 32: launch(std::integral_constant<int, 32>(), grid); break;
      case 64: launch(std::integral_constant<int, 64>(), grid); break;
      case 128: launch(std::integral_constant<int, 128>(), grid); break;
      default: launch(std::integral_constant<int, 256>(), grid); break;
    }
  };
  return timeLaunches(iters, go);
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

uint64_t deviceCvt16Mismatches(uint64_t counts[3], uint32_t firsts[3]) {
  DevArr<unsigned long long> count(3);
  DevArr<uint32_t> f(3);
  FP8_CK(cudaMemset(count.p, 0, 3 * 8));
  FP8_CK(cudaMemset(f.p, 0xff, 3 * 4));
  cvt16CheckKernel<<<4096, 256>>>(count.p, f.p);
  FP8_CK(cudaGetLastError());
  FP8_CK(cudaDeviceSynchronize());
  unsigned long long c[3] = {};
  FP8_CK(cudaMemcpy(c, count.p, 3 * 8, cudaMemcpyDeviceToHost));
  FP8_CK(cudaMemcpy(firsts, f.p, 3 * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 3; ++i) counts[i] = c[i];
  return c[0] + c[1] + c[2];
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

double timeQuantizePass(size_t count, int B, int iters) {
  CCLX_ARG_CHECK(B == 32 || B == 64 || B == 128 || B == 256, "block size %d", B);
  const size_t nb = (count + B - 1) / B;
  DevArr<bf16_t> in(count);
  DevArr<uint8_t> codes(nb * B);
  DevArr<Meta> metas(nb);
  FP8_CK(cudaMemset(in.p, 0x3c, count * sizeof(bf16_t)));
  return timeBlockPass(B, iters, [&](auto b, int grid) {
    quantPassKernel<decltype(b)::value><<<grid, fp8dev::kThreads>>>(in.p, count, nb, codes.p, metas.p);
  });
}

double timeDequantizePass(size_t count, int B, int iters) {
  CCLX_ARG_CHECK(B == 32 || B == 64 || B == 128 || B == 256, "block size %d", B);
  const size_t nb = (count + B - 1) / B;
  DevArr<bf16_t> out(count);
  DevArr<uint8_t> codes(nb * B);
  DevArr<Meta> metas(nb);
  FP8_CK(cudaMemset(codes.p, 0x38, nb * B));
  FP8_CK(cudaMemset(metas.p, 0x3c, nb * sizeof(Meta)));
  return timeBlockPass(B, iters, [&](auto b, int grid) {
    dequantPassKernel<decltype(b)::value><<<grid, fp8dev::kThreads>>>(codes.p, metas.p, count, nb, out.p);
  });
}

double timePeerWrite(size_t bytes, int iters, bool bothWays) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) return -1;
  int a01 = 0, a10 = 0;
  FP8_CK(cudaDeviceCanAccessPeer(&a01, 0, 1));
  FP8_CK(cudaDeviceCanAccessPeer(&a10, 1, 0));
  if (!a01 || !a10) return -1;
  const size_t n16 = (bytes + 15) / 16;
  uint4* src[2] = {};
  uint4* dst[2] = {};
  cudaStream_t st[2] = {};
  cudaEvent_t ev[2][2] = {};
  int grid[2] = {};
  for (int d = 0; d < 2; ++d) {
    FP8_CK(cudaSetDevice(d));
    cudaError_t e = cudaDeviceEnablePeerAccess(1 - d, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else FP8_CK(e);
    FP8_CK(cudaMalloc(&src[d], n16 * 16));
    FP8_CK(cudaMalloc(&dst[d], n16 * 16));
    FP8_CK(cudaMemset(src[d], 0x11, n16 * 16));
    FP8_CK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    FP8_CK(cudaEventCreate(&ev[d][0]));
    FP8_CK(cudaEventCreate(&ev[d][1]));
    grid[d] = passGrid();
  }
  const int nd = bothWays ? 2 : 1;
  for (int rep = 0; rep < 2; ++rep) {  // rep 0: warm-up
    for (int d = 0; d < nd; ++d) {
      FP8_CK(cudaSetDevice(d));
      FP8_CK(cudaDeviceSynchronize());
    }
    for (int d = 0; d < nd; ++d) {
      FP8_CK(cudaSetDevice(d));
      FP8_CK(cudaEventRecord(ev[d][0], st[d]));
      for (int i = 0; i < (rep ? iters : 1); ++i)
        peerWriteKernel<<<grid[d], fp8dev::kThreads, 0, st[d]>>>(src[d], dst[1 - d], n16);
      FP8_CK(cudaGetLastError());
      FP8_CK(cudaEventRecord(ev[d][1], st[d]));
    }
  }
  double us = 0;
  for (int d = 0; d < nd; ++d) {
    FP8_CK(cudaSetDevice(d));
    FP8_CK(cudaEventSynchronize(ev[d][1]));
    float ms = 0;
    FP8_CK(cudaEventElapsedTime(&ms, ev[d][0], ev[d][1]));
    us = std::max(us, 1000.0 * double(ms) / double(iters));
  }
  for (int d = 0; d < 2; ++d) {
    FP8_CK(cudaSetDevice(d));
    FP8_CK(cudaDeviceSynchronize());
    (void)cudaFree(src[d]);
    (void)cudaFree(dst[d]);
    (void)cudaStreamDestroy(st[d]);
    (void)cudaEventDestroy(ev[d][0]);
    (void)cudaEventDestroy(ev[d][1]);
  }
  FP8_CK(cudaSetDevice(0));
  return us;
}

}  // namespace fp8
}  // namespace cclx
