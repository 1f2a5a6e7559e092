// The NCCL functions the drop-in defines itself: the collectives that may run on cclx's algorithms
// (the same selection and kernels as cclx.new_comm), the group depth they depend on, and the life
// cycle that keeps the side table (comms.h) in step with NCCL's comms.
//
// A collective runs on cclx when: interception is on (CCLX_NCCL_INTERCEPT, CCLX_NCCL_FORWARD,
// cclxDropinSetIntercept), the calling thread is outside ncclGroupStart/End, the comm is known and
// set up, the dtype and op are built-in ones cclx implements, and core/select/select.h picks a peer
// algorithm for it (DDA allreduce, all-gather, reduce-scatter and all-to-all within the size
// tables; FP8 where CCLX_LOW_PRECISION_* asks). The first call that needs a staging region
// allocates it on every rank (collective, gpu/peer_mem.h); inside stream capture that never
// happens: such a call goes to NCCL. Everything else goes to the real NCCL unchanged.
#include <atomic>

#include "core/settings/config.h"
#include "base/log.h"
#include "nccl_dropin/comms.h"
#include "nccl_dropin/entry.h"
#include "nccl_dropin/errors.h"
#include "nccl_dropin/real.h"
#include "nccl_dropin/types.h"

namespace cclx {
namespace dropin {

namespace {

thread_local int tDepth = 0;         // ncclGroupStart nesting of this thread
std::atomic<int> gIntercept{-1};     // -1: not read yet; then 0 / 1

bool interceptOn() {
  int v = gIntercept.load(std::memory_order_relaxed);
  if (v < 0) {
    try {
      v = config().ncclIntercept ? 1 : 0;
    } catch (const Error&) {
      v = 0;  // a malformed setting fails comm creation (settingsError), never a collective
    }
    int expected = -1;
    if (!gIntercept.compare_exchange_strong(expected, v)) v = expected;
  }
  return v == 1;
}

// CCLX_NCCL_FORWARD, read once (all bits set: a malformed setting forwards everything).
unsigned forwardMask() {
  static const unsigned mask = [] {
    try {
      return config().ncclForward;
    } catch (const Error&) {
      return ~0u;
    }
  }();
  return mask;
}

bool intercepting(unsigned forwardBit) { return interceptOn() && (forwardMask() & forwardBit) == 0; }

// A malformed CCLX_* setting: comm creation fails with it (NCCL's code for a bad argument).
bool settingsError(ncclResult_t& r) {
  try {
    (void)config();
    return false;
  } catch (const Error& e) {
    r = fail(nccl::ncclInvalidArgument, e.what());
    return true;
  }
}

// Why a collective goes to NCCL (CCLX_DEBUG=TRACE).
bool forwarded(CollType type, const char* why) {
  CCLX_TRACE("NCCL drop-in: %s forwarded: %s", collName(type), why);
  return false;
}

// Runs `a` on cclx when its comm is set up and the selection picks a peer algorithm. Returns
// false when the call should go to NCCL; `r` holds the result otherwise.
bool tryRun(CollType type, const void* send, void* recv, size_t count, ncclDataType_t t,
            RedOpKind op, ncclComm_t comm, ncclStream_t stream, ncclResult_t& r) {
  DataType dt;
  if (count == 0 || !send || !recv) return forwarded(type, "empty or null buffers");
  if (tDepth > 0) return forwarded(type, "inside ncclGroupStart/End");
  if (!toCclxType(t, dt, false)) return forwarded(type, "a data type cclx does not reduce");
  std::shared_ptr<DropinComm> dc = findComm(comm);
  if (!dc) return forwarded(type, "a comm the drop-in does not know");
  ncclResult_t setupErr = nccl::ncclSuccess;
  const DropinComm::Snapshot snap = prepare(*dc, stream, tDepth, setupErr);
  if (setupErr != nccl::ncclSuccess) {  // the ranks' settings differ: every rank reports it
    r = setupErr;
    return true;
  }
  if (snap.state != DropinComm::State::Ready) return forwarded(type, "the comm is not set up");
  CudaBackend& backend = *snap.backend;  // alive while `snap` holds it
  CollArgs a{.type = type, .send = send, .recv = recv, .count = count, .dtype = dt,
             .op = ReduceOp(op), .peersOnly = true};
  a.opts.stream = stream;
  a.opts.timeout = snap.timeout;
  a.opts.buffersChecked = true;  // NCCL checks no pointer attributes either
  try {
    // The backend's one door, as a cclx comm's calls take it (core/comm/backend.h): it declines
    // what NCCL must run.
    Algo ran = Algo::Base;
    if (!backend.run(a, ran))
      return forwarded(type, "the selection picks NCCL, or the stream captures and the "
                             "algorithm's staging is not allocated yet");
    r = nccl::ncclSuccess;
  } catch (const Error& e) {
    r = fail(e);
  }
  return true;
}

// After a call that creates `*comm`: register it, set up now when the call completed. A setup
// that must fail the call (no setup buffers, settings that differ between ranks) has aborted the
// new comm: the call returns its error and no comm.
ncclResult_t created(ncclResult_t r, ncclComm_t* comm) {
  if ((r == nccl::ncclSuccess || r == nccl::ncclInProgress) && comm && *comm) {
    const ncclResult_t mine = addComm(*comm, r == nccl::ncclSuccess && tDepth == 0);
    if (mine != nccl::ncclSuccess) {
      *comm = nullptr;
      return mine;
    }
  }
  return r;
}

}  // namespace

}  // namespace dropin
}  // namespace cclx

