// Every collective through NCCL (colls.cc): what the peer algorithms do not take. Needs only the
// NCCL comm, this rank and the world size.
#pragma once

#include "core/comm/backend.h"
#include "gpu/nccl/loader.h"
#include "gpu/runtime.h"

namespace cclx {

/// Enqueues one collective (validated arguments) on `stream` through NCCL. Throws cclxNcclError
/// with NCCL's message on failure.
void ncclRunCollective(const CollArgs& a, nccl::ncclComm_t comm, int rank, int size,
                       cudaStream_t stream);
nccl::ncclDataType_t ncclType(DataType t);

}  // namespace cclx
