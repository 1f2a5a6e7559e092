// Pieces of Comm shared between comm.cc (life cycle) and comm_colls.cc (collectives), and the
// state of a Window (window.cc, device_window.cc).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <cclx/device_window.h>

#include "core/comm/backend.h"
#include "core/window/window.h"

namespace cclx {

/// A non-empty environment variable, else nullptr (launch_env.cc).
const char* envOrNull(const char* name);
/// `v` (the value of `name`) as an integer in [lo, hi]; else cclxInvalidArgument naming both.
int envInt(const char* name, const char* v, long lo, long hi);

/// The comm's effective timeout: CCLX_TIMEOUT_MS when set, else opts.timeout when non-zero, else
/// CCLX_TIMEOUT / TORCHCOMM_TIMEOUT_SECONDS (0: kInfiniteTimeout), else 600 s.
std::chrono::milliseconds resolveCommTimeout(const Options& opts);

// creationTimeout(opts): the public header.

/// Builds a comm whose keys live under `prefix` in `rootStore` (collective over all ranks).
std::shared_ptr<Comm> createComm(DeviceSpec device, const Options& opts,
                                 std::shared_ptr<Store> rootStore, const std::string& prefix,
                                 int rank, int size);

/// Runs the rendezvous of a new comm whose keys live in `commStore` (the comm's namespace;
/// rendezvous.cc). opts.timeout must already be resolved (config override applied).
BootstrapInfo bootstrap(DeviceSpec device, const Options& opts, std::shared_ptr<Store> commStore,
                        int rank, int size);

/// Throws cclxInvalidArgument for a bad rank/size/name/timeout/backend (opts resolved).
void checkCreateArgs(DeviceSpec device, const Options& opts, int rank, int size);

/// Throws cclxInvalidUsage when the comm was finalized or aborted.
void requireUsable(const CommState& st, const char* what);

/// Drops the comm's buffer registrations (comm_memory.cc); `healthy`: hands each back to the
/// transport first (finalize), else the transport's teardown releases them (abort).
void releaseRegistrations(CommState& st, bool healthy);

// ---- collectives (comm_colls.cc, comm_grouped.cc)

/// Arguments of a call with the comm's timeout and hints merged in (throws when unusable).
CollArgs baseArgs(CommState& st, CollType t, const void* send, void* recv, size_t count,
                  DataType dtype, const CollOptions& o);
/// Validates, runs check mode when set, and hands the call to the backend.
std::shared_ptr<Work> dispatch(CommState& st, const CollArgs& a);
/// `count` elements of `dtype`, times `size`, must fit in size_t bytes.
void checkCount(size_t count, DataType dtype, int size);
/// A null buffer is an error unless count is 0.
void checkBuf(const void* p, size_t count, const char* what);
std::string joinCounts(const std::vector<size_t>& v);
/// Argument rules of the grouped calls (comm_grouped.cc); nothing has run when they throw.
void validateSendRecv(const CollArgs& a, int rank, int size);
void validateReduceScatterV(const CollArgs& a, int rank, int size);

// ---- Comm::dump()'s bookkeeping (comm_dump.cc)

/// Operation #seq of the comm (its opSeq) was dispatched (before the backend runs it).
void trackIssued(CommState& st, const char* label, uint64_t seq);
/// The backend returned `w` for it; `algo` is the algorithm select() chose (nullptr: none).
void trackReturned(CommState& st, const char* label, uint64_t seq, std::shared_ptr<Work> w,
                   const char* algo);
/// The dispatch threw (the operation did not run, or failed inside the call).
void trackThrew(CommState& st);

// ---- Windows' state (window.cc; device windows: device_window.cc)

/// A device window of a registered window (core/window/device_window.cc): its resource area (in
/// a window of its own), the handle as built and where it was placed.
struct DevWinState {
  std::shared_ptr<Window> res;  // the resource areas' window (registered)
  void* mem = nullptr;          // this rank's resource area (devResAlloc)
  void* placed = nullptr;       // the handle where kernels read it (devHandlePlace)
  DeviceWindowHandle handle{};  // as built
  int signals = 0, counters = 0, barriers = 0;
};

struct Window::State {
  std::shared_ptr<Comm> comm;
  CommState* cs = nullptr;
  int id = 0;                     // the window's number on its comm (same on every rank)
  std::unique_ptr<WinImpl> impl;
  bool registered = false;
  void* ptr = nullptr;
  size_t count = 0;
  DataType dtype = DataType::f32;
  int gen = 0;                    // registrations so far: their keys in the store
  std::unique_ptr<DevWinState> dev;  // the device window of this registration, if any
  int devTries = 0;                  // attempts to make one (their keys in the store)

  /// The ranks' records under "win/<id>/<prefix><tag>".
  WinExchange exchange(const std::string& prefix) const;
};

/// Runs a transport call; a failure that ends the comm is reported like a collective's.
void winGuardFailed(CommState& cs, const Error& e, const char* op);
template <class F>
auto winGuarded(CommState& cs, const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    winGuardFailed(cs, e, op);
    throw;
  }
}
/// cclxInvalidUsage unless a buffer is registered.
void winRequireRegistered(const Window::State& w, const char* op);
/// "ranks 0, 2: <record>; rank 1: <record>" for records that differ.
std::string winDisagreement(const std::vector<std::string>& recs);
/// Releases the device window of `w` (deregistration: collective when `collective`, else this
/// rank's mappings only, its memory left to the process).
void devWinRelease(Window::State& w, bool collective);

}  // namespace cclx
