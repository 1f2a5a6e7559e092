// The drop-in's side table: the application holds the real NCCL comm handle, and cclx keeps its
// own state (a GPU backend with peer memory and the DDA / FP8 algorithms) keyed by it. Every call
// the drop-in does not intercept therefore behaves exactly as NCCL's.
//
// Threads: collectives, the application's watchdog (ncclCommGetAsyncError) and abort / destroy
// may run concurrently on one comm. The state and the backend are read as one snapshot under the
// comm's lock; a snapshot holds the backend alive, so a call that took one can finish its enqueue
// while another thread aborts (the backend then refuses further work). Setup runs under a lock of
// its own and publishes its result under the state lock, unless the comm was dropped meanwhile.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "gpu/backend.h"
#include "nccl_dropin/abi.h"
#include "nccl_dropin/exchange.h"

namespace cclx {
namespace dropin {

struct DropinComm {
  enum class State {
    Pending,  // set up at the first eligible call (nonblocking comm, or created inside a group)
    Ready,    // backend usable: intercepted collectives may run on cclx's algorithms
    Off,      // forward everything (peer memory off, setup failed, revoked)
  };
  struct Snapshot {
    State state = State::Pending;
    std::shared_ptr<CudaBackend> backend;  // non-null when Ready
    std::chrono::milliseconds timeout{0};
  };

  ncclComm_t comm = nullptr;
  std::atomic<bool> aborting{false};  // an abort or revoke began: setup waits stop

  /// The state and backend, read together.
  Snapshot snapshot() const;

  mutable std::mutex mu;  // guards everything below
  State state = State::Pending;
  std::shared_ptr<CudaBackend> backend;
  std::string whyOff;
  bool dropped = false;  // removed from the table (finalize, destroy, abort, revoke)
  int rank = 0, size = 1, device = -1;
  std::chrono::milliseconds timeout{kInfiniteTimeout};
  std::unique_ptr<NcclExchange> ex;  // made at creation, used (and released) by the setup

  std::mutex setupMu;  // one setup at a time
};

/// The state of `comm`, or null when the drop-in does not know it (created before the library
/// was loaded, by ncclCommInitAll, or already destroyed).
std::shared_ptr<DropinComm> findComm(ncclComm_t comm);

/// Registers a comm the application just created. `ready`: the creating call completed
/// (blocking comm, outside a group): set it up now, collectively; otherwise at the first
/// eligible call. Returns ncclSuccess, or an error for the creating call to return: the setup
/// buffers could not be allocated, or the ranks' CCLX_* settings differ (the comm was then
/// aborted; every rank of a comm reports the same).
ncclResult_t addComm(ncclComm_t comm, bool ready);

/// Sets a Pending comm up if the call on `stream` is eligible (outside any group and stream
/// capture, comm no longer in progress). Returns the snapshot afterwards; `r` holds an error for
/// the calling collective to return (differing settings), else ncclSuccess.
DropinComm::Snapshot prepare(DropinComm& dc, ncclStream_t stream, int groupDepth, ncclResult_t& r);

/// Stops cclx's kernels of `comm` here and on its peers, without waiting (before NCCL's abort).
void stopComm(ncclComm_t comm);

/// Forgets `comm`. graceful (finalize, destroy): waits for this comm's own work, a last peer
/// barrier, then frees (docs/design/failure.md "Setup, teardown and abort");
/// otherwise (abort, revoke) releases it without waiting and without freeing what a kernel may
/// still use.
void dropComm(ncclComm_t comm, bool graceful);

/// The comm's timeout as NCCL has it: none (kInfiniteTimeout), unless CCLX_TIMEOUT_MS,
/// CCLX_TIMEOUT or TORCHCOMM_TIMEOUT_SECONDS is set (0: none).
std::chrono::milliseconds dropinTimeout(const Config& cfg);

}  // namespace dropin
}  // namespace cclx
