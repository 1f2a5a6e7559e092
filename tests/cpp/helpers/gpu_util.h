// Helpers of the GPU tests: GPU count without initializing CUDA in the parent (a forked probe),
// the number of ranks to run, comm creation in ranks, device buffers, an event timer,
// deterministic random data per (seed, rank, index), the fixed-order reference
// (src/core/elements/dtype_math.h) and a float64 reference. Empty in builds without CUDA.
#pragma once

#if defined(CCLX_HAVE_CUDA)

#include <cclx/cclx.hpp>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/collectives.h"
#include "core/elements/dtype_math.h"
#include "base/error.h"
#include "helpers/mp.h"

namespace gputest {

using namespace cclx;

/// Number of CUDA devices, probed in a forked child so the parent never initializes CUDA.
inline int gpuCount() {
  static int cached = -1;
  if (cached >= 0) return cached;
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int status = 0;
  cached = (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) ? WEXITSTATUS(status) : 0;
  return cached;
}

#define GPU_REQUIRE(n)                                                                      \
  do {                                                                                      \
    int have_ = ::gputest::gpuCount();                                                      \
    if (have_ < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA GPU(s), found " << have_;    \
  } while (0)

#define CK(call)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    MP_CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                  \
  } while (0)

/// Ranks of the multi-GPU tests: one per GPU, at most 8.
inline int gpuWorldSize() { return std::min(gpuCount(), 8); }

/// Comms of the tests time out after 20 s (unless the test sets its own), so that a stuck
/// collective fails the test quickly with a message instead of waiting for the harness.
inline std::shared_ptr<Comm> makeGpuComm(int rank, int size, std::shared_ptr<Store> store,
                                         Options o = {}) {
  if (o.timeout == Options{}.timeout) o.timeout = std::chrono::seconds(20);
  return Comm::create(DeviceSpec::cuda(rank), o, std::move(store), rank, size);
}

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline bool isFloat(DataType t) {
  return t == DataType::f32 || t == DataType::f64 || t == DataType::f16 || t == DataType::bf16;
}
using cclx::isBitwise;  // core/comm/collectives.h

/// Element i of rank r's input, written as dtypeSize(t) bytes at dst. Never all zeros; small
/// magnitudes so sums and products stay finite; full random bits for bitwise ops.
inline void genElem(DataType t, RedOpKind op, uint64_t seed, int r, size_t i, void* dst) {
  uint64_t h = mix(seed * 1000003u + uint64_t(r) * 7919u + i * 2654435761u + 1);
  double v;
  if (op == RedOpKind::PRODUCT) v = isFloat(t) ? 0.75 + double(h % 512) / 1024.0 : double(1 + h % 3);
  else v = isFloat(t) ? (double(int64_t(h % 4001) - 2000)) / 256.0 : double(h % 100) + 1;
  if (isBitwise(op)) {
    std::memcpy(dst, &h, dtypeSize(t));
    return;
  }
  if (!isFloat(t) && (t == DataType::i8 || t == DataType::i32 || t == DataType::i64) && (h >> 40) & 1)
    v = -v;
  switch (t) {
    case DataType::f32: { float x = float(v); std::memcpy(dst, &x, 4); break; }
    case DataType::f64: { std::memcpy(dst, &v, 8); break; }
    case DataType::f16: { uint16_t x = math::f32ToF16(float(v)); std::memcpy(dst, &x, 2); break; }
    case DataType::bf16: { uint16_t x = math::f32ToBf16(float(v)); std::memcpy(dst, &x, 2); break; }
    case DataType::i8: { int8_t x = int8_t(v / 3); std::memcpy(dst, &x, 1); break; }
    case DataType::u8: { uint8_t x = uint8_t(int(v) % 60 + 1); std::memcpy(dst, &x, 1); break; }
    case DataType::i32: { int32_t x = int32_t(v); std::memcpy(dst, &x, 4); break; }
    case DataType::u32: { uint32_t x = uint32_t(v); std::memcpy(dst, &x, 4); break; }
    case DataType::i64: { int64_t x = int64_t(v); std::memcpy(dst, &x, 8); break; }
    case DataType::u64: { uint64_t x = uint64_t(v); std::memcpy(dst, &x, 8); break; }
    default: std::memset(dst, int(h & 0x7f) | 1, dtypeSize(t)); break;
  }
}

inline std::vector<char> genBuf(DataType t, RedOpKind op, uint64_t seed, int r, size_t n) {
  size_t es = dtypeSize(t);
  std::vector<char> b(n * es);
  for (size_t i = 0; i < n; ++i) genElem(t, op, seed, r, i, b.data() + i * es);
  return b;
}

inline double toDouble(DataType t, const char* p) {
  switch (t) {
    case DataType::f32: { float x; std::memcpy(&x, p, 4); return x; }
    case DataType::f64: { double x; std::memcpy(&x, p, 8); return x; }
    case DataType::f16: { uint16_t x; std::memcpy(&x, p, 2); return math::f16ToF32(x); }
    case DataType::bf16: { uint16_t x; std::memcpy(&x, p, 2); return math::bf16ToF32(x); }
    case DataType::i8: return double(*reinterpret_cast<const int8_t*>(p));
    case DataType::u8: return double(*reinterpret_cast<const uint8_t*>(p));
    case DataType::i32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::u32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case DataType::i64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
    case DataType::u64: { uint64_t x; std::memcpy(&x, p, 8); return double(x); }
    default: return double(uint8_t(*p));
  }
}

template <class T, RedOpKind Op>
void fixedOrderTyped(const std::vector<std::vector<char>>& in, size_t n, double factor, char* out) {
  using A = typename math::AccOf<T>::type;
  const A f = static_cast<A>(factor);
  for (size_t i = 0; i < n; ++i) {
    A acc{};
    for (size_t r = 0; r < in.size(); ++r) {
      T x;
      std::memcpy(&x, in[r].data() + i * sizeof(T), sizeof(T));
      A v = math::prepare<Op, A>(math::load<T>(x), f);
      acc = r == 0 ? v : math::combine<Op, A>(acc, v);
    }
    T y = math::store<T>(math::finish<Op, A>(acc, int(in.size())));
    std::memcpy(out + i * sizeof(T), &y, sizeof(T));
  }
}

template <class T>
void fixedOrderOp(const std::vector<std::vector<char>>& in, size_t n, ReduceOp op, char* out) {
  switch (op.kind) {
    case RedOpKind::SUM: return fixedOrderTyped<T, RedOpKind::SUM>(in, n, op.factor, out);
    case RedOpKind::AVG: return fixedOrderTyped<T, RedOpKind::AVG>(in, n, op.factor, out);
    case RedOpKind::PREMUL_SUM: return fixedOrderTyped<T, RedOpKind::PREMUL_SUM>(in, n, op.factor, out);
    case RedOpKind::PRODUCT: return fixedOrderTyped<T, RedOpKind::PRODUCT>(in, n, op.factor, out);
    case RedOpKind::MIN: return fixedOrderTyped<T, RedOpKind::MIN>(in, n, op.factor, out);
    case RedOpKind::MAX: return fixedOrderTyped<T, RedOpKind::MAX>(in, n, op.factor, out);
    default:
      if constexpr (std::is_integral_v<T>) {
        if (op.kind == RedOpKind::BAND) return fixedOrderTyped<T, RedOpKind::BAND>(in, n, 1, out);
        if (op.kind == RedOpKind::BOR) return fixedOrderTyped<T, RedOpKind::BOR>(in, n, 1, out);
        return fixedOrderTyped<T, RedOpKind::BXOR>(in, n, 1, out);
      }
  }
}

/// The bits every rank must produce: ranks 0..N-1 combined in order with dtype_math.
inline std::vector<char> fixedOrder(DataType t, ReduceOp op, const std::vector<std::vector<char>>& in,
                                    size_t n) {
  std::vector<char> out(n * dtypeSize(t));
  switch (t) {
    case DataType::f32: fixedOrderOp<float>(in, n, op, out.data()); break;
    case DataType::f64: fixedOrderOp<double>(in, n, op, out.data()); break;
    case DataType::f16: fixedOrderOp<f16_t>(in, n, op, out.data()); break;
    case DataType::bf16: fixedOrderOp<bf16_t>(in, n, op, out.data()); break;
    case DataType::i8: fixedOrderOp<int8_t>(in, n, op, out.data()); break;
    case DataType::u8: fixedOrderOp<uint8_t>(in, n, op, out.data()); break;
    case DataType::i32: fixedOrderOp<int32_t>(in, n, op, out.data()); break;
    case DataType::u32: fixedOrderOp<uint32_t>(in, n, op, out.data()); break;
    case DataType::i64: fixedOrderOp<int64_t>(in, n, op, out.data()); break;
    case DataType::u64: fixedOrderOp<uint64_t>(in, n, op, out.data()); break;
    default: break;
  }
  return out;
}

/// Independent float64 reference of one element (floats only: SUM/AVG/PREMUL_SUM/PRODUCT/MIN/MAX).
inline double refF64(DataType t, ReduceOp op, const std::vector<std::vector<char>>& in, size_t i) {
  size_t es = dtypeSize(t);
  double acc = 0;
  for (size_t r = 0; r < in.size(); ++r) {
    double v = toDouble(t, in[r].data() + i * es);
    if (op.kind == RedOpKind::PREMUL_SUM) v *= op.factor;
    if (r == 0) acc = v;
    else if (op.kind == RedOpKind::PRODUCT) acc *= v;
    else if (op.kind == RedOpKind::MIN) acc = std::min(acc, v);
    else if (op.kind == RedOpKind::MAX) acc = std::max(acc, v);
    else acc += v;
  }
  return op.kind == RedOpKind::AVG ? acc / double(in.size()) : acc;
}

inline double tolerance(DataType t) {
  return t == DataType::bf16 ? 1.0 / 64 : t == DataType::f16 ? 1.0 / 512 : t == DataType::f32 ? 1e-5 : 1e-12;
}

/// Device buffer with `extra` bytes after the payload (poisoned with the rest by poison()).
struct DevBuf {
  char* base = nullptr;
  size_t total = 0;
  DevBuf(size_t bytes, size_t extra = 64) : total(bytes + extra) { CK(cudaMalloc(&base, total)); }
  ~DevBuf() { (void)cudaFree(base); }
  DevBuf(const DevBuf&) = delete;
  void poison(int byte = 0xff) { CK(cudaMemset(base, byte, total)); }
};

/// `bytes` bytes of device memory at `p`, copied to the host.
inline std::vector<char> d2h(const void* p, size_t bytes) {
  std::vector<char> v(bytes);
  CK(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost));
  return v;
}

/// A new device copy of `v` followed by `extra` + 1 bytes of 0xff (free with cudaFree).
inline char* h2d(const std::vector<char>& v, size_t extra = 0) {
  char* p;
  CK(cudaMalloc(&p, v.size() + extra + 1));
  CK(cudaMemset(p, 0xff, v.size() + extra + 1));
  CK(cudaMemcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice));
  // A copy from pageable memory may return before its DMA is done: the callers' collectives run
  // on non-blocking streams.
  CK(cudaDeviceSynchronize());
  return p;
}

