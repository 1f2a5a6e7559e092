// The TorchWork a cclx torchcomms backend returns (src/torchcomms).
//
// CPU comms finish every operation inside the call, so their works are complete when returned
// (is_completed() is true, wait() runs the hooks only). A synchronous CUDA operation is ordered on
// the caller's current stream: complete for torchcomms as well. An asynchronous CUDA operation
// holds cclx's Work and the tensors it uses: wait() makes the current stream wait for it,
// wait_blocking() blocks the host; one poller thread per process moves its status to COMPLETED,
// TIMEDOUT or ERROR as cclx's Work::isCompleted() reports it, so is_completed() tells the truth
// before wait(). A failed wait raises std::runtime_error with cclx's message.
#pragma once

#include <cclx/cclx.hpp>
#include <comms/torchcomms/TorchWork.hpp>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cclx::tc {

class CclxWork : public torch::comms::TorchWork {
 public:
  /// A complete work (CPU comms, synchronous calls).
  CclxWork();
  /// An asynchronous CUDA operation; `keep` stays referenced until it completes, `after` runs
  /// once on the host after the first successful wait (copies out of staging tensors).
  /// `captured`: enqueued while the stream was captured into a CUDA graph. Such a work is
  /// complete at once (completion belongs to each replay) and is never polled, but every wait()
  /// still makes the current stream wait for it: that wait is what joins the comm's internal
  /// stream back into the capture (without it the capture ends with unjoined work).
  CclxWork(std::shared_ptr<Work> w, std::vector<at::Tensor> keep, std::chrono::milliseconds timeout,
           std::function<void()> after, bool captured = false);
  ~CclxWork() override = default;

  void wait() override;
  void waitBlocking() override;
  /// torchcomms' c10d layer calls it after wait() for a synchronous barrier (stock
  /// ProcessGroupNCCL blocks the host there): waits for the operation on the host (within its
  /// timeout), then for the device's current stream unless it is being captured. (No `override`:
  /// torchcomms releases before the c10d host block lack the virtual; there it is never called.)
  void hostSynchronize();
  /// The device whose current stream hostSynchronize waits for (CPU: none).
  void setDevice(const at::Device& d) { device_ = d; }
  std::chrono::milliseconds getTimeout() const override { return timeout_; }

  /// Poller: true once the status is final.
  bool poll();
  /// wait() emits torchcomms' "wait" profiler event for this comm (as NCCLX's works do).
  void traceWaitAs(std::string comm, int size, int rank);

 private:
  void fail(const std::exception& e);
  void finish();

  std::mutex mu_;
  std::shared_ptr<Work> w_;
  std::vector<at::Tensor> keep_;
  std::chrono::milliseconds timeout_{std::chrono::milliseconds::max()};
  std::function<void()> after_;
  bool captured_ = false;
  at::Device waitDevice_{at::kCPU};  // whose current stream wait() joins (keep's first tensor's)
  std::string error_;
  at::Device device_{at::kCPU};
  std::string traceComm_;  // traceWaitAs
  int traceSize_ = 0, traceRank_ = -1;
};

/// `w` complete (CPU / synchronous) or in flight (CUDA async).
c10::intrusive_ptr<torch::comms::TorchWork> makeWork(bool cudaAsync, std::shared_ptr<Work> w,
                                                     std::vector<at::Tensor> keep,
                                                     std::chrono::milliseconds timeout,
                                                     std::function<void()> after = {});

}  // namespace cclx::tc
