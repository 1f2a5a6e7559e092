// The device work that colls.cc orders around NCCL calls on the caller's stream: device-to-device
// copies, stream-ordered temporaries (legal inside CUDA-graph capture) and the markers the host
// polls where it must wait for the stream (all_to_all_v_device's split sizes). Declared without CUDA
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
/// A copy where one side may be host memory (pinned for a copy the host later waits for).
void copyHost(void* dst, const void* src, size_t bytes, nccl::ncclStream_t stream);
/// Fills `bytes` at `dst` with 0xFF (a NaN in every floating-point type).
void poison(void* dst, size_t bytes, nccl::ncclStream_t stream);
/// A marker recorded on `stream` after the work queued so far; markDone polls it without
/// blocking (true once that work ran; throws on a runtime error), markFree releases it (legal
/// while still pending).
void* markRecord(nccl::ncclStream_t stream);
bool markDone(void* marker);
void markFree(void* marker) noexcept;

}  // namespace ncclstream
}  // namespace cclx
