// CUDA backend internals shared by cuda_backend_cuda.cc, cuda_work_cuda.cc and nccl_algo_cuda.cc.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algos/device_ctx.h"
#include "core/backend.h"
#include "transport/nccl_cuda.h"

namespace cclx {

/// State that outlives the backend while Works refer to it.
struct CudaShared {
  int device = -1;
  int rank = 0;
  int size = 1;
  nccl::ncclComm_t comm = nullptr;
  volatile uint32_t* errHost = nullptr;  // host-mapped error words (device_ctx.h)
  uint32_t* errDev = nullptr;

  std::mutex mu;
  std::atomic<bool> failed{false};
  cclxResult_t failCode = cclxSuccess;
  std::string failMsg;
  std::vector<cudaEvent_t> freeEvents;

  ~CudaShared();
  /// Throws the stored failure, if any.
  void throwIfFailed();
  /// Records the first failure (later ones are ignored) and returns it as an Error.
  Error fail(cclxResult_t code, const std::string& msg);
  /// Turns a kernel-reported timeout into a failure (and throws it); no-op when none.
  void checkDeviceError();
  /// NCCL abort (once) so that stuck NCCL kernels exit; the comm is unusable afterwards.
  void abortNccl();
  cudaEvent_t takeEvent();
  void returnEvent(cudaEvent_t e);
};

/// Work of a CUDA collective: an event recorded after the operation. `captured`: recorded inside
/// a CUDA-graph capture (only wait(stream) is meaningful; the host cannot poll it).
std::shared_ptr<Work> makeCudaWork(std::shared_ptr<CudaShared> sh, cudaEvent_t ev, bool captured,
                                   std::chrono::milliseconds timeout);

/// Scoped cudaSetDevice (restores the previous device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev);
  ~DeviceGuard();

 private:
  int prev_ = -1;
};

/// NCCL paths of every collective (nccl_algo_cuda.cc). Enqueues on `stream`.
void ncclRunCollective(const CollArgs& a, CudaShared& sh, cudaStream_t stream);
nccl::ncclDataType_t ncclType(DataType t);

}  // namespace cclx
