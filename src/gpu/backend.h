// The GPU backend: one object per communicator that owns the device setup, the peer memory, the
// device algorithms (DDA, FP8) and the NCCL comm that carries everything else, and that runs a
// call on the stream semantics of docs/design/gpu-backend.md. Two front ends build it: the
// cclx Comm (gpu/setup.cc: rendezvous through the store, NCCL created and owned here) and the
// NCCL drop-in (src/nccl_dropin: the application's NCCL comm, borrowed).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/comm/backend.h"
#include "core/select/select.h"
#include "gpu/algo.h"
#include "gpu/nccl/loader.h"
#include "gpu/peer_mem.h"
#include "gpu/registry/registry.h"
#include "gpu/resources.h"
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
  mutable std::mutex ctlMu;              // ctl[] and requestAbort's copies (teardown clears ctl)
  cudaStream_t abortStream = nullptr;    // requestAbort's copies (never waits on other work)
  int64_t* a2avHost = nullptr;           // pinned: all_to_all_v_device's gathered split sizes
                                         // (NCCL path), allocated at its first use
  uint32_t* abortValue = nullptr;        // pinned: the abort word, missing mask and timeout (ms)
                                         // requestAbort writes ([0, 3)); from kWaitRead on, the
                                         // peers' kCtlWaitingFor words waitChainOf reads
  static constexpr int kWaitRead = 4;
  std::atomic<bool> abortRequested{false};
  // Set when the comm is released after a failure or an abort: kernels may still read the error
  // words and the abort value, so the destructor leaves the pinned memory (and streams) alone.
  std::atomic<bool> leak{false};

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
  /// The note that follows a timeout naming `missing` to the end of its chain of waits
  /// (core/failure/wait_chain.h): every rank's kCtlWaitingFor word (peer memory, read on
  /// abortStream), the ranks in `missing` given up to 200 ms to publish theirs. The answer for a
  /// mask is kept: deviceError is asked again and again about one sticky failure.
  std::string waitChainOf(uint32_t missing) const;
  mutable std::mutex chainMu;
  mutable uint32_t chainMask = 0;
  mutable std::string chainNote;
  /// Turns a failure the kernels reported into the comm's failure (and throws it); no-op when none.
  void checkDeviceError();
  /// Stops every peer kernel of this comm here and on the peers (docs/design/failure.md):
  /// the host request word, which spinning kernels poll, and the abort word on every rank, which
  /// kernels read at entry. Never blocks; idempotent. `reason` (kAbort*) and `missing` (rank
  /// mask) go into the abort word as a kernel's own timeout would put them (a host-side timeout
  /// that names the ranks it waited for).
  /// A plain host abort (kAbortHost) after the kernels reported a failure forwards that
  /// failure's word instead, so that no rank reads "aborted by rank N" where rank N only passed
  /// on why (abortWordOf).
  void requestAbort(uint32_t reason = kAbortHost, uint32_t missing = 0, uint32_t timeoutMs = 0);
  /// An abort word (kAbort* << 16 | origin rank + 1) with its missing mask and timeout (ms).
  struct AbortWord {
    uint32_t word = 0, missing = 0, timeoutMs = 0;
  };
  AbortWord abortWordOf() const;
  void raiseAbortWord(const AbortWord& w);
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
  bool dropin = false;     // made by the NCCL drop-in (its settings must match too)
};

class CudaBackend final : public Backend {
 public:
  /// Collective: device, peer memory (through `ex`) and algorithms, as a fixed sequence of
  /// exchanges that every rank runs to the end (core/failure/setup_sequence.h, gpu/peer_mem.h). Throws
  /// on every rank alike when setup failed on any rank (cclxInvalidUsage for settings that differ
  /// between ranks); whatever was allocated is released (or, where a peer may use it, kept).
  /// NCCL comes next, from attachNccl(), unless ncclRefusal() says why it must not be created.
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
  /// Runs a call (CollArgs::peersOnly: the NCCL drop-in's calls, which NCCL takes where this
  /// returns nullptr).
  std::shared_ptr<Work> run(const CollArgs& a, Algo& ran) override;
  std::string selectAllReduce(const CollArgs& a) override;
  void finalize() override;
  void abort() override;
  cclxResult_t asyncError() override;
  std::pair<cclxResult_t, std::string> poll() override;

  /// The algorithm of a call (core/select/select.h with this comm's facts; tests ask it).
  Algo select(const CollArgs& a) const;
  /// Bytes of peer staging this rank holds.
  size_t stagingBytesHeld() const { return pm_.allocatedBytes(); }
  /// How peer memory is shared (gpu/peer_mem.h): 'V' (file descriptors), 'H' (CUDA IPC), 0 (off).
  char peerShare() const { return pm_.usable ? pm_.share : 0; }
  /// The message of the failure that made the comm unusable ("" while healthy).
  std::string failureMessage() const;
  /// Stops this comm's peer kernels here and on every peer (CudaShared::requestAbort). Never
  /// blocks.
  void requestAbort() { sh_->requestAbort(); }
  /// Release after an abort (the NCCL drop-in's ncclCommAbort / ncclCommRevoke): marks the comm
  /// aborted, stops its kernels and forgets every device resource without freeing or waiting for
  /// anything (kernels of this comm, or of NCCL, may still be running); the bytes left allocated
  /// are counted in one log line. The destructor does nothing afterwards.
  void abandon();

