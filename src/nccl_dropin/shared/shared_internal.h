// Private to the shared-GPU mode (shared.h): the state behind a handle, the store rendezvous, and
// the helpers the calls share.
#pragma once

#include <cclx/cclx.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl_dropin/abi.h"
#include "nccl_dropin/shared/shared.h"
#include "nccl_dropin/types.h"

namespace cclx {
namespace dropin {
namespace shared {

/// The state behind a shared handle.
struct SharedComm {
  ncclComm_t handle = nullptr;
  uint64_t id = 0;        // the same on every rank of the comm (group order, key namespaces)
  std::string name;       // the cclx Comm's name ("nccl-<id>")
  int rank = 0, size = 1;
  DeviceSpec device;
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<Store> store;  // this comm's namespace (split and shrink exchanges)

  std::mutex mu;  // guards everything below
  std::shared_ptr<Comm> comm;  // null once destroyed or aborted
  enum class State { Live, Finalized, Destroyed, Aborted } state = State::Live;
  int splitSeq = 0, shrinkSeq = 0;
  bool reported = false;  // asyncError logged the comm's failure once
  struct PreMul {
    double factor;
    ncclDataType_t type;
  };
  std::map<int, PreMul> premul;  // op handle -> factor and the data type it was made for
  int nextOp = 0x100;            // above NCCL's built-in ops (and a real NCCL's own handles)
  std::map<void*, void*> registered;  // handle -> buffer
  // The last eager call's Work per stream: finalize waits for them (calls complete in order).
  std::map<void*, std::shared_ptr<Work>> last;

  /// The Comm for a call named `call`: throws cclxInvalidUsage once finalized / destroyed /
  /// aborted.
  std::shared_ptr<Comm> use(const char* call);
};

/// Registers a new shared comm and returns its handle.
ncclComm_t addShared(std::shared_ptr<SharedComm> c);

/// Maps a cclx failure to NCCL's code and records "<call>: <message>" for ncclGetLastError.
ncclResult_t failed(const char* call, const Error& e);
ncclResult_t failed(const char* call, const std::exception& e);

// ---- rendezvous (store.cc) ----

/// What ncclGetUniqueId put into an id: where the store of the process that made it listens, its
/// token, and the id's nonce.
struct Stamp {
  uint32_t ipv4 = 0;  // network byte order
  uint16_t port = 0;
  uint64_t token = 0;
  uint64_t nonce = 0;
};
bool readStamp(const ncclUniqueId& id, Stamp& out);

/// The store of `s` (this process's server when it made the id, else a connection this process
/// keeps for every comm of that server, made within `timeout`) under the key prefix `prefix`.
/// The drop-in's server lives until the process exits.
std::shared_ptr<Store> storeOf(const Stamp& s, const std::string& prefix,
                               std::chrono::milliseconds timeout);

/// Collective over the comm's `nranks` ranks: true when two ranks have the same `gpu`, or a rank
/// passes `force`. Every rank gets the same answer; a rank that never arrives leaves the others
/// waiting (WARN lines every 10 s name it) until `timeout`.
bool decideShared(Store& s, int rank, int nranks, const std::string& gpu, bool force,
                  std::chrono::milliseconds timeout);

/// Creates the cclx Comm of a shared comm (collective over its ranks) and its handle.
ncclResult_t createShared(ncclComm_t* out, uint64_t id, std::shared_ptr<Store> store, int rank,
                          int size, const DeviceSpec& device, const char* call);

/// The timeout of shared comms: CCLX_TIMEOUT_MS, CCLX_TIMEOUT or TORCHCOMM_TIMEOUT_SECONDS when
/// set (0: none), else 600 s (torch's default process-group timeout): cclx's defaultTimeout().
std::chrono::milliseconds sharedTimeout();
/// The timeout of the decision before a comm exists, as NCCL's init: none unless one of those
/// settings is set.
std::chrono::milliseconds decisionTimeout();

/// A 64-bit mix (ids of split and shrunk comms from their parent's).
uint64_t mix64(uint64_t x);

}  // namespace shared
}  // namespace dropin
}  // namespace cclx
