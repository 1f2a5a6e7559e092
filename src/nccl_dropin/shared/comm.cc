// Shared comms (shared.h): the handle table, creation (from an id, by split, by shrink), the life
// cycle and the queries.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "core/comm/backend.h"
#include "core/settings/config.h"
#include "core/elements/dtype_math.h"
#include "base/error.h"
#include "base/log.h"
#include "core/failure/watchdog.h"
#include "nccl_dropin/errors.h"
#include "nccl_dropin/shared/shared_internal.h"
#include "store/bootstrap.h"

namespace cclx {
namespace dropin {
namespace shared {

namespace {

constexpr int kMaxSharedRanks = 8;  // peer memory's limit (gpu/peer_mem.h kMaxRanks)

std::mutex gTableMu;
std::atomic<int> gHandles{0};  // handles ever made: 0 = no lookup needed
std::unordered_map<ncclComm_t, std::shared_ptr<SharedComm>>& table() {
  static auto* t = new std::unordered_map<ncclComm_t, std::shared_ptr<SharedComm>>();
  return *t;
}
// Comms released by destroy / abort: kept (never finalized, never freed) until the process
// exits, because the peers may still be using the memory they share (docs/design/dropin.md).
std::vector<std::shared_ptr<Comm>>& retired() {
  static auto* v = new std::vector<std::shared_ptr<Comm>>();
  return *v;
}
void retire(std::shared_ptr<Comm> c) {
  if (!c) return;
  // Nothing runs on it any more: the watchdog stops polling it (also while the process exits).
  watchdogRemove(&CommAccess::state(*c));
  std::lock_guard<std::mutex> lk(gTableMu);
  retired().push_back(std::move(c));
}

// What a handle points at: never dereferenced by anyone, never freed.
struct HandleTag {
  uint64_t magic = 0x63636c7853484e44ull;
};

const char* stateName(SharedComm::State s) {
  switch (s) {
    case SharedComm::State::Live: return "live";
    case SharedComm::State::Finalized: return "finalized";
    case SharedComm::State::Destroyed: return "destroyed";
    case SharedComm::State::Aborted: return "aborted";
  }
  return "?";
}

// NCCL's convention: errors are returned, the process is never ended by the library, unless
// CCLX_ABORT_ON_ERROR / TORCHCOMM_ABORT_ON_ERROR ask for it.
bool abortOnError() {
  try {
    return config().abortOnErrorSet && config().abortOnError;
  } catch (const Error&) {
    return false;
  }
}

// The rank's scalar of a PreMulSum, as a double (exact for every type but 64-bit integers beyond
// 2^53, which no caller uses as a factor). Read by bytes: the scalar may be at any address.
template <typename T>
T scalarAs(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
bool scalarValue(const void* p, ncclDataType_t t, double& v) {
  switch (t) {
    case nccl::ncclInt8: v = scalarAs<int8_t>(p); return true;
    case nccl::ncclUint8: v = scalarAs<uint8_t>(p); return true;
    case nccl::ncclInt32: v = scalarAs<int32_t>(p); return true;
    case nccl::ncclUint32: v = scalarAs<uint32_t>(p); return true;
    case nccl::ncclInt64: v = double(scalarAs<int64_t>(p)); return true;
    case nccl::ncclUint64: v = double(scalarAs<uint64_t>(p)); return true;
    case nccl::ncclFloat16: v = math::f16ToF32(scalarAs<uint16_t>(p)); return true;
    case nccl::ncclBfloat16: v = math::bf16ToF32(scalarAs<uint16_t>(p)); return true;
    case nccl::ncclFloat32: v = scalarAs<float>(p); return true;
    case nccl::ncclFloat64: v = scalarAs<double>(p); return true;
    default: return false;
  }
}

}  // namespace

std::shared_ptr<Comm> SharedComm::use(const char* call) {
  std::lock_guard<std::mutex> lk(mu);
  if (state != State::Live || !comm)
    CCLX_THROW(cclxInvalidUsage, "comm %p (ranks sharing a GPU) was %s", static_cast<void*>(handle),
               stateName(state));
  return comm;
}

std::shared_ptr<SharedComm> find(ncclComm_t comm) {
  if (!comm || gHandles.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> lk(gTableMu);
  auto it = table().find(comm);
  return it == table().end() ? nullptr : it->second;
}

ncclComm_t addShared(std::shared_ptr<SharedComm> c) {
  auto h = reinterpret_cast<ncclComm_t>(new HandleTag());
  c->handle = h;
  std::lock_guard<std::mutex> lk(gTableMu);
  table()[h] = std::move(c);
  gHandles.fetch_add(1, std::memory_order_release);
  return h;
}

ncclResult_t failed(const char* call, const Error& e) {
  return fail(Error(e.code(), strFormat("%s: %s", call, e.what())));
}
ncclResult_t failed(const char* call, const std::exception& e) {
  return fail(nccl::ncclInternalError, strFormat("%s: %s", call, e.what()));
}

ncclResult_t createShared(ncclComm_t* out, uint64_t id, std::shared_ptr<Store> store, int rank,
                          int size, const DeviceSpec& device, const char* call) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    auto c = std::make_shared<SharedComm>();
    c->id = id;
    c->name = strFormat("nccl-%016llx", static_cast<unsigned long long>(id));
    c->rank = rank;
    c->size = size;
    c->device = device;
    c->timeout = sharedTimeout();
    c->store = store;
    Options o;
    o.name = c->name;  // unique per comm: its keys are "<name>/0/..." on every rank
    o.abortOnError = abortOnError();
    c->comm = Comm::create(device, o, prefixStore(store, "c/"), rank, size);
    *out = addShared(c);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CCLX_INFO("NCCL drop-in: %s: comm %p rank %d/%d on %s%s: ranks share a GPU: a cclx comm ('%s', "
              "timeout %lld ms, made in %.1f ms) runs every call, no NCCL comm underneath", call,
              static_cast<void*>(*out), rank, size, device.type == DeviceSpec::CPU ? "cpu" : "cuda:",
              device.type == DeviceSpec::CPU ? "" : std::to_string(device.index).c_str(),
              c->name.c_str(), (long long)c->timeout.count(), ms);
    return nccl::ncclSuccess;
  } catch (const Error& e) {
    return failed(call, e);
  } catch (const std::exception& e) {
    return failed(call, e);
  }
}

bool initRank(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
              const ncclConfig_t* config, const Local& local, const char* call,
              ncclResult_t& r) {
  (void)config;  // blocking or not: a shared comm is complete when the call returns (ncclSuccess)
  int mode = -1;
  try {
    mode = cclx::config().dropinShared;
  } catch (const Error& e) {
    r = failed(call, e);  // NCCL would never see a malformed CCLX_* setting either
    return true;
  }
  if (mode == 0) return false;
  Stamp s;
  if (!readStamp(id, s)) {
    if (mode != 1) return false;
    r = fail(nccl::ncclInvalidUsage,
             strFormat("%s: CCLX_DROPIN_SHARED=1, but the unique id was not made by this drop-in's "
                       "ncclGetUniqueId (it carries no rendezvous for a comm without NCCL)", call));
    return true;
  }
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) {
    if (mode != 1) return false;  // NCCL reports its own argument errors
    r = fail(nccl::ncclInvalidArgument,
             strFormat("%s: rank %d of %d ranks (comm %s)", call, rank, nranks, comm ? "set" : "NULL"));
    return true;
  }
  if (mode != 1 && (nranks < 2 || nranks > kMaxSharedRanks)) return false;  // never shared
  if (nranks > kMaxSharedRanks) {
    r = fail(nccl::ncclInvalidUsage,
             strFormat("%s: CCLX_DROPIN_SHARED=1 with %d ranks: a comm without NCCL takes at most "
                       "%d", call, nranks, kMaxSharedRanks));
    return true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const auto timeout = decisionTimeout();
    auto st = storeOf(s, strFormat("%016llx/", static_cast<unsigned long long>(s.nonce)), timeout);
    const bool shared = decideShared(*prefixStore(st, "d/"), rank, nranks, local.gpu, mode == 1,
                                     timeout);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!shared) {
      CCLX_INFO("NCCL drop-in: %s rank %d/%d: no two ranks share a GPU (decided in %.2f ms): NCCL "
                "makes the comm", call, rank, nranks, ms);
      return false;
    }
    r = createShared(comm, s.nonce, st, rank, nranks, local.device, call);
    return true;
  } catch (const Error& e) {
    r = failed(call, e);
    return true;
  } catch (const std::exception& e) {
    r = failed(call, e);
    return true;
  }
}

ncclResult_t split(SharedComm& parent, int color, int key, ncclComm_t* newcomm,
                   const ncclConfig_t* config) {
  (void)config;
  const char* call = "ncclCommSplit";
  if (!newcomm) return fail(nccl::ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = nullptr;
  if (color < -1) {  // NCCL_SPLIT_NOCOLOR is -1; other negative colors are invalid
    return fail(nccl::ncclInvalidArgument,
                strFormat("ncclCommSplit: color %d is negative (and not NCCL_SPLIT_NOCOLOR)", color));
  }
  try {
    parent.use(call);
    int seq = 0;
    {
      std::lock_guard<std::mutex> lk(parent.mu);
      seq = parent.splitSeq++;
    }
    const std::string tag = strFormat("split%d", seq);
    // Every rank of the parent: its color and key.
    const auto all = storeAllGather(*parent.store, tag + "/ck", strFormat("%d,%d", color, key),
                                    parent.rank, parent.size, parent.timeout,
                                    strFormat("ncclCommSplit of comm '%s'", parent.name.c_str()));
    if (color < 0) return nccl::ncclSuccess;  // no comm for this rank
    std::vector<std::pair<int, int>> members;  // (key, parent rank) of this color
    for (int r = 0; r < parent.size; ++r) {
      int c = 0, k = 0;
      if (std::sscanf(all[size_t(r)].c_str(), "%d,%d", &c, &k) != 2)
        CCLX_THROW(cclxRemoteError, "rank %d sent a malformed color", r);
      if (c == color) members.emplace_back(k, r);
    }
    std::sort(members.begin(), members.end());
    int newRank = -1;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].second == parent.rank) newRank = int(i);
    const uint64_t id = mix64(parent.id ^ mix64(uint64_t(seq) << 32 | uint32_t(color)));
    return createShared(newcomm, id, prefixStore(parent.store, strFormat("%s/%d/", tag.c_str(), color)),
                        newRank, int(members.size()), parent.device, call);
  } catch (const Error& e) {
    return failed(call, e);
  } catch (const std::exception& e) {
    return failed(call, e);
  }
}

