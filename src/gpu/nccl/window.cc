// One-sided windows through NCCL's one-sided API (gpu/window/window.h), for GPU comms whose ranks
// cannot reach each other through CUDA IPC (several hosts): registration with
// ncclCommWindowRegister (symmetric windows, NCCL 2.27+), put = ncclPutSignal, signal =
// ncclSignal, wait_signal = ncclWaitSignal for one signal operation (NCCL 2.29+; signal index and
// context 0, the only values NCCL accepts). The symbols are looked up at run time: a library
// without them gives cclxUnsupported naming the version that adds them.
//
// What NCCL's API implies (docs/design/windows.md): ncclPutSignal signals with every
// put, so on this transport each put and each signal count as one signal operation at the
// destination, and wait_signal consumes one. The pattern "k puts, then signal" is waited for
// with k + 1 wait_signal calls (or one put per signal). NCCL requires the registered buffer (and
// the put's source) to be memory NCCL can register as a symmetric window (ncclMemAlloc / its
// memory pool); map_remote_tensor works for this rank's own window only.
#include "base/error.h"
#include "base/log.h"
#include "gpu/backend.h"
#include "gpu/nccl/loader.h"
#include "gpu/runtime.h"
#include "gpu/window/window.h"

namespace cclx {

namespace {

class NcclWindow final : public WinImpl {
 public:
  explicit NcclWindow(CudaBackend& b)
      : sh_(b.shared()), L_(ncclLib()), calls_(b, b.shared()->size), rank_(sh_->rank) {}

  ~NcclWindow() override { release(); }

  const char* transport() const override { return "nccl"; }

  void attach(void* ptr, size_t bytes, const WinExchange& ex) override {
    std::string ok = "1";
    {
      DeviceGuard g(sh_->device);
      nccl::ncclResult_t r =
          L_.commWindowRegister(comm(), ptr, bytes, &win_, nccl::kNcclWinCollSymmetric);
      if (r != nccl::ncclSuccess || !win_) {
        const char* last = L_.getLastError ? L_.getLastError(comm()) : nullptr;
        ok = strFormat("!ncclCommWindowRegister failed: NCCL error %d%s%s (the buffer must be "
                       "memory NCCL can register: ncclMemAlloc or NCCL's memory pool)",
                       int(r), last && *last ? ": " : "", last ? last : "");
        win_ = nullptr;
      }
    }
    std::string bad;
    const std::vector<std::string> oks = ex("nccl", ok);
    for (size_t r = 0; r < oks.size(); ++r)
      if (oks[r] != "1")
        bad += strFormat("%srank %zu: %s", bad.empty() ? "" : "; ", r, oks[r].c_str() + 1);
    if (!bad.empty()) {
      deregister();  // the ranks that registered (NCCL gave them a window)
      CCLX_THROW(cclxInvalidArgument, "tensor_register: %s", bad.c_str());
    }
    mine_ = ptr;
  }

  void detach(const WinExchange& ex, bool healthy) override {
    if (healthy) {
      if (!sh_->failed.load()) calls_.drain();
      ex("done", "1");
      deregister();  // collective in NCCL: every rank is here
      ex("closed", "1");
      return;
    }
    win_ = nullptr;  // an aborted or finalized comm: NCCL's state is gone with it
    mine_ = nullptr;
  }

  // A window destroyed without deregistration: NCCL's deregistration is collective, so the
  // registration stays with the NCCL comm (released when the comm is destroyed).
  void release() override {
    win_ = nullptr;
    mine_ = nullptr;
  }

  void deregister() {
    if (win_ && !sh_->failed.load() && comm()) {
      DeviceGuard g(sh_->device);
      calls_.drain();
      nccl::ncclResult_t r = L_.commWindowDeregister(comm(), win_);
      if (r != nccl::ncclSuccess) CCLX_WARN("ncclCommWindowDeregister returned %d", int(r));
    }
    win_ = nullptr;
    mine_ = nullptr;
  }

  std::shared_ptr<Work> put(const void* src, size_t bytes, int dst, size_t offset,
                            const CollOptions& o) override {
    WinCalls::Call c = calls_.begin(o);
    ncclCheck(L_.putSignal(src, bytes, nccl::ncclUint8, dst, win_, offset, 0, 0, 0, comm(),
                           c.stream),
              "ncclPutSignal", comm());
    return calls_.finish(c, o);
  }

  std::shared_ptr<Work> signal(int dst, const CollOptions& o) override {
    WinCalls::Call c = calls_.begin(o);
    ncclCheck(L_.signal(dst, 0, 0, 0, comm(), c.stream), "ncclSignal", comm());
    return calls_.finish(c, o);
  }

  std::shared_ptr<Work> waitSignal(int src, const CollOptions& o) override {
    WinCalls::Call c = calls_.begin(o);
    nccl::ncclWaitSignalDesc_t d{1, src, 0, 0};
    ncclCheck(L_.waitSignal(1, &d, comm(), c.stream), "ncclWaitSignal", comm());
    return calls_.finish(c, o);
  }

  void* peerPtr(int rank) const override { return rank == rank_ ? mine_ : nullptr; }

 private:
  nccl::ncclComm_t comm() const {
    std::lock_guard<std::mutex> g(sh_->mu);
    return sh_->comm;
  }

  std::shared_ptr<CudaShared> sh_;
  const NcclLib& L_;
  WinCalls calls_;
  int rank_;
  nccl::ncclWindow_t win_ = nullptr;
  void* mine_ = nullptr;
};

}  // namespace

std::unique_ptr<WinImpl> makeNcclWindow(CudaBackend& b, const std::string& whyNotIpc) {
  const std::shared_ptr<CudaShared>& sh = b.shared();
  if (!sh->comm)
    CCLX_THROW(cclxUnsupported,
               "new_window: rank %d of comm '%s' has neither CUDA IPC to its peers (%s) nor an "
               "NCCL comm (%s)", sh->rank, sh->name.c_str(), whyNotIpc.c_str(),
               b.ncclRefusal().empty() ? "NCCL was torn down" : b.ncclRefusal().c_str());
  const NcclLib& L = ncclLib();
  if (!L.commWindowRegister || !L.commWindowDeregister || !L.putSignal || !L.signal ||
      !L.waitSignal)
    CCLX_THROW(cclxUnsupported,
               "new_window: the ranks of comm '%s' cannot use CUDA IPC (%s), and the NCCL loaded "
               "(%d.%d.%d, %s) has no one-sided API: ncclPutSignal, ncclSignal and "
               "ncclWaitSignal come with NCCL 2.29 (set CCLX_NCCL_PATH to a newer libnccl)",
               sh->name.c_str(), whyNotIpc.c_str(), L.version / 10000, (L.version / 100) % 100,
               L.version % 100, L.path.c_str());
  return std::make_unique<NcclWindow>(b);
}

}  // namespace cclx
