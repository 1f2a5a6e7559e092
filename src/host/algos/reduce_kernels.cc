// Typed host reduction loops. Elements are processed in blocks: the accumulator block starts from
// rank 0's prepared values and combines ranks 1..N-1 in order, so every element sees exactly the
// operation sequence of dtype_math.h (same as the GPU kernels), while the inner loops vectorize.
#include "host/algos/reduce_kernels.h"

#include <algorithm>
#include <cstring>

#include "core/elements/dtype_math.h"
#include "base/error.h"

namespace cclx {

namespace {

constexpr size_t kBlock = 512;

template <class T, RedOpKind Op>
void reduceTyped(void* dstv, const void* const* srcs, int n, size_t count, double factor, int nranks) {
  using A = typename math::AccOf<T>::type;
  T* dst = static_cast<T*>(dstv);
  const A f = static_cast<A>(factor);
  A acc[kBlock];
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t m = std::min(kBlock, count - b);
    const T* s0 = static_cast<const T*>(srcs[0]) + b;
    for (size_t i = 0; i < m; ++i) acc[i] = math::prepare<Op, A>(math::load<T>(s0[i]), f);
    for (int k = 1; k < n; ++k) {
      const T* s = static_cast<const T*>(srcs[k]) + b;
      for (size_t i = 0; i < m; ++i)
        acc[i] = math::combine<Op, A>(acc[i], math::prepare<Op, A>(math::load<T>(s[i]), f));
    }
    for (size_t i = 0; i < m; ++i) dst[b + i] = math::store<T>(math::finish<Op, A>(acc[i], nranks));
  }
}

template <class T>
void reduceOps(void* dst, const void* const* srcs, int n, size_t count, ReduceOp op, int nranks,
               DataType dt) {
  const double f = op.factor;
  switch (op.kind) {
    case RedOpKind::SUM: return reduceTyped<T, RedOpKind::SUM>(dst, srcs, n, count, f, nranks);
    case RedOpKind::PRODUCT: return reduceTyped<T, RedOpKind::PRODUCT>(dst, srcs, n, count, f, nranks);
    case RedOpKind::MIN: return reduceTyped<T, RedOpKind::MIN>(dst, srcs, n, count, f, nranks);
    case RedOpKind::MAX: return reduceTyped<T, RedOpKind::MAX>(dst, srcs, n, count, f, nranks);
    case RedOpKind::AVG: return reduceTyped<T, RedOpKind::AVG>(dst, srcs, n, count, f, nranks);
    case RedOpKind::PREMUL_SUM:
      return reduceTyped<T, RedOpKind::PREMUL_SUM>(dst, srcs, n, count, f, nranks);
    default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op.kind) {
      case RedOpKind::BAND: return reduceTyped<T, RedOpKind::BAND>(dst, srcs, n, count, f, nranks);
      case RedOpKind::BOR: return reduceTyped<T, RedOpKind::BOR>(dst, srcs, n, count, f, nranks);
      case RedOpKind::BXOR: return reduceTyped<T, RedOpKind::BXOR>(dst, srcs, n, count, f, nranks);
      default: break;
    }
  }
  CCLX_THROW(cclxInvalidArgument, "reduction op %d is not defined for dtype %s", int(op.kind), dtypeName(dt));
}

}  // namespace

void reduceInto(void* dst, const void* const* srcs, int n, size_t count, DataType dtype, ReduceOp op,
                int nranks) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::f32: return reduceOps<float>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::f64: return reduceOps<double>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::f16: return reduceOps<f16_t>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::bf16: return reduceOps<bf16_t>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::i8: return reduceOps<int8_t>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::u8: return reduceOps<uint8_t>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::i32: return reduceOps<int32_t>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::i64: return reduceOps<int64_t>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::u32: return reduceOps<uint32_t>(dst, srcs, n, count, op, nranks, dtype);
    case DataType::u64: return reduceOps<uint64_t>(dst, srcs, n, count, op, nranks, dtype);
    default: break;
  }
  CCLX_THROW(cclxInvalidArgument, "dtype %s has no reductions (data movement only)", dtypeName(dtype));
}

}  // namespace cclx