/// `bytes` + 1 bytes of new device memory, all 0xff (free with cudaFree).
inline char* poisoned(size_t bytes) {
  char* p;
  CK(cudaMalloc(&p, bytes + 1));
  CK(cudaMemset(p, 0xff, bytes + 1));
  CK(cudaDeviceSynchronize());
  return p;
}

/// A non-blocking stream and two events on the current device: microseconds per call of a
/// stream-ordered callable, eager or replayed from a CUDA graph.
struct Timer {
  cudaStream_t s;
  cudaEvent_t e0, e1;
  Timer() {
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  ~Timer() {
    (void)cudaEventDestroy(e0);
    (void)cudaEventDestroy(e1);
    (void)cudaStreamDestroy(s);
  }
  Timer(const Timer&) = delete;
  template <class F>
  double eagerUs(F&& call, int iters) {
    for (int i = 0; i < 3; ++i) call();
    CK(cudaStreamSynchronize(s));
    return timeUs([&] { for (int i = 0; i < iters; ++i) call(); }, iters);
  }
  template <class F>
  double timeUs(F&& launch, int iters) {
    CK(cudaEventRecord(e0, s));
    launch();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return 1000.0 * ms / iters;
  }
};

}  // namespace gputest

#endif  // CCLX_HAVE_CUDA