ncclResult_t shrink(SharedComm& parent, const int* exclude, int nExclude, ncclComm_t* newcomm,
                    const ncclConfig_t* config, int flags) {
  (void)config;
  const char* call = "ncclCommShrink";
  if (!newcomm) return fail(nccl::ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  *newcomm = nullptr;
  if (nExclude < 0 || (nExclude > 0 && !exclude))
    return fail(nccl::ncclInvalidArgument, "ncclCommShrink: bad exclude list");
  std::vector<bool> out(size_t(parent.size), false);
  for (int i = 0; i < nExclude; ++i) {
    if (exclude[i] < 0 || exclude[i] >= parent.size)
      return fail(nccl::ncclInvalidArgument,
                  strFormat("ncclCommShrink: excluded rank %d is outside [0, %d)", exclude[i],
                            parent.size));
    out[size_t(exclude[i])] = true;
  }
  if (out[size_t(parent.rank)])
    return fail(nccl::ncclInvalidArgument,
                strFormat("ncclCommShrink: rank %d excludes itself", parent.rank));
  try {
    std::shared_ptr<Comm> old;
    int seq = 0;
    {
      std::lock_guard<std::mutex> lk(parent.mu);
      if (parent.state == SharedComm::State::Destroyed)
        CCLX_THROW(cclxInvalidUsage, "comm %p was destroyed", static_cast<void*>(parent.handle));
      seq = parent.shrinkSeq++;
      old = parent.comm;
    }
    // NCCL_SHRINK_ABORT (1): the parent's calls are stopped first (a peer has failed).
    if ((flags & 1) && old) old->abort();
    int newRank = 0, newSize = 0;
    for (int r = 0; r < parent.size; ++r) {
      if (out[size_t(r)]) continue;
      if (r == parent.rank) newRank = newSize;
      ++newSize;
    }
    const uint64_t id = mix64(parent.id ^ mix64(0x5348524bull << 32 | uint32_t(seq)));
    return createShared(newcomm, id, prefixStore(parent.store, strFormat("shrink%d/", seq)),
                        newRank, newSize, parent.device, call);
  } catch (const Error& e) {
    return failed(call, e);
  } catch (const std::exception& e) {
    return failed(call, e);
  }
}

ncclResult_t finalize(SharedComm& c) {
  std::map<void*, std::shared_ptr<Work>> last;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.state != SharedComm::State::Live)
      return fail(nccl::ncclInvalidUsage, strFormat("ncclCommFinalize: comm %p was %s",
                                                   static_cast<void*>(c.handle), stateName(c.state)));
    c.state = SharedComm::State::Finalized;
    last.swap(c.last);
  }
  // This rank's calls complete (in stream order, so the last one per stream suffices); a call
  // that failed or waits for a dead peer ends at the comm's timeout.
  for (auto& [stream, w] : last) {
    try {
      w->waitBlocking();
    } catch (const Error& e) {
      CCLX_INFO("NCCL drop-in: ncclCommFinalize of comm %p: %s", static_cast<void*>(c.handle),
                e.what());
    }
  }
  return nccl::ncclSuccess;
}

