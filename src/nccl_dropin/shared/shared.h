// The drop-in's shared-GPU mode: a communicator whose ranks share a GPU (NCCL refuses those) is a
// cclx Comm of its own, with no NCCL comm underneath, and every NCCL call on its handle runs on
// that Comm (docs/design/dropin.md, "Ranks sharing a GPU").
//
// This part holds no CUDA code: the entry points of the drop-in (src/nccl_dropin/*.cc, CUDA
// builds) call it for shared handles, and a CPU build runs it over CPU comms in its twin test
// (tests/cpp/dropin/test_dropin_shared.cc). Every function returns an NCCL result and leaves the
// message for ncclGetLastError (errors.h); none throws.
//
// The handle. The application gets a pointer that is not an NCCL comm: every entry point that
// takes a comm asks find() first (one relaxed atomic load when the process has no shared comm).
// Handles are never freed: after ncclCommDestroy / Abort the handle stays known (every call on it
// fails naming it), so that it is never mistaken for, or passed to, a real NCCL comm.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "nccl_dropin/abi.h"

namespace cclx {
namespace dropin {
namespace shared {

struct SharedComm;  // shared_internal.h

/// The shared comm behind `comm`, or null when `comm` is not one of ours (a real NCCL comm).
std::shared_ptr<SharedComm> find(ncclComm_t comm);
/// True when `comm` is a handle of the shared mode (alive or not).
inline bool isShared(ncclComm_t comm) { return comm && find(comm) != nullptr; }

// ---- creation ----

/// What the entry point knows about the calling rank when a comm is created.
struct Local {
  DeviceSpec device;  // the comm's device (CUDA: the current device; the twin: CPU)
  std::string gpu;    // this rank's GPU as peers must compare it: host identity + PCI bus id
};

/// ncclGetUniqueId: adds the drop-in's rendezvous (this process's store and a fresh nonce) to an
/// id NCCL made, or to a zeroed one when there is no NCCL. Never fails the call: an id that
/// cannot carry it (NCCL uses the bytes, no socket) is left as it is (logged), and then never
/// gives a shared comm.
void stampId(ncclUniqueId* id);

/// ncclCommInitRank[Config|Scalable] before NCCL sees the call: decides, with every rank alike,
/// whether the comm is a shared one (CCLX_DROPIN_SHARED=1, or auto with two ranks on one GPU;
/// the exchange runs only for ids this drop-in stamped and comms of 2..8 ranks, and never with
/// CCLX_DROPIN_SHARED=0) and if so creates it. Returns true when the call is handled here (then
/// `r` is its result and `*comm` the handle on success); false: the real NCCL creates the comm.
bool initRank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
              const ncclConfig_t* config, const Local& local, const char* call,
              ncclResult_t& r);

/// ncclCommSplit of a shared comm (every rank of the parent calls it; color NCCL_SPLIT_NOCOLOR
/// (-1) gives no comm): ranks of one color form a shared comm ordered by (key, parent rank).
ncclResult_t split(SharedComm& parent, int color, int key, ncclComm_t* newcomm,
                   const ncclConfig_t* config);
/// ncclCommShrink of a shared comm: the ranks not excluded (every one of them calls it) form a
/// new shared comm, in parent order.
ncclResult_t shrink(SharedComm& parent, const int* exclude, int nExclude, ncclComm_t* newcomm,
                    const ncclConfig_t* config, int flags);

// ---- life cycle and queries ----

/// ncclCommFinalize: waits until this rank's calls on the comm completed (as NCCL; bounded by the
/// comm's timeout); later collectives fail.
ncclResult_t finalize(SharedComm& c);
/// ncclCommDestroy: finalizes if that was not done, then releases the comm without waiting for
/// the peers (its memory stays mapped until the process exits: docs/design/dropin.md).
ncclResult_t destroy(SharedComm& c);
/// ncclCommAbort / ncclCommRevoke: never blocks; the comm's kernels stop here and on the peers.
ncclResult_t abort(SharedComm& c);
/// ncclCommGetAsyncError: ncclSuccess while healthy, else ncclRemoteError (a peer that never
/// arrived or died, a timeout) or the code of what failed, with the message for ncclGetLastError.
ncclResult_t asyncError(SharedComm& c, ncclResult_t* err);
ncclResult_t count(SharedComm& c, int* n);
ncclResult_t userRank(SharedComm& c, int* rank);
ncclResult_t cuDevice(SharedComm& c, int* device);
/// ncclCommRegister / ncclCommDeregister: accepted and checked (a hint NCCL may ignore too);
/// nothing is mapped.
ncclResult_t registerBuffer(SharedComm& c, void* buff, size_t size, void** handle);
ncclResult_t deregisterBuffer(SharedComm& c, void* handle);
/// ncclRedOpCreatePreMulSum with a host scalar (ncclScalarHostImmediate); a device scalar is
/// refused with a message.
ncclResult_t redOpCreatePreMulSum(SharedComm& c, ncclRedOp_t* op, void* scalar, ncclDataType_t t,
                                  ncclScalarResidence_t residence);
ncclResult_t redOpDestroy(SharedComm& c, ncclRedOp_t op);
/// Any other NCCL function on a shared handle: ncclInvalidUsage naming it.
ncclResult_t unsupported(const char* call, ncclComm_t comm);

// ---- collectives and point to point (inside a group: run at the outermost group end) ----

ncclResult_t allReduce(SharedComm& c, const void* send, void* recv, size_t count,
                       ncclDataType_t t, ncclRedOp_t op, ncclStream_t stream);
ncclResult_t reduce(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                    ncclRedOp_t op, int root, ncclStream_t stream);
ncclResult_t broadcast(SharedComm& c, const void* send, void* recv, size_t count,
                       ncclDataType_t t, int root, ncclStream_t stream, const char* call);
ncclResult_t allGather(SharedComm& c, const void* send, void* recv, size_t count,
                       ncclDataType_t t, ncclStream_t stream);
ncclResult_t reduceScatter(SharedComm& c, const void* send, void* recv, size_t count,
                           ncclDataType_t t, ncclRedOp_t op, ncclStream_t stream);
ncclResult_t allToAll(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                      ncclStream_t stream);
ncclResult_t gather(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                    int root, ncclStream_t stream);
ncclResult_t scatter(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                     int root, ncclStream_t stream);
ncclResult_t send(SharedComm& c, const void* buf, size_t count, ncclDataType_t t, int peer,
                  ncclStream_t stream);
ncclResult_t recv(SharedComm& c, void* buf, size_t count, ncclDataType_t t, int peer,
                  ncclStream_t stream);

// ---- groups (per thread, as NCCL's) ----

/// ncclGroupStart: one level deeper.
void groupStart();
/// ncclGroupEnd (simulate: ncclGroupSimulateEnd, which runs nothing): one level up; at the
/// outermost end the shared comms' calls of the group run: per comm (in the order of the comms'
/// ids, the same on every rank) its collectives in call order, then its sends and receives as
/// one batch. Returns the first failure.
ncclResult_t groupEnd(bool simulate);
/// The calling thread's depth (0 outside groups).
int groupDepth();

}  // namespace shared
}  // namespace dropin
}  // namespace cclx