using namespace cclx;
using namespace cclx::dropin;

// ---- collectives ----

CCLX_DROPIN_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count,
                                              ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                                              ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::allReduce(*s, send, recv, count, t, op, stream);
  auto fn = real().ncclAllReduce;
  if (!fn) return missing("ncclAllReduce");
  RedOpKind k;
  ncclResult_t r;
  if (intercepting(kForwardAllReduce) && toCclxOp(op, k) &&
      tryRun(CollType::AllReduce, send, recv, count, t, k, comm, stream, r))
    return r;
  return fn(send, recv, count, t, op, comm, stream);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count,
                                                  ncclDataType_t t, ncclRedOp_t op,
                                                  ncclComm_t comm, ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::reduceScatter(*s, send, recv, count, t, op, stream);
  auto fn = real().ncclReduceScatter;
  if (!fn) return missing("ncclReduceScatter");
  RedOpKind k;
  ncclResult_t r;
  if (intercepting(kForwardReduceScatter) && toCclxOp(op, k) &&
      tryRun(CollType::ReduceScatter, send, recv, count, t, k, comm, stream, r))
    return r;
  return fn(send, recv, count, t, op, comm, stream);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t count,
                                              ncclDataType_t t, ncclComm_t comm,
                                              ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::allGather(*s, send, recv, count, t, stream);
  auto fn = real().ncclAllGather;
  if (!fn) return missing("ncclAllGather");
  ncclResult_t r;
  if (intercepting(kForwardAllGather) &&
      tryRun(CollType::AllGather, send, recv, count, t, RedOpKind::SUM, comm, stream, r))
    return r;
  return fn(send, recv, count, t, comm, stream);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count,
                                             ncclDataType_t t, ncclComm_t comm,
                                             ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::allToAll(*s, send, recv, count, t, stream);
  auto fn = real().ncclAlltoAll;
  if (!fn) return missing("ncclAlltoAll");
  ncclResult_t r;
  if (intercepting(kForwardAllToAll) &&
      tryRun(CollType::AllToAll, send, recv, count, t, RedOpKind::SUM, comm, stream, r))
    return r;
  return fn(send, recv, count, t, comm, stream);
}

// ---- groups ----

// The shared-GPU mode's comms keep a group of their own (shared.h) in step with NCCL's: their
// calls of the group run at the outermost end, after NCCL's.
CCLX_DROPIN_EXPORT ncclResult_t ncclGroupStart() {
  clearError();
  auto fn = real().ncclGroupStart;
  if (!fn) return missing("ncclGroupStart");
  const ncclResult_t r = fn();
  if (r == nccl::ncclSuccess) {
    ++tDepth;
    shared::groupStart();
  }
  return r;
}

