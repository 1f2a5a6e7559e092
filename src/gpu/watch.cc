// What the watchdog asks of a CUDA comm (core/failure/watchdog.h): the device's error words, NCCL's
// asynchronous error and the NCCL operations of eager calls past their timeout.
#include <algorithm>
#include <chrono>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "gpu/backend.h"
#include "gpu/nccl/loader.h"
#include "gpu/runtime.h"

namespace cclx {

// Completed NCCL operations give their events back (also at enqueue: reapNcclOpsLocked); one
// that started on the device (its start event completed) more than its timeout ago fails the
// comm. Events of one stream complete in the order they were recorded, so per stream: when its
// newest operation completed, all of its operations did (one query); otherwise the operations
// complete up to the oldest one still running, which alone can have started. The list is taken
// out of the lock while the events are queried, so a thread enqueuing calls never waits for this
// poll.
void CudaBackend::ncclOpsPoll() {
  std::vector<NcclOp> ops;
  {
    std::lock_guard<std::mutex> g(opsMu_);
    ops.swap(ncclOps_);
  }
  if (ops.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const auto never = std::chrono::steady_clock::time_point{};
  std::vector<cudaStream_t> streams;
  for (const NcclOp& op : ops)
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end())
      streams.push_back(op.stream);
  std::vector<char> done(ops.size(), 0);
  for (cudaStream_t st : streams) {
    size_t newest = ops.size();
    for (size_t i = ops.size(); i-- > 0;)
      if (ops[i].stream == st) {
        newest = i;
        break;
      }
    const bool all = cudaEventQuery(ops[newest].end.get()) == cudaSuccess;
    (void)cudaGetLastError();
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].stream != st) continue;
      if (all || cudaEventQuery(ops[i].end.get()) == cudaSuccess) {
        done[i] = 1;
        continue;
      }
      (void)cudaGetLastError();
      NcclOp& op = ops[i];  // the oldest running operation of this stream
      if (op.started == never && cudaEventQuery(op.start) == cudaSuccess) op.started = now;
      (void)cudaGetLastError();
      if (op.started != never && op.timeout < kInfiniteTimeout && now - op.started > op.timeout &&
          !sh_->failed.load()) {
        sh_->requestAbort();
        sh_->abortNccl();
        sh_->fail(cclxTimeout,
                  strFormat("rank %d: NCCL %s on comm '%s' (cuda:%d) did not complete within "
                            "%lld ms of starting (a peer never arrived or is stuck); NCCL "
                            "aborted, the comm is unusable",
                            ctx_.rank, collName(op.type), sh_->name.c_str(), sh_->device,
                            (long long)op.timeout.count()));
      }
      break;  // later operations of this stream have not started
    }
  }
  std::vector<NcclOp> keep;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (done[i]) sh_->returnEvent(ops[i].start);
    else keep.push_back(std::move(ops[i]));
  }
  std::lock_guard<std::mutex> g(opsMu_);
  for (NcclOp& op : ncclOps_) keep.push_back(std::move(op));  // enqueued meanwhile: newer
  ncclOps_.swap(keep);
}

// At enqueue, every kReapEvery-th watched operation: the stream's operations that completed leave
// the list now rather than at the watchdog's next poll, so that their events (the start event and
// the Work's) go back to the pool while the application runs calls back to back; otherwise a loop
// of eager calls holds a poll interval's worth of them (tens of thousands) and creates new ones.
// One event query: the stream's operation kReapLag before its newest; when it completed, so did
// every earlier one of the stream (stream order).
void CudaBackend::reapNcclOpsLocked(cudaStream_t s) {
  std::vector<size_t> mine;
  for (size_t i = 0; i < ncclOps_.size(); ++i)
    if (ncclOps_[i].stream == s) mine.push_back(i);
  if (mine.size() <= kReapLag) return;
  const size_t probe = mine[mine.size() - 1 - kReapLag];
  bool done = false;
  {
    RelaxedCapture relaxed(true);  // another thread may capture in global mode
    done = cudaEventQuery(ncclOps_[probe].end.get()) == cudaSuccess;
    (void)cudaGetLastError();
  }
  if (!done) return;
  std::vector<NcclOp> keep;
  keep.reserve(ncclOps_.size());
  for (size_t i = 0; i < ncclOps_.size(); ++i) {
    if (i <= probe && ncclOps_[i].stream == s) sh_->returnEvent(ncclOps_[i].start);
    else keep.push_back(std::move(ncclOps_[i]));
  }
  ncclOps_.swap(keep);  // the dropped operations' Work events return as their references go
}

std::pair<cclxResult_t, std::string> CudaBackend::poll() {
  // The watchdog thread's event queries must not invalidate a graph another thread captures in
  // global mode (torch.cuda.graph's default), nor fail because of it.
  RelaxedCapture relaxed(true);
  if (!sh_->failed.load()) {
    auto dev = sh_->deviceError();
    if (dev.first != cclxSuccess) {
      sh_->requestAbort();
      sh_->abortNccl();
      sh_->fail(dev.first, dev.second);
    }
  }
  if (!sh_->failed.load()) {
    DeviceGuard guard(sh_->device);
    ncclOpsPoll();
    nccl::ncclComm_t c = nullptr;
    {
      std::lock_guard<std::mutex> g(sh_->mu);
      if (sh_->ownsComm) c = sh_->comm;
    }
    nccl::ncclResult_t r = nccl::ncclSuccess;
    if (c && ncclLib().commGetAsyncError(c, &r) == nccl::ncclSuccess && r != nccl::ncclSuccess &&
        r != nccl::ncclInProgress) {
      sh_->requestAbort();
      sh_->abortNccl();  // NCCL kernels still queued or spinning behind the error exit
      sh_->fail(cclxNcclError, strFormat("rank %d: NCCL reported error %d on comm '%s'",
                                         ctx_.rank, int(r), sh_->name.c_str()));
    }
  }
  if (!sh_->failed.load()) return {cclxSuccess, ""};
  std::lock_guard<std::mutex> g(sh_->mu);
  return {sh_->failCode, sh_->failMsg};
}

cclxResult_t CudaBackend::asyncError() {
  if (sh_->failed.load()) {
    std::lock_guard<std::mutex> g(sh_->mu);
    return sh_->failCode;
  }
  try {
    sh_->checkDeviceError();
  } catch (const Error& e) {
    return e.code();
  }
  nccl::ncclComm_t c = nullptr;
  {
    std::lock_guard<std::mutex> g(sh_->mu);  // teardown on another thread clears it
    if (sh_->ownsComm) c = sh_->comm;
  }
  if (!c) return cclxSuccess;
  nccl::ncclResult_t r = nccl::ncclSuccess;
  if (ncclLib().commGetAsyncError(c, &r) != nccl::ncclSuccess) return cclxNcclError;
  if (r == nccl::ncclInProgress) return cclxInProgress;
  return r == nccl::ncclSuccess ? cclxSuccess : cclxNcclError;
}

}  // namespace cclx
