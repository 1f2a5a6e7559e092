// The backend's TorchWork and the poller of asynchronous CUDA works (work.h).
#include "torchcomms/work.h"

#include <comms/torchcomms/utils/TracingGuard.hpp>

#include <condition_variable>
#include <optional>
#include <deque>
#include <thread>

#include "torchcomms/device.h"

namespace cclx::tc {

namespace tcx = torch::comms;

namespace {

// One thread per process polls the asynchronous CUDA works in flight (started by the first).
class Poller {
 public:
  static Poller& get() {
    static Poller* p = new Poller();  // never destroyed: the thread outlives static teardown
    return *p;
  }
  void add(c10::intrusive_ptr<CclxWork> w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!started_) {
        started_ = true;
        std::thread([this] { run(); }).detach();
      }
      works_.push_back(std::move(w));
    }
    cv_.notify_one();
  }

 private:
  void run() {
    std::deque<c10::intrusive_ptr<CclxWork>> mine;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (mine.empty()) cv_.wait(lock, [&] { return !works_.empty(); });
        while (!works_.empty()) {
          mine.push_back(std::move(works_.front()));
          works_.pop_front();
        }
      }
      for (size_t n = mine.size(); n > 0; --n) {
        c10::intrusive_ptr<CclxWork> w = std::move(mine.front());
        mine.pop_front();
        if (!w->poll()) mine.push_back(std::move(w));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<CclxWork>> works_;
  bool started_ = false;
};

}  // namespace

CclxWork::CclxWork() { setStatus(WorkStatus::COMPLETED); }

CclxWork::CclxWork(std::shared_ptr<Work> w, std::vector<at::Tensor> keep,
                   std::chrono::milliseconds timeout, std::function<void()> after, bool captured)
    : w_(std::move(w)),
      keep_(std::move(keep)),
      timeout_(timeout),
      after_(std::move(after)),
      captured_(captured) {
  if (!keep_.empty()) waitDevice_ = keep_.front().device();
  setStatus(captured_ ? WorkStatus::COMPLETED : WorkStatus::INPROGRESS);
}

void CclxWork::fail(const std::exception& e) {
  error_ = std::string("[cclx] ") + e.what();
  const auto* ce = dynamic_cast<const Error*>(&e);
  setStatus(ce && ce->code() == cclxTimeout ? WorkStatus::TIMEDOUT : WorkStatus::ERROR);
}

void CclxWork::finish() {
  keep_.clear();
  w_.reset();
  setStatus(WorkStatus::COMPLETED);
}

bool CclxWork::poll() {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // a wait() is running: look again later
  if (status() != WorkStatus::INPROGRESS) return true;
  try {
    if (!w_->isCompleted()) return false;
    if (after_) return true;  // the copy out runs in wait(), which completes the work
    finish();
  } catch (const std::exception& e) {
    fail(e);
  }
  return true;
}

void CclxWork::traceWaitAs(std::string comm, int size, int rank) {
  traceComm_ = std::move(comm);
  traceSize_ = size;
  traceRank_ = rank;
}

void CclxWork::wait() {
  std::optional<tcx::TracingGuard> trace;
  if (traceSize_ > 0) trace.emplace(traceComm_, traceSize_, "wait", traceRank_);
  runWaitPreHooks();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.empty()) throw std::runtime_error(error_);
    if (w_) {  // a captured work keeps it: each wait() joins the capture (see the constructor)
      try {
        w_->wait(currentStream(waitDevice_));
        if (after_) {
          auto fn = std::move(after_);
          after_ = nullptr;
          fn();
        }
        if (!captured_ && w_->isCompleted()) finish();
      } catch (const std::exception& e) {
        fail(e);
        throw std::runtime_error(error_);
      }
    }
  }
  runWaitPostHooks();
}

void CclxWork::hostSynchronize() {
  waitBlocking();
  syncDeviceUnlessCapturing(device_);
}

void CclxWork::waitBlocking() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.empty()) throw std::runtime_error(error_);
  if (!w_) return;
  try {
    w_->waitBlocking();
    if (after_) {
      auto fn = std::move(after_);
      after_ = nullptr;
      fn();
      syncDevice(keep_.empty() ? at::Device(at::kCPU) : keep_.front().device());
    }
    finish();
  } catch (const std::exception& e) {
    fail(e);
    throw std::runtime_error(error_);
  }
}

c10::intrusive_ptr<tcx::TorchWork> makeWork(bool cudaAsync, std::shared_ptr<Work> w,
                                            std::vector<at::Tensor> keep,
                                            std::chrono::milliseconds timeout,
                                            std::function<void()> after) {
  if (!cudaAsync || !w) {
    if (after) after();
    return c10::make_intrusive<CclxWork>();
  }
  // A captured work is never polled: the poller would find it complete at once and drop the
  // operation before the caller's wait() joined it into the capture.
  const bool captured = !keep.empty() && capturing(keep.front().device());
  auto work = c10::make_intrusive<CclxWork>(std::move(w), std::move(keep), timeout,
                                            std::move(after), captured);
  if (!captured) Poller::get().add(work);
  return work;
}

}  // namespace cclx::tc
