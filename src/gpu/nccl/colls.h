// Every collective through NCCL (colls.cc): what the peer algorithms do not take. Needs only the
// NCCL comm, this rank and the world size; reaches NCCL through ncclLib() and the device only
// through stream_ops.h, so it builds and is tested without a GPU (table.h, tests/cpp/nccl).
#pragma once

#include <atomic>
#include <functional>

#include "core/comm/backend.h"
#include "gpu/nccl/loader.h"

namespace cclx {

/// Enqueues one collective (validated arguments) on `stream` (a cudaStream_t) through NCCL.
/// Throws cclxNcclError naming the NCCL call, its code and NCCL's message when a call fails
/// (nothing more of the collective is enqueued then: no copy of a temporary into the output, and
/// every group opened is closed); cclxTimeout when a nonblocking comm stays ncclInProgress past
/// a.opts.timeout (table.h ncclCall).
void ncclRunCollective(const CollArgs& a, nccl::ncclComm_t comm, int rank, int size,
                       nccl::ncclStream_t stream);
nccl::ncclDataType_t ncclType(DataType t);

/// all_to_all_v_device (validated; its split sizes in device memory) through NCCL
/// (alltoallv_device.cc): gathers every rank's split sizes into `hostBuf` (pinned host memory of
/// ncclAllToAllVDeviceHostBytes(size), the caller's, never freed while the gather may be pending),
/// calls `queued` once the gather is enqueued, waits for it on the host (the collective's one
/// synchronization of `stream`) until a.opts.timeout (cclxTimeout), an NCCL asynchronous error
/// (cclxNcclError) or `stop` (cclxAborted), checks the sizes alike on every rank (a violation:
/// recv poisoned, cclxInvalidUsage naming the ranks), then runs all-to-all-v. Not for CUDA-graph
/// capture.
void ncclAllToAllVDevice(const CollArgs& a, nccl::ncclComm_t comm, int rank, int size,
                         nccl::ncclStream_t stream, int64_t* hostBuf,
                         const std::function<void()>& queued = {},
                         const std::atomic<bool>* stop = nullptr);
/// Bytes of the pinned host buffer ncclAllToAllVDevice needs at world size `size`.
size_t ncclAllToAllVDeviceHostBytes(int size);

}  // namespace cclx
