// The NCCL C ABI as the drop-in exports it: the types (ABI-identical to nccl.h of NCCL 2.19 to
// 2.30, opaque where only pointers cross) and one table of every exported function, so that no
// NCCL header is needed and a function the loaded NCCL lacks is still a symbol of ours.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpu/nccl/api.h"

namespace cclx {
namespace dropin {

using nccl::ncclComm_t;
using nccl::ncclDataType_t;
using nccl::ncclRedOp_t;
using nccl::ncclResult_t;
using nccl::ncclScalarResidence_t;
using nccl::ncclUniqueId;
using nccl::ncclStream_t;  // a cudaStream_t
using ncclConfig_t = struct ncclConfig;  // only pointers cross
using ncclWindow_t = struct ncclWindow_vidmem*;
using ncclParamHandle_t = struct ncclParamHandle*;
struct ncclTeam_t {  // by value: { nRanks, rank, stride }
  int nRanks, rank, stride;
};
struct ncclMultimemHandle_t {  // by value: one pointer
  void* mcBasePtr;
};

}  // namespace dropin
}  // namespace cclx

// Functions returning ncclResult_t: R(name, (parameters), (arguments)) for those the drop-in
// forwards to the real NCCL as they are (forward.cc: a comm of the shared-GPU mode among the
// arguments is refused instead), I(...) for those intercept.cc defines, E(...) for those
// entry.cc defines (served for the shared-GPU mode's comms, else forwarded).
#define CCLX_NCCL_RESULT_FUNCTIONS(R, I, E)                                                              \
  R(ncclMemAlloc, (void** ptr, size_t size), (ptr, size))                                          \
  R(ncclMemFree, (void* ptr), (ptr))                                                               \
  R(ncclGetVersion, (int* version), (version))                                                     \
  E(ncclGetUniqueId, (ncclUniqueId * id), (id))                                                    \
  I(ncclCommInitRankConfig,                                                                        \
    (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config),              \
    (comm, nranks, id, rank, config))                                                              \
  I(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank),                  \
    (comm, nranks, id, rank))                                                                      \
  R(ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist), (comm, ndev, devlist))     \
  I(ncclCommInitRankScalable,                                                                      \
    (ncclComm_t * comm, int nranks, int rank, int nId, ncclUniqueId* ids, ncclConfig_t* config),   \
    (comm, nranks, rank, nId, ids, config))                                                        \
  I(ncclCommFinalize, (ncclComm_t comm), (comm))                                                   \
  I(ncclCommDestroy, (ncclComm_t comm), (comm))                                                    \
  I(ncclCommAbort, (ncclComm_t comm), (comm))                                                      \
  I(ncclCommRevoke, (ncclComm_t comm, int flags), (comm, flags))                                   \
  I(ncclCommSplit,                                                                                 \
    (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),              \
    (comm, color, key, newcomm, config))                                                           \
  I(ncclCommShrink,                                                                                \
    (ncclComm_t comm, int* exclude, int nExclude, ncclComm_t* newcomm, ncclConfig_t* config,       \
     int flags),                                                                                   \
    (comm, exclude, nExclude, newcomm, config, flags))                                             \
  I(ncclCommGrow,                                                                                  \
    (ncclComm_t comm, int nranks, const ncclUniqueId* id, int rank, ncclComm_t* newcomm,           \
     ncclConfig_t* config),                                                                        \
    (comm, nranks, id, rank, newcomm, config))                                                     \
  R(ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId * id), (comm, id))                         \
  I(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * err), (comm, err))                     \
  E(ncclCommCount, (const ncclComm_t comm, int* count), (comm, count))                             \
  E(ncclCommCuDevice, (const ncclComm_t comm, int* device), (comm, device))                        \
  E(ncclCommUserRank, (const ncclComm_t comm, int* rank), (comm, rank))                            \
  E(ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle),             \
    (comm, buff, size, handle))                                                                    \
  E(ncclCommDeregister, (const ncclComm_t comm, void* handle), (comm, handle))                     \
  R(ncclCommSuspend, (ncclComm_t comm, int flags), (comm, flags))                                  \
  R(ncclCommResume, (ncclComm_t comm), (comm))                                                     \
  R(ncclCommMemStats, (ncclComm_t comm, int stat, uint64_t* value), (comm, stat, value))           \
  R(ncclCommWindowRegister,                                                                        \
    (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags),                      \
    (comm, buff, size, win, flags))                                                                \
  R(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win), (comm, win))                    \
  R(ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void** ptr), (comm, win, ptr))          \
  R(ncclCommQueryProperties, (ncclComm_t comm, void* props), (comm, props))                        \
  R(ncclDevCommCreate, (ncclComm_t comm, const void* reqs, void* devComm), (comm, reqs, devComm))  \
  R(ncclDevCommDestroy, (ncclComm_t comm, const void* devComm), (comm, devComm))                   \
  R(ncclGetLsaMultimemDevicePointer, (ncclWindow_t win, size_t offset, void** ptr),                \
    (win, offset, ptr))                                                                            \
  R(ncclGetMultimemDevicePointer,                                                                  \
    (ncclWindow_t win, size_t offset, ncclMultimemHandle_t mm, void** ptr), (win, offset, mm, ptr)) \
  R(ncclGetLsaDevicePointer, (ncclWindow_t win, size_t offset, int lsaRank, void** ptr),           \
    (win, offset, lsaRank, ptr))                                                                   \
  R(ncclGetPeerDevicePointer, (ncclWindow_t win, size_t offset, int peer, void** ptr),             \
    (win, offset, peer, ptr))                                                                      \
  R(ncclLsaBarrierCreateRequirement,                                                               \
    (ncclTeam_t team, int nBarriers, void* handle, void* req), (team, nBarriers, handle, req))     \
  R(ncclGinBarrierCreateRequirement,                                                               \
    (ncclComm_t comm, ncclTeam_t team, int nBarriers, void* handle, void* req),                    \
    (comm, team, nBarriers, handle, req))                                                          \
  R(ncclLLA2ACreateRequirement, (int nBlocks, int nSlots, void* handle, void* req),                \
    (nBlocks, nSlots, handle, req))                                                                \
  R(ncclGinOutboxCreateRequirement, (int nBlocks, int sizeLog2, void* handle, void* req),          \
    (nBlocks, sizeLog2, handle, req))                                                              \
  R(ncclGinInboxA2ACreateRequirement,                                                              \
    (ncclTeam_t peers, int nBlocks, int sizeLog2, void* handle, void* req),                        \
    (peers, nBlocks, sizeLog2, handle, req))                                                       \
  E(ncclRedOpCreatePreMulSum,                                                                      \
    (ncclRedOp_t * op, void* scalar, ncclDataType_t type, ncclScalarResidence_t residence,         \
     ncclComm_t comm),                                                                             \
    (op, scalar, type, residence, comm))                                                           \
  E(ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm), (op, comm))                               \
  E(ncclReduce,                                                                                    \
    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,    \
     ncclComm_t comm, ncclStream_t stream),                                                        \
    (send, recv, count, type, op, root, comm, stream))                                             \
  E(ncclBcast,                                                                                     \
    (void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm, ncclStream_t stream), \
    (buff, count, type, root, comm, stream))                                                       \
  E(ncclBroadcast,                                                                                 \
    (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,    \
     ncclStream_t stream),                                                                         \
    (send, recv, count, type, root, comm, stream))                                                 \
  I(ncclAllReduce,                                                                                 \
    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,              \
     ncclComm_t comm, ncclStream_t stream),                                                        \
    (send, recv, count, type, op, comm, stream))                                                   \
  I(ncclReduceScatter,                                                                             \
    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,              \
     ncclComm_t comm, ncclStream_t stream),                                                        \
    (send, recv, count, type, op, comm, stream))                                                   \
  I(ncclAllGather,                                                                                 \
    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,             \
     ncclStream_t stream),                                                                         \
    (send, recv, count, type, comm, stream))                                                       \
  I(ncclAlltoAll,                                                                                  \
    (const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,             \
     ncclStream_t stream),                                                                         \
    (send, recv, count, type, comm, stream))                                                       \
  E(ncclGather,                                                                                    \
    (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,    \
     ncclStream_t stream),                                                                         \
    (send, recv, count, type, root, comm, stream))                                                 \
  E(ncclScatter,                                                                                   \
    (const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,    \
     ncclStream_t stream),                                                                         \
    (send, recv, count, type, root, comm, stream))                                                 \
  E(ncclSend,                                                                                      \
    (const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,               \
     ncclStream_t stream),                                                                         \
    (send, count, type, peer, comm, stream))                                                       \
  E(ncclRecv,                                                                                      \
    (void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, ncclStream_t stream), \
    (recv, count, type, peer, comm, stream))                                                       \
  R(ncclPutSignal,                                                                                 \
    (const void* local, size_t count, ncclDataType_t type, int peer, ncclWindow_t peerWin,         \
     size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,               \
     ncclStream_t stream),                                                                         \
    (local, count, type, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm, stream))          \
  R(ncclSignal,                                                                                    \
    (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, ncclStream_t stream),     \
    (peer, sigIdx, ctx, flags, comm, stream))                                                      \
  R(ncclWaitSignal, (int nDesc, void* descs, ncclComm_t comm, ncclStream_t stream),                \
    (nDesc, descs, comm, stream))                                                                  \
  I(ncclGroupStart, (), ())                                                                        \
  I(ncclGroupEnd, (), ())                                                                          \
  I(ncclGroupSimulateEnd, (void* simInfo), (simInfo))                                              \
  R(ncclParamBind, (ncclParamHandle_t * out, const char* key), (out, key))                         \
  R(ncclParamGetI8, (ncclParamHandle_t h, int8_t* out), (h, out))                                  \
  R(ncclParamGetI16, (ncclParamHandle_t h, int16_t* out), (h, out))                                \
  R(ncclParamGetI32, (ncclParamHandle_t h, int32_t* out), (h, out))                                \
  R(ncclParamGetI64, (ncclParamHandle_t h, int64_t* out), (h, out))                                \
  R(ncclParamGetU8, (ncclParamHandle_t h, uint8_t* out), (h, out))                                 \
  R(ncclParamGetU16, (ncclParamHandle_t h, uint16_t* out), (h, out))                               \
  R(ncclParamGetU32, (ncclParamHandle_t h, uint32_t* out), (h, out))                               \
  R(ncclParamGetU64, (ncclParamHandle_t h, uint64_t* out), (h, out))                               \
  R(ncclParamGetStr, (ncclParamHandle_t h, const char** out), (h, out))                            \
  R(ncclParamGet, (ncclParamHandle_t h, void* out, int maxLen, int* len), (h, out, maxLen, len))   \
  R(ncclParamGetParameter, (const char* key, const char** value, int* len), (key, value, len))     \
  R(ncclParamGetAllParameterKeys, (const char*** table, int* len), (table, len))

// Functions with other return types: O(type, name, (parameters), (arguments), value when the
// real NCCL lacks the function); IO(...) for those intercept.cc defines.
#define CCLX_NCCL_OTHER_FUNCTIONS(O, IO)                                                               \
  O(const char*, ncclGetErrorString, (ncclResult_t r), (r), errorName(r))                          \
  IO(const char*, ncclGetLastError, (ncclComm_t comm), (comm), "")                                  \
  O(void, ncclResetDebugInit, (), (), )                                                            \
  O(void, ncclResetDebugInitInternal, (), (), )                                                    \
  O(void, ncclParamDumpAll, (), (), )                                                              \
  O(ncclTeam_t, ncclTeamWorld, (ncclComm_t comm), (comm), ncclTeam_t{})                            \
  O(ncclTeam_t, ncclTeamLsa, (ncclComm_t comm), (comm), ncclTeam_t{})                              \
  O(ncclTeam_t, ncclTeamRail, (ncclComm_t comm), (comm), ncclTeam_t{})                             \
  O(int, ncclTeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank), -1) \
  O(int, ncclTeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank), (comm, team, rank), -1)  \
  O(int, ncclLLA2ACalcSlots, (int maxElts, int maxEltSize), (maxElts, maxEltSize), 0)
