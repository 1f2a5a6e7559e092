// The cost of one handoff between two blocks of one kernel on one GPU, per way of publishing a
// flag: warp 0 of block 0 and warp 0 of block 1 take turns; on its turn a warp stores a payload
// (16 bytes a lane per round), publishes the turn number, and the other polls for it. The time
// per turn is one writer-to-reader handoff: what each flag a kernel waits for costs at least
// (docs/design/moe.md, "Performance"). Ways: st.release / ld.acquire at system and GPU scope,
// a system or GPU fence then a volatile store (polled with volatile loads), and volatile stores
// alone (no ordering of the payload: the price of a data-as-flag protocol, which needs none).
//
//   nvcc -O3 -arch=sm_90 -o handoff bench/probes/handoff.cu && ./handoff
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                     \
  do {                                                                               \
    const cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                  \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

enum Way { kRelAcqSys, kRelAcqGpu, kFenceSysVolatile, kFenceGpuVolatile, kVolatile, kWays };
const char* const kNames[kWays] = {"st.release.sys / ld.acquire.sys",
                                   "st.release.gpu / ld.acquire.gpu",
                                   "fence.sys + st.volatile / ld.volatile",
                                   "fence.gpu + st.volatile / ld.volatile",
                                   "st.volatile / ld.volatile (no fence)"};

__device__ __forceinline__ void publish(uint64_t* p, uint64_t v, int way) {
  switch (way) {
    case kRelAcqSys: asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); break;
    case kRelAcqGpu: asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); break;
    case kFenceSysVolatile: __threadfence_system(); [[fallthrough]];
    case kVolatile: asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); break;
    default: __threadfence(); asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
}

__device__ __forceinline__ uint64_t poll(const uint64_t* p, int way) {
  uint64_t v;
  if (way == kRelAcqSys) asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else if (way == kRelAcqGpu) asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Two blocks of one warp each; turns 0..iters-1 alternate between them; block 0 writes the
/// nanoseconds of the turns after the first 8 (warm-up) to *ns.
__global__ void pingPong(uint64_t* flags, uint4* payload, int iters, int units, int way,
                         unsigned long long* ns) {
  const int me = blockIdx.x, lane = threadIdx.x;
  uint64_t* mine = flags + 32 * me;  // 256 bytes apart
  const uint64_t* theirs = flags + 32 * (1 - me);
  uint4* buf = payload + size_t(me) * units;
  uint64_t t0 = 0;
  for (int i = 0; i < iters; ++i) {
    if (i == 8) t0 = now();
    const uint64_t turn = uint64_t(i) + 1;
    if ((i & 1) == me) {
      for (int u = lane; u < units; u += 32) buf[u] = make_uint4(i, i, i, i);
      __syncwarp();
      if (lane == 0) publish(mine, turn, way);
    } else {
      if (lane == 0)
        while (poll(theirs, way) < turn) {
        }
      __syncwarp();
    }
  }
  if (lane == 0 && me == 0) *ns = now() - t0;
}

}  // namespace

int main() {
  constexpr int kIters = 20008, kMaxUnits = 896;
  uint64_t* flags = nullptr;
  uint4* payload = nullptr;
  unsigned long long* ns = nullptr;
  CHECK(cudaMalloc(&flags, 64 * sizeof(uint64_t)));
  CHECK(cudaMalloc(&payload, 2 * kMaxUnits * sizeof(uint4)));
  CHECK(cudaMalloc(&ns, sizeof(*ns)));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s: one handoff between two blocks, mean of %d turns\n", prop.name, kIters - 8);
  for (int units : {0, 32, kMaxUnits}) {
    for (int way = 0; way < kWays; ++way) {
      CHECK(cudaMemset(flags, 0, 64 * sizeof(uint64_t)));
      pingPong<<<2, 32>>>(flags, payload, kIters, units, way, ns);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      unsigned long long t = 0;
      CHECK(cudaMemcpy(&t, ns, sizeof(t), cudaMemcpyDeviceToHost));
      std::printf("payload %6d B  %-40s %8.1f ns\n", units * 16, kNames[way],
                  double(t) / (kIters - 8));
    }
  }
  CHECK(cudaFree(flags));
  CHECK(cudaFree(payload));
  CHECK(cudaFree(ns));
  return 0;
}
