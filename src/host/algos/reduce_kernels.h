// Typed host reduction loops over dtype_math.h, shared by the host algorithms that reduce.
#pragma once

#include <cstddef>

#include "core/comm/backend.h"

namespace cclx {

/// dst[i] = finish(combine over k = 0..n-1, in that order, of prepare(load(srcs[k][i]))), stored
/// as the element type. `nranks` is the divisor of AVG. dst may alias srcs[k] (element-wise).
/// Throws cclxInvalidArgument for a dtype/op pair that has no reduction (fp8, bitwise floats).
void reduceInto(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op, int nranks);

}  // namespace cclx