  /// Buffer registration (gpu/memory.cc): ncclCommRegister where the comm has an NCCL
  /// communicator and the library has it, else checked and kept here only (nullptr).
  void* registerBuffer(void* ptr, size_t bytes) override;
  void deregisterBuffer(void* handle) override;

  // One-sided windows (gpu/window/): CUDA IPC between the ranks of one host, else NCCL's
  // one-sided API. What a window of this comm uses:
  std::unique_ptr<WinImpl> newWindow(const WinExchange& ex) override;
  DeviceCtx& deviceCtx() { return ctx_; }
  const std::shared_ptr<CudaShared>& shared() const { return sh_; }
  // Expert-parallel buffers (gpu/moe/engine.cc): why the MoE kernels cannot run here ("" when
  // they can), their engine, and one launch of a peer kernel outside run(), ordered like run()'s
  // (the teardown waits for it): f(s) enqueues exactly one kernel on s.
  std::string moeRefusal(const moe::Layout& lay) const override;
  std::unique_ptr<MoeEngine> newMoe(const moe::Layout& lay, const MoeConfig& cfg) override;
  void launchPeerKernel(cudaStream_t s, const std::function<void(cudaStream_t)>& f);
  /// Collective: the lowest window signal slot free on every rank (-1: none).
  int takeWindowSlot(const WinExchange& ex);
  void returnWindowSlot(int slot);

 private:
  void setupDevice(const GpuSetup& setup);
  void setupPeers(const GpuSetup& setup, SetupSequence& seq);
  void setupAlgorithms();
  void growForPointToPoint(std::chrono::milliseconds timeout);
  void raiseGrowAbort(const GrowAbort& ga);
  Caps caps(const CollArgs& a) const;
  /// True when `algo` needs no staging that is not allocated yet (the drop-in never grows staging
  /// inside graph capture: such a call goes to NCCL).
  bool stagingReady(const CollArgs& a, Algo algo) const;
  DeviceAlgo* algoFor(const CollArgs& a, Algo algo) const;
  void checkPointer(const void* p, const char* what) const;
  void checkPointers(const CollArgs& a) const;
  void checkUsable(const CollArgs& a) const;
  void requireNccl(const CollArgs& a) const;
  void enqueue(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing);
  void enqueueAllToAllVDeviceNccl(const CollArgs& a, cudaStream_t s);
  bool runs(const DeviceAlgo& alg, const CollArgs& a) const;
  /// Grows what `algo` needs for `a`; after a failed growth chooses again for `a` (chooseAgain)
  /// or returns Base for the caller to choose (a lowered call).
  Algo growStaging(const CollArgs& a, Algo algo, bool capturing, bool chooseAgain = true);
  /// AllReduceRmsNorm's unfused sequence: the allreduce (NCCL for Base, else what select() picks
  /// for it) into the output (or a stream-ordered temporary), then the local norm kernel.
  void enqueueRmsUnfused(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing);
  void orderPeerKernel(cudaStream_t s, bool capturing);
  void peerKernelDone(cudaStream_t s, bool capturing);
  void ncclOpsPoll();
  void reapNcclOpsLocked(cudaStream_t s);
  void finalizeLocked();
  bool waitOwnWork(std::chrono::steady_clock::time_point deadline);
  bool quiesce(std::chrono::milliseconds bound);
  void leakAll(const char* why);

  // NCCL operations in flight (eager only), for the watchdog: an operation's clock starts when
  // its start event has completed, i.e. when it started on the device.
  struct NcclOp {
    CollType type;
    cudaEvent_t start;
    EventRef end;
    std::chrono::steady_clock::time_point started{};
    std::chrono::milliseconds timeout;
    cudaStream_t stream;  // where both events were recorded (they complete in stream order)
  };
  std::mutex opsMu_;
  std::vector<NcclOp> ncclOps_;
  uint32_t opsPushed_ = 0;  // under opsMu_: paces reapNcclOpsLocked
  static constexpr uint32_t kReapEvery = 32;  // watched operations between two reaps
  static constexpr size_t kReapLag = 8;       // the probe: this many before the newest

  std::shared_ptr<CudaShared> sh_ = std::make_shared<CudaShared>();
  PeerMem pm_;
  DeviceCtx ctx_;
  Config cfg_;
  bool plainNccl_ = false;
  std::string ncclRefusal_;
  gpures::Stream internal_;
  gpures::Stream growStream_;  // staging growth: host copies of the growth records
  gpures::Event forkEv_;
  gpures::Event orderEv_;  // recorded after the last eager peer-memory kernel
  cudaStream_t orderStream_ = nullptr;
  bool orderValid_ = false;
  // CUDA-graph capture: recorded after the last captured peer kernel, in capture captureId_ on
  // captureStream_; a peer kernel captured on another stream of the same capture waits for it.
  gpures::Event captureEv_;
  unsigned long long captureId_ = 0;
  cudaStream_t captureStream_ = nullptr;
  bool captureValid_ = false;
  gpures::DeviceMem counters_;  // ctx_.counters
  gpures::DeviceMem scratch_;   // 1-element NCCL barrier buffer
  std::unique_ptr<AlgoSet<DeviceAlgo>> algos_;  // one object per catalogue line (registry.h)
  DeviceAlgo* barrier_ = nullptr;     // algos_'s peer barrier (teardown's quiescence)
  std::mutex runMu_;
  bool finalized_ = false;
  std::atomic<bool> abandoned_{false};  // abandon() was called: teardown leaks instead of freeing
  std::mutex winMu_;
  std::vector<char> winSlotUsed_;  // window signal slots in use on this rank
};

}  // namespace cclx
