// The subset of the NCCL 2.x C ABI that cclx calls, declared here so that building cclx needs no
// NCCL headers (libnccl is loaded at run time, see nccl_cuda.h). Values match nccl.h of 2.19+.
// The enums have the fixed underlying type int, as in C: any value an application passes (an op
// handle, a type of a newer NCCL, garbage that a call rejects) is representable.
#pragma once

#include <cstddef>

namespace cclx {
namespace nccl {

typedef struct ncclComm* ncclComm_t;
typedef void* ncclStream_t;  // ABI-identical to CUDA's stream handle
#define CCLX_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[CCLX_NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

/// NCCL's own text for a result code (as its ncclGetErrorString), for where no library says it.
inline const char* resultName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

typedef enum : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,  // NCCL >= 2.24
  ncclFloat8e5m2 = 11,  // NCCL >= 2.24
} ncclDataType_t;

typedef enum : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOpBase_t;
typedef int ncclRedOp_t;  // base ops above, or a handle from ncclRedOpCreatePreMulSum
typedef enum : int { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

using GetVersionFn = ncclResult_t (*)(int*);
using GetUniqueIdFn = ncclResult_t (*)(ncclUniqueId*);
using CommInitRankFn = ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int);
using CommFn = ncclResult_t (*)(ncclComm_t);
using CommGetAsyncErrorFn = ncclResult_t (*)(ncclComm_t, ncclResult_t*);
using GetErrorStringFn = const char* (*)(ncclResult_t);
using GetLastErrorFn = const char* (*)(ncclComm_t);
using AllReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                     ncclComm_t, ncclStream_t);
using ReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int,
                                  ncclComm_t, ncclStream_t);
using BroadcastFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                                     ncclStream_t);
using AllGatherFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                                     ncclStream_t);
using ReduceScatterFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                         ncclComm_t, ncclStream_t);
using SendFn = ncclResult_t (*)(const void*, size_t, ncclDataType_t, int, ncclComm_t, ncclStream_t);
using RecvFn = ncclResult_t (*)(void*, size_t, ncclDataType_t, int, ncclComm_t, ncclStream_t);
using GroupFn = ncclResult_t (*)();
using RedOpCreatePreMulSumFn = ncclResult_t (*)(ncclRedOp_t*, void*, ncclDataType_t,
                                                ncclScalarResidence_t, ncclComm_t);
using RedOpDestroyFn = ncclResult_t (*)(ncclRedOp_t, ncclComm_t);

// Buffer registration and NCCL's allocator (NCCL 2.19+: cuMem memory that registration and
// symmetric windows can map on the peers).
using CommRegisterFn = ncclResult_t (*)(ncclComm_t, void*, size_t, void**);
using CommDeregisterFn = ncclResult_t (*)(ncclComm_t, void*);
using MemAllocFn = ncclResult_t (*)(void**, size_t);
using MemFreeFn = ncclResult_t (*)(void*);

// One-sided API (NCCL 2.27 adds windows, 2.29 puts and signals); every symbol optional.
typedef struct ncclWindow_vidmem* ncclWindow_t;
constexpr int kNcclWinCollSymmetric = 0x01;  // NCCL_WIN_COLL_SYMMETRIC
typedef struct {
  int opCnt;   // signal operations to wait for
  int peer;
  int sigIdx;  // NCCL 2.29 accepts 0 only
  int ctx;     // NCCL 2.29 accepts 0 only
} ncclWaitSignalDesc_t;
using CommWindowRegisterFn = ncclResult_t (*)(ncclComm_t, void*, size_t, ncclWindow_t*, int);
using CommWindowDeregisterFn = ncclResult_t (*)(ncclComm_t, ncclWindow_t);
using PutSignalFn = ncclResult_t (*)(const void*, size_t, ncclDataType_t, int, ncclWindow_t, size_t,
                                     int, int, unsigned int, ncclComm_t, ncclStream_t);
using SignalFn = ncclResult_t (*)(int, int, int, unsigned int, ncclComm_t, ncclStream_t);
using WaitSignalFn = ncclResult_t (*)(int, ncclWaitSignalDesc_t*, ncclComm_t, ncclStream_t);

}  // namespace nccl
}  // namespace cclx
