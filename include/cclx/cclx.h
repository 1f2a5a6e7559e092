/*
 * cclx C API, in NCCL's shape, over the C++ API (cclx.hpp).
 *
 * Every function returns a cclxResult_t; cclxSuccess (0) means it worked, anything else carries a
 * message that cclxGetLastError() returns on the same thread. No C++ exception crosses this
 * boundary. A failed call writes nothing to its output arguments or buffers.
 *
 * Ordering contract (same as the C++ API):
 *  - Every rank of a communicator calls the same collectives in the same order with matching
 *    count / datatype / op / root. Set CCLX_CHECK_MODE=1 to have this verified at run time.
 *  - CPU communicators (device -1): buffers are host memory, `stream` is ignored and must be
 *    NULL or anything; the call returns when the collective has finished on this rank.
 *  - CUDA communicators: buffers are device memory; the collective is enqueued on `stream`
 *    (a cudaStream_t; NULL = the legacy default stream) and the call returns once enqueued.
 *  - A communicator is used by one thread at a time.
 *  - A destroyed or aborted handle stays known: calls on it fail with cclxInvalidUsage; a
 *    pointer that no cclxCommInitRank* of this process returned fails with cclxInvalidArgument.
 *
 * Typical use:
 *   cclxUniqueId id;                      // rank 0: cclxGetUniqueId(&id), then ship the bytes
 *   cclxComm_t comm;
 *   cclxCommInitRank(&comm, nranks, id, rank, -1);
 *   cclxAllReduce(sbuf, rbuf, n, cclxFloat32, cclxSum, comm, NULL);
 *   cclxCommFinalize(comm);
 *   cclxCommDestroy(comm);
 */
#ifndef CCLX_CCLX_H_
#define CCLX_CCLX_H_

#include <cclx/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque communicator handle. */
typedef struct cclxComm* cclxComm_t;

#define CCLX_UNIQUE_ID_BYTES 128
/* Rendezvous token: where rank 0's store listens and which job it belongs to. Plain bytes,
 * safe to copy between processes (MPI_Bcast, a file, a socket). */
typedef struct {
  char internal[CCLX_UNIQUE_ID_BYTES];
} cclxUniqueId;

/* Communicator settings. Initialize with CCLX_CONFIG_INITIALIZER, then set what you need. */
typedef struct {
  size_t size;        /* sizeof(cclxConfig_t); set by the initializer */
  int64_t timeout_ms; /* collective and rendezvous timeout; 0 = default (CCLX_TIMEOUT, else
                         TORCHCOMM_TIMEOUT_SECONDS, else 600 s). CCLX_TIMEOUT_MS overrides it.
                         Errors are returned; the process is aborted on a timeout only when
                         CCLX_ABORT_ON_ERROR=1. */
  const char* name;   /* communicator name (NULL = "default"); namespaces its store keys */
  const char* backend;/* "cclx" (default, NULL) or "nccl" (plain NCCL; CUDA communicators only) */
} cclxConfig_t;
#define CCLX_CONFIG_INITIALIZER {sizeof(cclxConfig_t), 0, NULL, NULL}

/* Library version as CCLX_VERSION_CODE (major*10000 + minor*100 + patch). */
cclxResult_t cclxGetVersion(int* version);

/* Static, human-readable name of a result code ("cclxTimeout: ..."). Never NULL. */
const char* cclxGetErrorString(cclxResult_t result);

/* Message of the last failed call on this thread (comm may be NULL). Empty when none failed.
 * The pointer stays valid until the next cclx call on this thread. */
const char* cclxGetLastError(cclxComm_t comm);

/* Creates a rendezvous token on the calling process (normally rank 0): starts a TCP store in
 * this process, listening on an OS-chosen port, that serves until the process exits.
 * Errors: cclxInvalidArgument (id NULL), cclxSystemError (no socket). */
cclxResult_t cclxGetUniqueId(cclxUniqueId* id);

/* Collective over all `nranks` ranks: creates this rank's communicator. `device` is a CUDA
 * device ordinal, or -1 for a CPU communicator (host shared memory; all ranks on one host).
 * Blocks until every rank arrived or the timeout expired.
 * Errors: cclxInvalidArgument (NULL pointer, rank outside [0, nranks), malformed id),
 *         cclxTimeout (ranks missing; the message names them), cclxRemoteError (the id's store
 *         belongs to another job), cclxUnsupported (CUDA device in a build without CUDA). */
