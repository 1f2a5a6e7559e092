// libnccl loaded at run time (dlopen). Search order: CCLX_NCCL_PATH; in a process that runs the
// cclx drop-in (src/nccl_dropin), the real NCCL behind it; a libnccl.so.2 already loaded in the
// process (e.g. by torch); the nvidia-nccl pip package (directory in env CCLX_NCCL_PIP_DIR, which
// the Python layer sets); the system's libnccl.so.2. A library that is the drop-in is skipped.
// HIP builds look for RCCL, which implements the same API and ABI, the same way: librccl.so.1
// (CCLX_NCCL_PATH, already loaded, the system's).
#pragma once

#include <string>

#include "gpu/nccl/api.h"

namespace cclx {

struct NcclLib {
  nccl::GetVersionFn getVersion = nullptr;
  nccl::GetUniqueIdFn getUniqueId = nullptr;
  nccl::CommInitRankFn commInitRank = nullptr;
  nccl::CommFn commDestroy = nullptr;
  nccl::CommFn commAbort = nullptr;
  nccl::CommFn commFinalize = nullptr;  // optional (NCCL >= 2.14)
  nccl::CommGetAsyncErrorFn commGetAsyncError = nullptr;
  nccl::GetErrorStringFn getErrorString = nullptr;
  nccl::GetLastErrorFn getLastError = nullptr;  // optional
  nccl::AllReduceFn allReduce = nullptr;
  nccl::ReduceFn reduce = nullptr;
  nccl::BroadcastFn broadcast = nullptr;
  nccl::AllGatherFn allGather = nullptr;
  nccl::ReduceScatterFn reduceScatter = nullptr;
  nccl::SendFn send = nullptr;
  nccl::RecvFn recv = nullptr;
  nccl::GroupFn groupStart = nullptr;
  nccl::GroupFn groupEnd = nullptr;
  nccl::RedOpCreatePreMulSumFn redOpCreatePreMulSum = nullptr;
  nccl::RedOpDestroyFn redOpDestroy = nullptr;
  // Optional (NCCL 2.19+; null when the library lacks them).
  nccl::CommRegisterFn commRegister = nullptr;
  nccl::CommDeregisterFn commDeregister = nullptr;
  nccl::MemAllocFn memAlloc = nullptr;
  nccl::MemFreeFn memFree = nullptr;
  // One-sided windows (optional: NCCL 2.27+ / 2.29+; null when the library lacks them).
  nccl::CommWindowRegisterFn commWindowRegister = nullptr;
  nccl::CommWindowDeregisterFn commWindowDeregister = nullptr;
  nccl::PutSignalFn putSignal = nullptr;
  nccl::SignalFn signal = nullptr;
  nccl::WaitSignalFn waitSignal = nullptr;
  int version = 0;   // NCCL_VERSION_CODE of the loaded library (e.g. 22809)
  std::string path;  // where it came from
};

/// The NCCL functions to call: a table a test installed (table.h), else the library loaded once
/// per process (thread-safe). Throws cclx::Error(cclxUnsupported) naming every place tried when
/// no usable library is found. Defined in table.cc.
const NcclLib& ncclLib();
/// Throws cclx::Error(cclxNcclError) naming `what`, the code and NCCL's message when
/// r != ncclSuccess (table.cc).
void ncclCheck(nccl::ncclResult_t r, const char* what, nccl::ncclComm_t comm = nullptr);

}  // namespace cclx
