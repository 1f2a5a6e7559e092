// The internal contract between Comm (validation, check mode, dispatch) and the backends
// (host shared memory, CUDA/NCCL). A backend receives arguments that Comm already validated.
#pragma once

#include <cclx/cclx.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/collectives.h"
#include "core/select/algorithms.h"
#include "core/settings/config.h"
#include "core/window/window.h"

namespace cclx {

class MoeEngine;
struct MoeConfig;
namespace moe {
struct Layout;
}

/// The allreduce of AllReduceRmsNorm's unfused sequence, into `recv`: a plain SUM allreduce of x
/// with a's options, never FP8 (both backends run it before their row epilogue).
CollArgs rmsUnfusedAllReduce(const CollArgs& a, void* recv);

struct CollArgs {
  CollType type = CollType::Barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // elements: per rank for AllGather/ReduceScatter/AllToAll; total otherwise
  DataType dtype = DataType::f32;
  ReduceOp op{};
  int root = -1;  // Reduce/Broadcast root; Send/Recv peer
  std::vector<void*> recvList{};        // AllGather list variant (size() entries)
  std::vector<const void*> sendList{};  // ReduceScatter list variant (size() entries)
  std::vector<size_t> sendCounts{};     // AllToAllV, elements per destination
  std::vector<size_t> recvCounts{};     // AllToAllV, elements per source; ReduceScatterV, per rank
  std::vector<P2PSend> sends{};         // SendRecv (count = total elements of sends and recvs)
  std::vector<P2PRecv> recvs{};         // SendRecv
  const char* what = nullptr;         // SendRecv: the collective lowered onto it ("Scatter", ...)
  size_t outCount = 0;                // ReduceScatterV: elements of this rank's output
  CollOptions opts{};                   // async, stream, timeout (resolved: never 0), hints
  RmsNormArgs rms{};                    // AllReduceRmsNorm (send = rms.x, recv = rms.out,
                                      // count = tokens * hidden)
  struct DeviceRows {                 // AllToAllVDevice (count = 0; dtype = the rows' elements)
    const int64_t* send = nullptr;    // size() split sizes in rows (device memory on CUDA comms)
    const int64_t* recv = nullptr;    // size() split sizes in rows
    size_t rowElems = 0;              // elements per row
    size_t sendCap = 0;               // rows that send holds
    size_t recvCap = 0;               // rows that recv holds
  } rows{};
  const int64_t* seed = nullptr;      // ReduceScatterQuantized: one int64 (where the data is)
  bool peersOnly = false;             // the NCCL drop-in's call: run only on a peer algorithm
                                      // (and, while the stream captures, one whose staging is
                                      // allocated); else Backend::run enqueues nothing and
                                      // returns no Work, and the drop-in hands it to NCCL
  size_t bytes() const { return count * dtypeSize(dtype); }
  bool inPlace() const { return send == recv; }
};

/// What rendezvous established; handed to a backend at construction.
struct BootstrapInfo {
  int rank = 0;
  int size = 1;
  int localRank = 0;            // index of this rank among the ranks on its host
  int localSize = 1;
  std::vector<int> localRanks;  // global ranks on this host, ascending
  std::vector<int> hostOf;      // hostOf[r] = host index of rank r (0 = rank 0's host)
  int numHosts = 1;
  std::shared_ptr<Store> store; // already prefixed with this comm's namespace
  std::string jobId;            // unique per comm instance (shm names, etc.)
  Options opts;
  Config cfg;
  DeviceSpec device;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  /// Runs or enqueues one collective; returns its Work and sets `ran` to the algorithm that ran
  /// it (the one select() returned, after any choice made again on a failed staging growth).
  virtual std::shared_ptr<Work> run(const CollArgs& args, Algo& ran) = 0;
  /// Name of the algorithm run() would use for an AllReduce with these args.
  virtual std::string selectAllReduce(const CollArgs& args) = 0;
  virtual void finalize() = 0;
  virtual void abort() = 0;
  virtual cclxResult_t asyncError() { return cclxSuccess; }
  /// The watchdog's check (core/failure/watchdog.h, every ~100 ms, from its own thread, concurrently
  /// with calls): a failure found since the last poll, turned into the backend's failed state
  /// (later calls throw it), as (code, message); cclxSuccess when healthy. Never throws or blocks
  /// for long.
  virtual std::pair<cclxResult_t, std::string> poll() { return {cclxSuccess, ""}; }
  /// Local: registers [ptr, ptr + bytes) (non-null, bytes > 0: checked by Comm) with the
  /// transport so later operations on it can go zero-copy; throws on memory this comm cannot
  /// use. Returns the transport's handle for deregisterBuffer (nullptr: nothing to release).
  /// Default: nothing to register.
  virtual void* registerBuffer(void* ptr, size_t bytes);
  /// Releases what registerBuffer returned (never called with nullptr).
  virtual void deregisterBuffer(void* handle);
  /// Collective: a one-sided window's transport (core/window/window.h). `ex` trades records between the
  /// ranks under the window's keys. Default: cclxUnsupported.
  virtual std::unique_ptr<WinImpl> newWindow(const WinExchange& ex);
  /// Why this backend runs no engine for an expert-parallel buffer of layout `lay`
  /// (core/moe/engine.h); "" when it does. Default: "the <name> backend has no MoE engine".
  virtual std::string moeRefusal(const moe::Layout& lay) const;
  /// Local: the engine of a MoeBuffer (its memory allocated and zeroed; `cfg`'s launch shape
  /// applied); only after moeRefusal() returned "". Default: cclxUnsupported.
  virtual std::unique_ptr<MoeEngine> newMoe(const moe::Layout& lay, const MoeConfig& cfg);
};

/// A Work that is already complete (host collectives finish before returning).
std::shared_ptr<Work> completedWork();

std::unique_ptr<Backend> makeHostBackend(const BootstrapInfo& info);
/// Returns nullptr-free backend or throws cclxUnsupported when built without CUDA / no GPU.
std::unique_ptr<Backend> makeCudaBackend(const BootstrapInfo& info);

/// Comm::dump()'s bookkeeping (comm_dump.cc): what dispatch() issued, which of it is known to
/// have completed, the comm's failure and the algorithm each collective last ran. Guarded by mu.
struct OpTrack {
  struct Pending {
    uint64_t seq;
    std::string label;
    std::shared_ptr<Work> work;
  };
  std::mutex mu;
  uint64_t issued = 0, completed = 0, failed = 0;
  std::deque<Pending> pending;  // issued, not yet seen complete (oldest first)
  size_t sweepAt = 0;           // pending size at which every entry is polled (comm_dump.cc)
  std::string lastOp, lastCompleted;
  std::map<std::string, std::string> algo;  // collective -> algorithm of its last call
  cclxResult_t failCode = cclxSuccess;      // the first failure that broke the comm
  std::string failMsg, failOp;
};

struct CommState {
  BootstrapInfo info;
  std::unique_ptr<Backend> backend;
  std::shared_ptr<Store> rootStore;  // un-prefixed store (for split)
  uint64_t checkSeq = 0;             // check-mode sequence number
  int splitSeq = 0;
  int windowSeq = 0;                 // windows created so far (their store namespace)
  bool finalized = false;
  bool aborted = false;
  bool abortOnError = true;          // Options::abortOnError resolved (core/failure/watchdog.h)
  std::atomic<uint64_t> opSeq{0};    // collectives dispatched so far
  std::atomic<int> lastOp{-1};       // CollType of the last one (failure messages)
  std::atomic<bool> failureHandled{false};  // the watchdog reported this comm's failure
  OpTrack track;                                 // Comm::dump()
  std::mutex regMu;                              // registered (Comm::registerMemory)
  std::map<uintptr_t, std::pair<size_t, void*>> registered;  // start -> (bytes, handle)
  std::mutex hookMu;
  std::map<int, std::function<void(const std::string&)>> abortHooks;
  int nextHook = 0;
  bool hooksRan = false;
};

/// Internal access to a Comm's state (the watchdog, the C API).
struct CommAccess {
  static CommState& state(Comm& c) { return *c.st_; }
};

}  // namespace cclx
