// The GPU backend: one object per communicator that owns the device setup, the peer memory, the
// device algorithms (DDA, FP8) and the NCCL comm that carries everything else, and that runs a
// call on the stream semantics of docs/DESIGN.md ("GPU backend"). Two front ends build it: the
// cclx Comm (gpu/setup.cc: rendezvous through the store, NCCL created and owned here) and the
// NCCL drop-in (src/nccl_dropin: the application's NCCL comm, borrowed).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/backend.h"
#include "core/select.h"
#include "gpu/algo.h"
#include "gpu/nccl/loader.h"
#include "gpu/peer_mem.h"
#include "gpu/runtime.h"

namespace cclx {

/// A pooled event shared by a Work and the watchdog's tracking: back to the pool when both let go.
using EventRef = std::shared_ptr<std::remove_pointer_t<cudaEvent_t>>;

/// State that outlives the backend while Works refer to it.
struct CudaShared {
  int device = -1;
  int rank = 0;
  int size = 1;
  std::string name;                      // the comm's name (messages)
  std::chrono::milliseconds timeout{0};  // the comm's timeout (messages)
  nccl::ncclComm_t comm = nullptr;
  bool ownsComm = true;                  // false: the application's comm (never aborted here)
  volatile uint32_t* errHost = nullptr;  // host-mapped error words (gpu/algo.h)
  uint32_t* errDev = nullptr;
  uint32_t* ctl[kMaxRanks] = {};         // every rank's control words (peer memory; null if off)
  cudaStream_t abortStream = nullptr;    // requestAbort's copies (never waits on other work)
  uint32_t* abortValue = nullptr;        // pinned: the abort word requestAbort writes
  std::atomic<bool> abortRequested{false};

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
  /// What the error words report (gpu/algo.h): cclxSuccess and "" while they report nothing.
  std::pair<cclxResult_t, std::string> deviceError() const;
  /// Turns a failure the kernels reported into the comm's failure (and throws it); no-op when none.
  void checkDeviceError();
  /// Stops every peer kernel of this comm here and on the peers (docs/DESIGN.md "Failure model"):
  /// the host request word, which spinning kernels poll, and the abort word on every rank, which
  /// kernels read at entry. Never blocks; idempotent.
  void requestAbort();
  /// NCCL abort (once, owned comms only) so that stuck NCCL kernels exit; the comm is unusable
  /// afterwards.
  void abortNccl();
  cudaEvent_t takeEvent();
  void returnEvent(cudaEvent_t e);
  /// takeEvent() as an EventRef that returns to `self`'s pool.
  static EventRef takeEventRef(const std::shared_ptr<CudaShared>& self);
};

/// Work of a CUDA collective: an event recorded after the operation. `captured`: recorded inside
/// a CUDA-graph capture (only wait(stream) is meaningful; the host cannot poll it).
std::shared_ptr<Work> makeCudaWork(std::shared_ptr<CudaShared> sh, EventRef ev, bool captured,
                                   std::chrono::milliseconds timeout);

/// Scoped cudaSetDevice (restores the previous device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev);
  ~DeviceGuard();

 private:
  int prev_ = -1;
};

/// What a GPU backend is made of, whoever makes it.
struct GpuSetup {
  int rank = 0;
  int size = 1;
  int device = -1;  // CUDA device; -1: localRank % device count
  int localRank = 0;
  Config cfg;
  std::chrono::milliseconds timeout{600000};
  std::string name = "nccl";  // the comm's name (messages)
  bool plainNccl = false;  // backend "nccl": the peer kernels only for what NCCL cannot do
};

class CudaBackend final : public Backend {
 public:
  /// Collective: device, peer memory (through `ex`) and algorithms. NCCL comes next, from
  /// attachNccl(), unless ncclRefusal() says why it must not be created.
  CudaBackend(const GpuSetup& setup, Exchange& ex);
  ~CudaBackend() override;