cclxResult_t cclxCommInitRank(cclxComm_t* comm, int nranks, cclxUniqueId id, int rank, int device);

/* Same as cclxCommInitRank, with settings. config may be NULL (defaults). */
cclxResult_t cclxCommInitRankConfig(cclxComm_t* comm, int nranks, cclxUniqueId id, int rank,
                                    int device, const cclxConfig_t* config);

/* Collective: rendezvous from the environment (TORCHCOMM_RANK/TORCHCOMM_SIZE or RANK/WORLD_SIZE,
 * MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500); rank 0 serves the store).
 * device: CUDA ordinal, -1 = CPU. config may be NULL.
 * Errors: cclxInvalidArgument (variables missing or malformed), as cclxCommInitRank otherwise. */
cclxResult_t cclxCommInitFromEnv(cclxComm_t* comm, int device, const cclxConfig_t* config);

/* Orderly shutdown once outstanding work has completed; later collectives fail with
 * cclxInvalidUsage. The handle must still be released with cclxCommDestroy. */
cclxResult_t cclxCommFinalize(cclxComm_t comm);
/* Releases the communicator's resources. NULL is a no-op. The handle stays known: later calls on
 * it (a second destroy included) fail with cclxInvalidUsage. */
cclxResult_t cclxCommDestroy(cclxComm_t comm);
/* Abandons outstanding work (peers waiting on this rank will time out) and releases the
 * communicator as cclxCommDestroy does (aborting a destroyed one does nothing). */
cclxResult_t cclxCommAbort(cclxComm_t comm);
/* First asynchronous error (cclxSuccess if none, cclxInProgress while work runs, cclxAborted). */
cclxResult_t cclxCommGetAsyncError(cclxComm_t comm, cclxResult_t* asyncError);

cclxResult_t cclxCommCount(const cclxComm_t comm, int* count);
cclxResult_t cclxCommUserRank(const cclxComm_t comm, int* rank);
/* CUDA device ordinal of the communicator, -1 for a CPU communicator. */
cclxResult_t cclxCommCuDevice(const cclxComm_t comm, int* device);

/* Creates a reduction operator that multiplies every input by `factor` before summing
 * (PREMUL_SUM). The returned op id (>= cclxNumOps) is valid on `comm` only, until destroyed.
 * Errors: cclxInvalidArgument (NULL op, factor not finite). */
cclxResult_t cclxRedOpCreatePreMulSum(cclxRedOp_t* op, double factor, cclxComm_t comm);
cclxResult_t cclxRedOpDestroy(cclxRedOp_t op, cclxComm_t comm);

/* Collectives. `count` is in elements. sendbuff == recvbuff means in place. All ranks receive
 * identical results. Errors common to all: cclxInvalidArgument (NULL buffer with count > 0,
 * datatype/op combination unsupported (bitwise ops on floats, any reduction on FP8), root or
 * peer out of range, unknown op id), cclxInvalidUsage (after finalize/abort, check-mode
 * mismatch), cclxTimeout (a rank did not arrive; the message names it). */

/* recvbuff[i] = op over ranks of sendbuff[i]. */
cclxResult_t cclxAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           cclxDataType_t datatype, cclxRedOp_t op, cclxComm_t comm, void* stream);
/* Like cclxAllReduce; only `root` receives (recvbuff may be NULL elsewhere). */
cclxResult_t cclxReduce(const void* sendbuff, void* recvbuff, size_t count, cclxDataType_t datatype,
                        cclxRedOp_t op, int root, cclxComm_t comm, void* stream);
/* recvbuff = root's sendbuff on every rank (sendbuff is read on root only). */
cclxResult_t cclxBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           cclxDataType_t datatype, int root, cclxComm_t comm, void* stream);
/* recvbuff[r*sendcount ...] = rank r's sendbuff (recvbuff holds nranks*sendcount elements). */
cclxResult_t cclxAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           cclxDataType_t datatype, cclxComm_t comm, void* stream);
/* recvbuff (recvcount elements) = op over ranks of their sendbuff block number `rank`
 * (sendbuff holds nranks*recvcount elements). */
