/*
 * cclx public types, shared by the C API (cclx.h) and the C++ API (cclx.hpp).
 * Plain C so FFI users (ctypes, cffi, Rust bindgen) can consume it.
 */
#ifndef CCLX_TYPES_H_
#define CCLX_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* In C++ the enums below have the fixed underlying type int, as in C: any int a caller passes
 * (a PreMulSum op handle, a value out of range that the call then rejects) is a value of the
 * type, never undefined behaviour. */
#ifdef __cplusplus
#define CCLX_ENUM_INT : int
#else
#define CCLX_ENUM_INT
#endif

#define CCLX_MAJOR 0
#define CCLX_MINOR 1
#define CCLX_PATCH 0
#define CCLX_VERSION_CODE (CCLX_MAJOR * 10000 + CCLX_MINOR * 100 + CCLX_PATCH)

/* Result codes, in NCCL's manner: 0 is success, everything else carries a message
 * retrievable with cclxGetLastError(). */
typedef enum CCLX_ENUM_INT {
  cclxSuccess = 0,
  cclxInvalidArgument = 1, /* bad pointer, count, dtype/op combination, root, ... Nothing was written. */
  cclxInvalidUsage = 2,    /* API misuse: use after finalize/abort, wrong device, mismatch in check mode */
  cclxTimeout = 3,         /* a peer did not arrive within the timeout; message names the missing ranks */
  cclxSystemError = 4,     /* OS call failed (socket, shm, mmap) */
  cclxCudaError = 5,       /* a CUDA runtime call failed */
  cclxNcclError = 6,       /* NCCL returned an error */
  cclxRemoteError = 7,     /* a peer reported an error or presented another job's id */
  cclxInternalError = 8,
  cclxAborted = 9,         /* the communicator was aborted */
  cclxInProgress = 10,     /* async operation still running (cclxCommGetAsyncError) */
  cclxUnsupported = 11,    /* valid request this build/device cannot serve (e.g. CUDA without a GPU) */
  cclxNumResults = 12
} cclxResult_t;

/* Element types. FP8 types are for data movement (broadcast, gathers, all-to-all, send/recv);
 * reductions on them are rejected. Values are stable (ABI). */
typedef enum CCLX_ENUM_INT {
  cclxFloat32 = 0,
  cclxFloat64 = 1,
  cclxFloat16 = 2,
  cclxBfloat16 = 3,
  cclxInt8 = 4,
  cclxUint8 = 5,
  cclxInt32 = 6,
  cclxInt64 = 7,
  cclxUint32 = 8,
  cclxUint64 = 9,
  cclxFloat8e4m3 = 10,
  cclxFloat8e5m2 = 11,
  cclxNumTypes = 12
} cclxDataType_t;

/* Reduction operators. AVG divides the sum by the world size (integer division for integer
 * types). PREMUL_SUM multiplies every input by a factor before summing: create it with
 * cclxRedOpCreatePreMulSum(). Bitwise ops accept integer types only. */
typedef enum CCLX_ENUM_INT {
  cclxSum = 0,
  cclxProd = 1,
  cclxMin = 2,
  cclxMax = 3,
  cclxAvg = 4,
  cclxBand = 5,
  cclxBor = 6,
  cclxBxor = 7,
  cclxPremulSum = 8,
  cclxNumOps = 9
} cclxRedOp_t;

#ifdef __cplusplus
}
#endif

#endif /* CCLX_TYPES_H_ */
