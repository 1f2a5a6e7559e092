// The drop-in's side table: the application holds the real NCCL comm handle, and cclx keeps its
// own state (a GPU backend with peer memory and the DDA / FP8 algorithms) keyed by it. Every call
// the drop-in does not intercept therefore behaves exactly as NCCL's.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "gpu/backend.h"
#include "nccl_dropin/abi.h"

namespace cclx {
namespace dropin {

struct DropinComm {
  enum class State {
    Pending,  // set up at the first eligible call (nonblocking comm, or created inside a group)
    Ready,    // backend usable: intercepted collectives may run on cclx's algorithms
    Off,      // forward everything (peer memory off, setup failed, revoked)
  };
  ncclComm_t comm = nullptr;
  State state = State::Pending;
  int rank = 0, size = 1, device = -1;
  std::chrono::milliseconds timeout{600000};
  std::unique_ptr<CudaBackend> backend;  // non-null when Ready
  std::string whyOff;
};

/// The state of `comm`, or null when the drop-in does not know it (created before the library
/// was loaded, by ncclCommInitAll, or already destroyed).
std::shared_ptr<DropinComm> findComm(ncclComm_t comm);

/// Registers a comm the application just created. `ready`: the creating call completed
/// (blocking comm, outside a group): set it up now, collectively; otherwise at the first
/// eligible call. Never throws: a failed setup leaves the comm forwarding everything.
void addComm(ncclComm_t comm, bool ready);

/// Sets a Pending comm up if the call on `stream` is eligible (outside any group and stream
/// capture, comm no longer in progress). Returns the state afterwards.
DropinComm::State prepare(DropinComm& dc, ncclStream_t stream, int groupDepth);

/// Forgets `comm`. graceful: synchronize and free the device state (finalize, destroy);
/// otherwise mark it failed and release it without waiting (abort, revoke: never blocks).
void dropComm(ncclComm_t comm, bool graceful);

}  // namespace dropin
}  // namespace cclx