cclxResult_t cclxReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               cclxDataType_t datatype, cclxRedOp_t op, cclxComm_t comm,
                               void* stream);
/* Block r (count elements) of sendbuff goes to rank r, landing in block `rank` of its recvbuff. */
cclxResult_t cclxAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          cclxDataType_t datatype, cclxComm_t comm, void* stream);
/* Variable all-to-all: sendcounts[r] / recvcounts[r] (nranks entries each) elements, blocks
 * packed contiguously in rank order. Rank i's sendcounts[j] must equal rank j's recvcounts[i]. */
cclxResult_t cclxAllToAllV(const void* sendbuff, const size_t* sendcounts, void* recvbuff,
                           const size_t* recvcounts, cclxDataType_t datatype, cclxComm_t comm,
                           void* stream);
/* Point to point: `peer` must call the matching cclxRecv / cclxSend with the same count. */
cclxResult_t cclxSend(const void* sendbuff, size_t count, cclxDataType_t datatype, int peer,
                      cclxComm_t comm, void* stream);
cclxResult_t cclxRecv(void* recvbuff, size_t count, cclxDataType_t datatype, int peer,
                      cclxComm_t comm, void* stream);
/* Returns once every rank has entered the barrier (CUDA: ordered on stream). */
cclxResult_t cclxBarrier(cclxComm_t comm, void* stream);

/* One message of cclxGroupSendRecv: `count` elements to or from rank `peer`. A send's buffer is
 * only read. */
typedef struct {
  int peer;
  void* buff;
  size_t count;
} cclxP2PMessage;

/* Grouped point to point: the nsends sends and nrecvs receives (all of `datatype`) run as one
 * operation that completes when all have. Messages between two ranks match in order (with the
 * peer's cclxSend/cclxRecv calls and groups), whatever the order of the peers in the lists: no
 * listing order deadlocks. Messages to the calling rank itself pair with its receives from itself,
 * in order (counts must agree). Receive buffers must not overlap each other or a send buffer
 * (except a receive from itself into exactly its send's buffer). Zero-count messages carry
 * nothing; their match must be zero-count too. Lists may be NULL when their count is 0.
 * Errors: as the collectives; cclxInvalidUsage when a peer's matching message has another size. */
cclxResult_t cclxGroupSendRecv(const cclxP2PMessage* sends, int nsends,
                               const cclxP2PMessage* recvs, int nrecvs, cclxDataType_t datatype,
                               cclxComm_t comm, void* stream);

/* Fused allreduce + residual add + RMSNorm (+ FP8 e4m3) of tensor-parallel inference, per token
 * row of `hidden` elements (f32, bf16 or f16; fp32 arithmetic; docs/design/fused-rmsnorm.md
 * gives every rounding):
 *   residualOut = allreduce_sum(x) + residual
 *   out         = residualOut * rsqrt(mean(residualOut^2) + eps) * weight
 *   fp8Out      = e4m3(out / scale), scales[t] = scale (per-token amax / 448, or *staticScale)
 * x, residual, residualOut, out, fp8Out: [tokens, hidden]; weight: [hidden]; scales: [tokens]
 * floats; staticScale: one float (device memory on CUDA comms) or NULL. out may be NULL when
 * fp8Out is set; fp8Out NULL: no quantization. out may equal x and residualOut may equal
 * residual; no other overlap. `residual` must be the same on every rank. The result is the same
 * bits on every rank. Errors: cclxInvalidArgument (dtype, hidden outside 1..2^24-1, eps not finite
 * and >= 0, NULL buffers, overlaps), as the other collectives otherwise. */
cclxResult_t cclxAllReduceRmsNorm(const void* x, const void* residual, void* residualOut,
                                  const void* weight, void* out, void* fp8Out, float* scales,
                                  const float* staticScale, size_t tokens, size_t hidden,
                                  cclxDataType_t datatype, float eps, cclxComm_t comm,
                                  void* stream);

