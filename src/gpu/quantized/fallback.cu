// reduce_scatter_quantized's NCCL sequence (quantized.h): where the peer kernel does not run
// (across hosts, backend "nccl", hint "algo" = "nccl") the backend rounds into a bf16 temporary
// (launchSrRound), moves the blocks with an NCCL all-to-all (bf16 bits, nothing reduced by NCCL)
// and sums them in float (launchSrSum). Same element rules as the peer kernel and the CPU twin
// (core/elements/stochastic.h), hence the same bits.
#include "core/elements/stochastic.h"
#include "gpu/device/launch.cuh"
#include "gpu/nccl/colls.h"
#include "gpu/resources.h"
#include "gpu/quantized/quantized.h"

namespace cclx {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxGrid = 4096;

int gridOf(size_t n) {
  const size_t g = (n + kThreads - 1) / kThreads;
  return int(g < size_t(kMaxGrid) ? g : size_t(kMaxGrid));
}

/// out[i] = srBf16(send[i], *seed, i, rank) for i < n (grid-stride).
__global__ void srRoundKernel(const float* send, uint16_t* out, size_t n, const int64_t* seed,
                              uint32_t rank) {
  const uint64_t s = uint64_t(*seed);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = sr::srBf16(send[i], s, i, rank);
}

/// recv[i] = sum over s in order of the widened blocks[s * count + i]; AVG divides once.
__global__ void srSumKernel(const uint16_t* blocks, float* recv, size_t count, int size, int avg) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float acc = math::bf16ToF32(blocks[i]);
    for (int s = 1; s < size; ++s) acc = __fadd_rn(acc, math::bf16ToF32(blocks[size_t(s) * count + i]));
    recv[i] = avg ? __fdiv_rn(acc, float(size)) : acc;
  }
}

}  // namespace

void launchSrRound(const float* send, uint16_t* out, size_t n, const int64_t* seed, uint32_t rank,
                   void* stream) {
  if (n == 0) return;
  dev::launchKernel("reduce_scatter_quantized rounding", &srRoundKernel, gridOf(n), kThreads,
                    stream, send, out, n, seed, rank);
}

void launchSrSum(const uint16_t* blocks, float* recv, size_t count, int size, bool avg,
                 void* stream) {
  if (count == 0) return;
  dev::launchKernel("reduce_scatter_quantized sum", &srSumKernel, gridOf(count), kThreads, stream,
                    blocks, recv, count, size, avg ? 1 : 0);
}

void quantizedViaNccl(const CollArgs& a, nccl::ncclComm_t comm, int rank, int size, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const size_t n = a.count * size_t(size);
  gpures::StreamTemp mine(n * sizeof(uint16_t), s), theirs(n * sizeof(uint16_t), s);
  launchSrRound(static_cast<const float*>(a.send), static_cast<uint16_t*>(mine.get()), n, a.seed,
                uint32_t(rank), stream);
  CollArgs b = a;
  b.type = CollType::AllToAll;
  b.send = mine.get();
  b.recv = theirs.get();
  b.dtype = DataType::bf16;
  b.op = ReduceOp{};
  b.seed = nullptr;
  ncclRunCollective(b, comm, rank, size, s);
  launchSrSum(static_cast<const uint16_t*>(theirs.get()), static_cast<float*>(a.recv), a.count,
              size, a.op.kind == RedOpKind::AVG, stream);
  mine.free();
  theirs.free();
}

}  // namespace cclx