CCLX_DROPIN_EXPORT ncclResult_t ncclGroupEnd() {
  clearError();
  auto fn = real().ncclGroupEnd;
  if (!fn) return missing("ncclGroupEnd");
  if (tDepth > 0) --tDepth;  // the group is closed whatever NCCL reports
  const ncclResult_t r = fn();
  const ncclResult_t mine = shared::groupDepth() > 0 ? shared::groupEnd(false) : nccl::ncclSuccess;
  return r != nccl::ncclSuccess && r != nccl::ncclInProgress ? r : mine != nccl::ncclSuccess ? mine : r;
}

// Ends the group as ncclGroupEnd does (after estimating its cost instead of running it), so the
// depth closes too (torch's cost estimator calls it); the shared comms' calls of the group are
// dropped, as NCCL drops its own.
CCLX_DROPIN_EXPORT ncclResult_t ncclGroupSimulateEnd(void* simInfo) {
  clearError();
  auto fn = real().ncclGroupSimulateEnd;
  if (!fn) return missing("ncclGroupSimulateEnd");
  if (tDepth > 0) --tDepth;
  if (shared::groupDepth() > 0) (void)shared::groupEnd(true);
  return fn(simInfo);
}

// ---- creation ----

CCLX_DROPIN_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                 int rank) {
  clearError();
  ncclResult_t r;
  if (settingsError(r)) return r;
  if (shared::initRank(comm, nranks, id, rank, nullptr, localRank(), "ncclCommInitRank", r)) return r;
  auto fn = real().ncclCommInitRank;
  if (!fn) return missing("ncclCommInitRank");
  return created(fn(comm, nranks, id, rank), comm);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                       ncclUniqueId id, int rank,
                                                       ncclConfig_t* cfg) {
  clearError();
  ncclResult_t r;
  if (settingsError(r)) return r;
  if (shared::initRank(comm, nranks, id, rank, cfg, localRank(), "ncclCommInitRankConfig", r)) return r;
  auto fn = real().ncclCommInitRankConfig;
  if (!fn) return missing("ncclCommInitRankConfig");
  return created(fn(comm, nranks, id, rank, cfg), comm);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank,
                                                         int nId, ncclUniqueId* ids,
                                                         ncclConfig_t* cfg) {
  clearError();
  ncclResult_t r;
  if (settingsError(r)) return r;
  // The shared mode meets through the first id (every rank holds all of them).
  if (nId >= 1 && ids &&
      shared::initRank(comm, nranks, ids[0], rank, cfg, localRank(), "ncclCommInitRankScalable", r))
    return r;
  auto fn = real().ncclCommInitRankScalable;
  if (!fn) return missing("ncclCommInitRankScalable");
  return created(fn(comm, nranks, rank, nId, ids, cfg), comm);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                              ncclComm_t* newcomm, ncclConfig_t* cfg) {
  clearError();
  if (auto s = shared::find(comm)) return shared::split(*s, color, key, newcomm, cfg);
  auto fn = real().ncclCommSplit;
  if (!fn) return missing("ncclCommSplit");
  return created(fn(comm, color, key, newcomm, cfg), newcomm);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude, int nExclude,
                                               ncclComm_t* newcomm, ncclConfig_t* cfg, int flags) {
  clearError();
  if (auto s = shared::find(comm)) return shared::shrink(*s, exclude, nExclude, newcomm, cfg, flags);
  auto fn = real().ncclCommShrink;
  if (!fn) return missing("ncclCommShrink");
  return created(fn(comm, exclude, nExclude, newcomm, cfg, flags), newcomm);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommGrow(ncclComm_t comm, int nranks, const ncclUniqueId* id,
                                             int rank, ncclComm_t* newcomm, ncclConfig_t* cfg) {
  clearError();
  if (shared::isShared(comm)) return shared::unsupported("ncclCommGrow", comm);
  auto fn = real().ncclCommGrow;
  if (!fn) return missing("ncclCommGrow");
  return created(fn(comm, nranks, id, rank, newcomm, cfg), newcomm);
}

// ---- teardown and errors ----

CCLX_DROPIN_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  clearError();
  if (auto s = shared::find(comm)) return shared::finalize(*s);
  auto fn = real().ncclCommFinalize;
  if (!fn) return missing("ncclCommFinalize");
  dropComm(comm, /*graceful=*/true);
  return fn(comm);
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  clearError();
  if (auto s = shared::find(comm)) return shared::destroy(*s);
  auto fn = real().ncclCommDestroy;
  if (!fn) return missing("ncclCommDestroy");
  dropComm(comm, /*graceful=*/true);
  return fn(comm);
}