/* One-sided windows (torchcomms' new_window; the contract is cclx::Window's in cclx.hpp). Every
 * rank registers a buffer of the same count and datatype; cclxPut copies into a peer's buffer
 * without the peer taking part; cclxSignal(peer) adds one to peer's counter for this rank once
 * every earlier cclxPut to peer is visible there; cclxWaitSignal(peer) waits for the next signal
 * from peer. CUDA communicators: stream-ordered on `stream`, capturable in CUDA graphs. CPU
 * communicators: `buff` must be shared memory peers can map (cclxMemAllocShared). */
typedef struct cclxWindow* cclxWindow_t;

/* Collective: a window on comm with `count` elements of `datatype` at buff registered.
 * Errors: cclxInvalidArgument (NULL pointers, ranks registering different sizes: nothing is
 *         registered on any rank; CPU memory peers cannot map), cclxUnsupported (no transport:
 *         e.g. ranks on several hosts with an NCCL older than 2.29). */
cclxResult_t cclxWinCreate(cclxWindow_t* win, void* buff, size_t count, cclxDataType_t datatype,
                           cclxComm_t comm);
/* Collective: waits until every rank is done with the window, then releases it. NULL: no-op. */
cclxResult_t cclxWinFree(cclxWindow_t win);
/* Copies `count` elements from sendbuff into `peer`'s window at element targetOffset.
 * Errors: cclxInvalidArgument (the range does not fit the window; nothing is written). */
cclxResult_t cclxPut(const void* sendbuff, size_t count, int peer, size_t targetOffset,
                     cclxWindow_t win, void* stream);
cclxResult_t cclxSignal(int peer, cclxWindow_t win, void* stream);
/* Errors: cclxTimeout (no signal within the timeout; the message names peer). */
cclxResult_t cclxWaitSignal(int peer, cclxWindow_t win, void* stream);
/* Rank `rank`'s window as addressed by this process (cclxUnsupported when not directly
 * accessible, e.g. across hosts). */
cclxResult_t cclxWinRemotePtr(cclxWindow_t win, int rank, void** ptr);
/* Collective on the first call: the address of the window's device handle (torchcomms'
 * TorchCommDeviceWindow with the cclx backend; <cclx/device_window.h>), with signalCount
 * signals and counterCount counters (negative: the comm's size) and barrierCount barriers.
 * Errors: cclxInvalidArgument (counts out of range or different across ranks), cclxUnsupported
 * (no peer memory: e.g. ranks on several hosts). */
cclxResult_t cclxWinGetDeviceWindow(cclxWindow_t win, int signalCount, int counterCount,
                                    int barrierCount, void** handle);
/* Shared host memory for the windows of CPU communicators (zeroed). */
cclxResult_t cclxMemAllocShared(void** ptr, size_t size);
cclxResult_t cclxMemFreeShared(void* ptr);

/* Device memory on the current device that every cclx transport can share (cclx::memAlloc):
 * windows map it on the peers, registration makes NCCL zero-copy on it.
 * Errors: cclxInvalidArgument (ptr NULL, size 0), cclxUnsupported, cclxCudaError. */
cclxResult_t cclxMemAlloc(void** ptr, size_t size);
/* Frees cclxMemAlloc memory once the device's work is done. NULL: no-op. */
cclxResult_t cclxMemFree(void* ptr);
/* The same memory with the allocation functions' signatures torch's CUDAPluggableAllocator calls
 * (torch.cuda.memory.CUDAPluggableAllocator(<this library>, "cclxTorchAlloc", "cclxTorchFree")):
 * `device` is the CUDA ordinal, `stream` unused. Failures return NULL (torch reports out of
 * memory); the reason goes to the log (CCLX_DEBUG=WARN). */
void* cclxTorchAlloc(ptrdiff_t size, int device, void* stream);
void cclxTorchFree(void* ptr, ptrdiff_t size, int device, void* stream);

/* Local: registers [buff, buff + size) on comm for zero-copy use (cclx::Comm::registerMemory).
 * Errors: cclxInvalidArgument (NULL, 0 bytes, already registered, memory of another device). */
cclxResult_t cclxCommRegister(cclxComm_t comm, void* buff, size_t size);
/* Errors: cclxInvalidArgument (no registration of exactly (buff, size)). */
cclxResult_t cclxCommDeregister(cclxComm_t comm, void* buff, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* CCLX_CCLX_H_ */
