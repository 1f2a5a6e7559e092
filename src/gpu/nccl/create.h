// The NCCL comm of a GPU comm (setup.cc): rank 0's unique id through the comm's store, then
// ncclCommInitRank on every rank. Reaches NCCL through ncclLib() only (table.h), so it builds and
// is tested without a GPU (tests/cpp/nccl).
//
// Contract:
//  * every rank arrives first ("cclx_nccl_arrive/<r>"), so that a missing rank is a store timeout
//    naming it, not a hang inside NCCL;
//  * rank 0 publishes the id under "cclx_nccl_uid/0"; the others wait for it as for any setup
//    record (store/bootstrap.h storeWaitRanks): a failure rank 0 posted in the comm's namespace
//    (its ncclGetUniqueId failed, say; Comm creation posts every creation failure) ends their
//    wait at once with rank 0's message, instead of a timeout;
//  * a failed NCCL call throws cclxNcclError naming this rank, the call and its code (ncclCheck).
//    A rank whose ncclCommInitRank fails cannot stop the others' ncclCommInitRank (NCCL's init
//    is blocking); NCCL's own bootstrap fails them.
#pragma once

#include <chrono>
#include <string>

#include <cclx/cclx.hpp>

#include "gpu/nccl/api.h"

namespace cclx {

/// Creates this rank's comm of `size` ranks over `store` (a comm's namespace). `name` is the
/// comm's, for messages.
nccl::ncclComm_t ncclCreateComm(Store& store, int rank, int size,
                                std::chrono::milliseconds timeout, const std::string& name);

}  // namespace cclx