ncclResult_t destroy(SharedComm& c) {
  bool live = false;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.state == SharedComm::State::Destroyed || c.state == SharedComm::State::Aborted)
      return fail(nccl::ncclInvalidUsage, strFormat("ncclCommDestroy: comm %p was already %s",
                                                   static_cast<void*>(c.handle), stateName(c.state)));
    live = c.state == SharedComm::State::Live;
  }
  if (live) (void)finalize(c);
  std::shared_ptr<Comm> gone;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    c.state = SharedComm::State::Destroyed;
    gone = std::move(c.comm);
    c.premul.clear();
    c.registered.clear();
  }
  retire(std::move(gone));
  return nccl::ncclSuccess;
}

ncclResult_t abort(SharedComm& c) {
  std::shared_ptr<Comm> gone;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.state == SharedComm::State::Destroyed || c.state == SharedComm::State::Aborted)
      return nccl::ncclSuccess;
    c.state = SharedComm::State::Aborted;
    gone = std::move(c.comm);
    c.last.clear();
  }
  if (gone) {
    try {
      gone->abort();  // never blocks: the kernels stop here and on the peers
    } catch (const std::exception& e) {
      CCLX_WARN("NCCL drop-in: ncclCommAbort of comm %p: %s", static_cast<void*>(c.handle), e.what());
    }
  }
  retire(std::move(gone));
  return nccl::ncclSuccess;
}

