// Typed host reduction loops over dtype_math.h, and the shared step helpers of the host algorithms.
#pragma once

#include <cstddef>

#include "core/backend.h"
#include "transport/shm.h"

namespace cclx {

/// dst[i] = finish(combine over k = 0..n-1, in that order, of prepare(load(srcs[k][i]))), stored
/// as the element type. `nranks` is the divisor of AVG. dst may alias srcs[k] (element-wise).
/// Throws cclxInvalidArgument for a dtype/op pair that has no reduction (fp8, bitwise floats).
void reduceInto(void* dst, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op, int nranks);

/// Reduction of `count` elements held by every rank, in chunks through the step slots: each rank
/// reduces its 1/N slice (rank order 0..N-1) and then every rank (root < 0) or only `root` copies
/// the reduced slices into `out` (may be null on ranks that copy nothing). `in` may equal `out`.
/// Every element goes through the same operations as the flat algorithm: identical bits.
void hostTreeReduce(HostCtx& ctx, const void* in, void* out, size_t count, DataType dtype,
                    ReduceOp op, int root);

/// Flat reduction: per chunk every rank copies its input into its slot, then reduces all slots
/// (rank order 0..N-1) into `out` (root < 0: every rank; else only root reduces).
void hostFlatReduce(HostCtx& ctx, const void* in, void* out, size_t count, DataType dtype,
                    ReduceOp op, int root);

}  // namespace cclx