// Abort never blocks: cclx's kernels of the comm are told to stop (here and on its peers: host
// words and asynchronous copies only), NCCL's abort runs (it releases NCCL's own stuck kernels),
// then cclx's state is released without waiting for or freeing anything still in use.
CCLX_DROPIN_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  clearError();
  if (auto s = shared::find(comm)) return shared::abort(*s);
  auto fn = real().ncclCommAbort;
  if (!fn) return missing("ncclCommAbort");
  stopComm(comm);
  const ncclResult_t r = fn(comm);
  dropComm(comm, /*graceful=*/false);
  return r;
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  clearError();
  if (auto s = shared::find(comm)) return shared::abort(*s);  // no operation of it survives
  auto fn = real().ncclCommRevoke;
  if (!fn) return missing("ncclCommRevoke");
  stopComm(comm);
  const ncclResult_t r = fn(comm, flags);
  dropComm(comm, /*graceful=*/false);
  return r;
}

// cclx's device-side failures (a peer that never arrived) first, then NCCL's own.
CCLX_DROPIN_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  clearError();
  if (auto s = shared::find(comm)) return shared::asyncError(*s, err);
  auto fn = real().ncclCommGetAsyncError;
  if (!fn) return missing("ncclCommGetAsyncError");
  if (err) {
    if (std::shared_ptr<DropinComm> dc = findComm(comm)) {
      if (std::shared_ptr<CudaBackend> b = dc->snapshot().backend) {
        cclxResult_t mine = b->asyncError();
        if (mine != cclxSuccess && mine != cclxInProgress) {
          *err = nccl::ncclRemoteError;
          (void)fail(nccl::ncclRemoteError, b->failureMessage());
          return nccl::ncclSuccess;
        }
      }
    }
  }
  return fn(comm, err);
}

CCLX_DROPIN_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  if (const char* mine = lastError()) return mine;
  auto fn = real().ncclGetLastError;
  return fn ? fn(comm) : "";
}

// ---- NCCL's profiling names of the functions above ----

#define CCLX_ALIAS_R(name, params, args) CCLX_DROPIN_ALIAS(ncclResult_t, name, params)
#define CCLX_ALIAS_O(type, name, params, args, fallback) CCLX_DROPIN_ALIAS(type, name, params)
#define CCLX_SKIP(...)
CCLX_NCCL_RESULT_FUNCTIONS(CCLX_SKIP, CCLX_ALIAS_R, CCLX_SKIP)
CCLX_NCCL_OTHER_FUNCTIONS(CCLX_SKIP, CCLX_ALIAS_O)
#undef CCLX_ALIAS_R
#undef CCLX_ALIAS_O
#undef CCLX_SKIP

// ---- the drop-in's own entry points ----

/// 1: collectives may run on cclx's algorithms; 0: every call goes to the real NCCL. Returns the
/// previous setting. Comms are set up either way, so the switch may flip at any time.
CCLX_DROPIN_EXPORT int cclxDropinSetIntercept(int enabled) {
  (void)interceptOn();
  return gIntercept.exchange(enabled ? 1 : 0);
}

/// The calling thread's ncclGroupStart depth (0 outside groups).
CCLX_DROPIN_EXPORT int cclxDropinGroupDepth() { return tDepth; }

/// The real NCCL's dlopen handle and file (null when none was found), for code in the same
/// process that must call NCCL itself rather than the drop-in.
CCLX_DROPIN_EXPORT void* cclxDropinRealNccl(const char** path) {
  const RealNccl& L = real();
  if (path) *path = L.handle ? L.path.c_str() : nullptr;
  return L.handle;
}
