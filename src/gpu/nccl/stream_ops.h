// The device work that colls.cc orders around NCCL calls on the caller's stream: device-to-device
// copies and stream-ordered temporaries (legal inside CUDA-graph capture). Declared without CUDA
// types so that colls.cc builds without the GPU runtime; stream_ops.cc implements them with it,
// and a CPU test links fakes instead (tests/cpp/nccl).
//
// Contract: copy and allocTemp throw cclx::Error(cclxCudaError) naming the runtime's error;
// freeTemp never throws (a failure is logged); every one is asynchronous on `stream`.
#pragma once

#include <cstddef>

#include "gpu/nccl/api.h"

namespace cclx {
namespace ncclstream {

void copy(void* dst, const void* src, size_t bytes, nccl::ncclStream_t stream);
void* allocTemp(size_t bytes, nccl::ncclStream_t stream);
void freeTemp(void* p, nccl::ncclStream_t stream) noexcept;

}  // namespace ncclstream
}  // namespace cclx