ncclResult_t asyncError(SharedComm& c, ncclResult_t* err) {
  if (!err) return fail(nccl::ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  std::shared_ptr<Comm> comm;
  {
    std::lock_guard<std::mutex> lk(c.mu);
    comm = c.comm;
  }
  *err = nccl::ncclSuccess;
  if (!comm) return nccl::ncclSuccess;  // destroyed or aborted here: nothing more to report
  try {
    // The watchdog's check (core/backend.h: thread-safe, never blocks): a failure the kernels or
    // a call found, with its message.
    const auto f = CommAccess::state(*comm).backend->poll();
    if (f.first == cclxSuccess || f.first == cclxInProgress) return nccl::ncclSuccess;
    const std::string msg = strFormat("comm %p (ranks sharing a GPU): %s",
                                      static_cast<void*>(c.handle), f.second.c_str());
    bool first = false;
    {
      std::lock_guard<std::mutex> lk(c.mu);
      first = !c.reported;
      c.reported = true;
    }
    // A watchdog polls: the message is logged once, returned every time.
    *err = first ? fail(ncclCodeOf(f.first), msg) : note(ncclCodeOf(f.first), msg);
  } catch (const Error& e) {
    *err = failed("ncclCommGetAsyncError", e);
  } catch (const std::exception& e) {
    *err = failed("ncclCommGetAsyncError", e);
  }
  return nccl::ncclSuccess;
}

ncclResult_t count(SharedComm& c, int* n) {
  if (!n) return fail(nccl::ncclInvalidArgument, "ncclCommCount: count is NULL");
  *n = c.size;
  return nccl::ncclSuccess;
}
ncclResult_t userRank(SharedComm& c, int* rank) {
  if (!rank) return fail(nccl::ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = c.rank;
  return nccl::ncclSuccess;
}
ncclResult_t cuDevice(SharedComm& c, int* device) {
  if (!device) return fail(nccl::ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = c.device.type == DeviceSpec::CUDA ? c.device.index : -1;
  return nccl::ncclSuccess;
}

ncclResult_t registerBuffer(SharedComm& c, void* buff, size_t size, void** handle) {
  if (!handle || !buff || size == 0)
    return fail(nccl::ncclInvalidArgument,
                strFormat("ncclCommRegister: buffer %p, size %zu, handle %p", buff, size,
                          static_cast<void*>(handle)));
  try {
    c.use("ncclCommRegister");
  } catch (const Error& e) {
    return failed("ncclCommRegister", e);
  }
  auto* h = new char;  // a unique handle (one byte, freed at deregistration)
  std::lock_guard<std::mutex> lk(c.mu);
  c.registered[h] = buff;
  *handle = h;
  return nccl::ncclSuccess;
}

ncclResult_t deregisterBuffer(SharedComm& c, void* handle) {
  std::lock_guard<std::mutex> lk(c.mu);
  auto it = c.registered.find(handle);
  if (it == c.registered.end())
    return fail(nccl::ncclInvalidArgument,
                strFormat("ncclCommDeregister: handle %p was not registered on comm %p", handle,
                          static_cast<void*>(c.handle)));
  c.registered.erase(it);
  delete static_cast<char*>(handle);
  return nccl::ncclSuccess;
}

ncclResult_t redOpCreatePreMulSum(SharedComm& c, ncclRedOp_t* op, void* scalar, ncclDataType_t t,
                                  ncclScalarResidence_t residence) {
  const char* call = "ncclRedOpCreatePreMulSum";
  if (!op || !scalar) return fail(nccl::ncclInvalidArgument, strFormat("%s: op or scalar is NULL", call));
  if (residence != nccl::ncclScalarHostImmediate)
    return fail(nccl::ncclInvalidUsage,
                strFormat("%s: a scalar in device memory (ncclScalarDevice) is not supported on "
                          "comms whose ranks share a GPU; pass it by value (ncclScalarHostImmediate)",
                          call));
  double v = 0;
  if (!scalarValue(scalar, t, v))
    return fail(nccl::ncclInvalidArgument, strFormat("%s: data type %d has no PreMulSum", call, int(t)));
  if (!std::isfinite(v))
    return fail(nccl::ncclInvalidArgument, strFormat("%s: the factor %g is not finite", call, v));
  std::lock_guard<std::mutex> lk(c.mu);
  if (c.state != SharedComm::State::Live)
    return fail(nccl::ncclInvalidUsage, strFormat("%s: comm %p was %s", call,
                                                 static_cast<void*>(c.handle), stateName(c.state)));
  const int id = c.nextOp++;
  c.premul[id] = SharedComm::PreMul{v, t};
  *op = ncclRedOp_t(id);
  return nccl::ncclSuccess;
}

ncclResult_t redOpDestroy(SharedComm& c, ncclRedOp_t op) {
  std::lock_guard<std::mutex> lk(c.mu);
  if (c.premul.erase(int(op)) != 1)
    return fail(nccl::ncclInvalidArgument,
                strFormat("ncclRedOpDestroy: op %d was not created on comm %p", int(op),
                          static_cast<void*>(c.handle)));
  return nccl::ncclSuccess;
}

ncclResult_t unsupported(const char* call, ncclComm_t comm) {
  return fail(nccl::ncclInvalidUsage,
              strFormat("%s is not supported on comm %p: its ranks share a GPU, so it runs on a "
                        "cclx comm without an NCCL comm underneath", call, static_cast<void*>(comm)));
}

}  // namespace shared
}  // namespace dropin
}  // namespace cclx