  /// Hands the NCCL comm that carries what the peer algorithms do not. owned: destroyed (or
  /// aborted) by finalize/abort; otherwise the application's, never destroyed here.
  void attachNccl(nccl::ncclComm_t comm, bool owned);
  /// Non-empty when no NCCL comm may exist: ranks share a GPU (NCCL refuses that).
  const std::string& ncclRefusal() const { return ncclRefusal_; }
  int device() const { return sh_->device; }
  bool peerUsable() const { return pm_.usable; }

  const char* name() const override { return plainNccl_ ? "nccl" : "cclx"; }
  std::shared_ptr<Work> run(const CollArgs& a) override;
  std::string selectAllReduce(const CollArgs& a) override;
  void finalize() override;
  void abort() override;
  cclxResult_t asyncError() override;
  std::pair<cclxResult_t, std::string> poll() override;

  /// The algorithm of a call (core/select.h with this comm's facts).
  Algo select(const CollArgs& a) const;
  /// True when `algo` runs on the peer kernels (not NCCL).
  static bool onPeers(Algo algo) { return algo != Algo::Base; }
  /// Enqueues a call already validated and selected on `s`, without a Work: the drop-in's path,
  /// which checks what NCCL checks (no pointer attributes). run() adds pointer checks, stream
  /// forking and the Work.
  void enqueueSelected(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing);
  /// The message of the failure that made the comm unusable ("" while healthy).
  std::string failureMessage() const;

  // One-sided windows (gpu/window/): CUDA IPC between the ranks of one host, else NCCL's
  // one-sided API. What a window of this comm uses:
  std::unique_ptr<WinImpl> newWindow(const WinExchange& ex) override;
  DeviceCtx& deviceCtx() { return ctx_; }
  const std::shared_ptr<CudaShared>& shared() const { return sh_; }
  /// Collective: the lowest window signal slot free on every rank (-1: none).
  int takeWindowSlot(const WinExchange& ex);
  void returnWindowSlot(int slot);

 private:
  void setupDevice(const GpuSetup& setup);
  void setupPeers(const GpuSetup& setup, Exchange& ex);
  void setupAlgorithms();
  Caps caps(const CollArgs& a) const;
  DeviceAlgo* algoFor(const CollArgs& a, Algo algo) const;
  void checkPointer(const void* p, const char* what) const;
  void checkPointers(const CollArgs& a) const;
  void checkUsable(const CollArgs& a) const;
  void requireNccl(const CollArgs& a) const;
  void enqueue(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing);
  void orderPeerKernel(cudaStream_t s, bool capturing);
  void peerKernelDone(cudaStream_t s, bool capturing);
  void ncclOpsPoll();

  // NCCL operations in flight (eager only), for the watchdog: an operation's clock starts when
  // its start event has completed, i.e. when it started on the device.
  struct NcclOp {
    CollType type;
    cudaEvent_t start;
    EventRef end;
    std::chrono::steady_clock::time_point started{};
    std::chrono::milliseconds timeout;
  };
  std::mutex opsMu_;
  std::vector<NcclOp> ncclOps_;

  std::shared_ptr<CudaShared> sh_ = std::make_shared<CudaShared>();
  PeerMem pm_;
  DeviceCtx ctx_;
  Config cfg_;
  bool plainNccl_ = false;
  std::string ncclRefusal_;
  cudaStream_t internal_ = nullptr;
  cudaEvent_t forkEv_ = nullptr;
  cudaEvent_t orderEv_ = nullptr;  // recorded after the last eager peer-memory kernel
  cudaStream_t orderStream_ = nullptr;
  bool orderValid_ = false;
  int* scratch_ = nullptr;  // 1-element NCCL barrier buffer
  std::unique_ptr<DeviceAlgo> flat_, lamport_, tree_, barrier_;
  std::unique_ptr<DeviceAlgo> fp8Ar_, fp8Os_, fp8Ag_, fp8Rs_, fp8A2a_;
  std::mutex runMu_;
  bool finalized_ = false;
  std::mutex winMu_;
  std::vector<char> winSlotUsed_;  // window signal slots in use on this rank
};

}  // namespace cclx
