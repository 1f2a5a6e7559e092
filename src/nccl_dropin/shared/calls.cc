// The NCCL calls on shared comms (shared.h): each one a call of the comm's cclx Comm on the
// caller's stream (CollOptions::stream; the call returns once enqueued, as NCCL's), and NCCL's
// groups.
//
// Groups. Inside ncclGroupStart / ncclGroupEnd (per thread, nested) a shared comm's calls are
// recorded, arguments resolved (a PreMulSum handle may be destroyed before the group ends, as
// with NCCL), and run at the outermost end: comm by comm in the order of their ids (the same on
// every rank, so that ranks whose groups span several comms never wait on each other in
// opposite orders), each comm's collectives in call order, then its sends and receives as one
// batch (Comm::sendRecv, in bytes: a group may mix data types). Sends and receives of zero
// elements are dropped on both ends alike. ncclGroupSimulateEnd ends the group without running
// anything. Outside a group, a send or receive is a batch of one.
#include <algorithm>
#include <functional>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "nccl_dropin/errors.h"
#include "nccl_dropin/shared/shared_internal.h"

namespace cclx {
namespace dropin {
namespace shared {

namespace {

using Call = std::function<std::shared_ptr<Work>(Comm&, const CollOptions&)>;

struct Pending {
  SharedComm* c = nullptr;  // shared comms are never freed (shared.h)
  const char* call = nullptr;
  void* stream = nullptr;
  Call run;            // a collective
  bool p2p = false;    // else a send or receive:
  bool isSend = false;
  int peer = -1;
  void* buf = nullptr;
  size_t bytes = 0;
};

thread_local int tDepth = 0;
thread_local std::vector<Pending> tPending;

// Runs one call on the comm now; remembers its Work for finalize.
ncclResult_t runNow(SharedComm& c, const char* call, void* stream, const Call& f) {
  try {
    std::shared_ptr<Comm> comm = c.use(call);
    CollOptions o;
    o.stream = stream;
    std::shared_ptr<Work> w = f(*comm, o);
    // Inside CUDA-graph capture the Work is already complete: only eager calls are waited for.
    if (w && !w->isCompleted()) {
      std::lock_guard<std::mutex> lk(c.mu);
      c.last[stream] = std::move(w);
    }
    return nccl::ncclSuccess;
  } catch (const Error& e) {
    return failed(call, e);
  } catch (const std::exception& e) {
    return failed(call, e);
  }
}

// Records the call inside a group, else runs it.
ncclResult_t submit(SharedComm& c, const char* call, void* stream, Call f) {
  if (tDepth == 0) return runNow(c, call, stream, f);
  Pending p;
  p.c = &c;
  p.call = call;
  p.stream = stream;
  p.run = std::move(f);
  tPending.push_back(std::move(p));
  return nccl::ncclSuccess;
}

ncclResult_t badType(const char* call, ncclDataType_t t) {
  return fail(nccl::ncclInvalidArgument, strFormat("%s: unknown data type %d", call, int(t)));
}

// NCCL's op as cclx's: a built-in one, or a PreMulSum handle of this comm made for this type.
bool toOp(SharedComm& c, ncclRedOp_t op, ncclDataType_t t, const char* call, ReduceOp& out,
          ncclResult_t& r) {
  RedOpKind k;
  if (toCclxOp(op, k)) {
    out = k;
    return true;
  }
  std::lock_guard<std::mutex> lk(c.mu);
  auto it = c.premul.find(int(op));
  if (it == c.premul.end()) {
    r = fail(nccl::ncclInvalidArgument,
             strFormat("%s: reduction op %d is neither built in nor a PreMulSum of comm %p", call,
                       int(op), static_cast<void*>(c.handle)));
    return false;
  }
  if (it->second.type != t) {
    r = fail(nccl::ncclInvalidArgument,
             strFormat("%s: PreMulSum op %d was made for data type %d, the call has %d", call,
                       int(op), int(it->second.type), int(t)));
    return false;
  }
  out = ReduceOp::premulSum(it->second.factor);
  return true;
}

size_t bytesOf(size_t count, DataType dt) { return count * dtypeSize(dt); }

ncclResult_t p2p(SharedComm& c, bool isSend, void* buf, size_t count, ncclDataType_t t, int peer,
                 ncclStream_t stream) {
  const char* call = isSend ? "ncclSend" : "ncclRecv";
  DataType dt;
  if (!toCclxType(t, dt, true)) return badType(call, t);
  if (peer < 0 || peer >= c.size)
    return fail(nccl::ncclInvalidArgument,
                strFormat("%s: peer %d is outside [0, %d)", call, peer, c.size));
  if (count == 0) return nccl::ncclSuccess;  // dropped on both ends
  if (!buf) return fail(nccl::ncclInvalidArgument, strFormat("%s: buffer is NULL", call));
  const size_t bytes = bytesOf(count, dt);
  if (tDepth == 0) {
    return runNow(c, call, stream, [=](Comm& comm, const CollOptions& o) {
      if (isSend) return comm.sendRecv({P2PSend{peer, buf, bytes}}, {}, DataType::u8, o);
      return comm.sendRecv({}, {P2PRecv{peer, buf, bytes}}, DataType::u8, o);
    });
  }
  Pending p;
  p.c = &c;
  p.call = call;
  p.stream = stream;
  p.p2p = true;
  p.isSend = isSend;
  p.peer = peer;
  p.buf = buf;
  p.bytes = bytes;
  tPending.push_back(std::move(p));
  return nccl::ncclSuccess;
}

// One comm's share of a group: its collectives in order, then its sends and receives as one
// batch on their stream.
struct FirstError {
  ncclResult_t code = nccl::ncclSuccess;
  std::string msg;
  void keep(ncclResult_t r) {
    if (r == nccl::ncclSuccess || code != nccl::ncclSuccess) return;
    code = r;
    const char* m = lastError();
    msg = m ? m : "";
  }
  // The first failure is what the caller reads (later ones were logged).
  ncclResult_t report() const {
    if (code != nccl::ncclSuccess && !msg.empty()) (void)note(code, msg.substr(msg.find(' ') + 1));
    return code;
  }
};

ncclResult_t flushComm(SharedComm& c, std::vector<Pending>& ops, FirstError& first) {
  std::vector<P2PSend> sends;
  std::vector<P2PRecv> recvs;
  void* stream = nullptr;
  bool haveStream = false;
  for (Pending& p : ops) {
    if (!p.p2p) {
      first.keep(runNow(c, p.call, p.stream, p.run));
      continue;
    }
    if (haveStream && p.stream != stream) {
      first.keep(fail(nccl::ncclInvalidUsage,
                strFormat("ncclGroupEnd: the sends and receives of comm %p in one group use "
                          "different streams (%p, %p); comms whose ranks share a GPU need one",
                          static_cast<void*>(c.handle), stream, p.stream)));
      return first.code;
    }
    stream = p.stream;
    haveStream = true;
    if (p.isSend) sends.push_back(P2PSend{p.peer, p.buf, p.bytes});
    else recvs.push_back(P2PRecv{p.peer, p.buf, p.bytes});
  }
  if (!sends.empty() || !recvs.empty())
    first.keep(runNow(c, "ncclGroupEnd (ncclSend / ncclRecv)", stream,
                      [&](Comm& comm, const CollOptions& o) {
                        return comm.sendRecv(sends, recvs, DataType::u8, o);
                      }));
  return first.code;
}

}  // namespace

// ---- collectives ----

namespace {

/// A reduction: converts the type and the op (each refused with NCCL's error), then submits
/// f(comm, options, type, op).
template <class F>
ncclResult_t reduction(SharedComm& c, const char* call, ncclDataType_t t, ncclRedOp_t op,
                       ncclStream_t stream, F f) {
  DataType dt;
  if (!toCclxType(t, dt, true)) return badType(call, t);
  ReduceOp rop;
  ncclResult_t r;
  if (!toOp(c, op, t, call, rop, r)) return r;
  return submit(c, call, stream,
                [=](Comm& comm, const CollOptions& o) { return f(comm, o, dt, rop); });
}

/// A data movement: converts the type, then submits f(comm, options, type).
template <class F>
ncclResult_t movement(SharedComm& c, const char* call, ncclDataType_t t, ncclStream_t stream,
                      F f) {
  DataType dt;
  if (!toCclxType(t, dt, true)) return badType(call, t);
  return submit(c, call, stream, [=](Comm& comm, const CollOptions& o) { return f(comm, o, dt); });
}

}  // namespace

ncclResult_t allReduce(SharedComm& c, const void* send, void* recv, size_t count,
                       ncclDataType_t t, ncclRedOp_t op, ncclStream_t stream) {
  return reduction(c, "ncclAllReduce", t, op, stream,
                   [=](Comm& comm, const CollOptions& o, DataType dt, const ReduceOp& rop) {
                     return comm.allReduce(send, recv, count, dt, rop, o);
                   });
}

ncclResult_t reduce(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                    ncclRedOp_t op, int root, ncclStream_t stream) {
  return reduction(c, "ncclReduce", t, op, stream,
                   [=](Comm& comm, const CollOptions& o, DataType dt, const ReduceOp& rop) {
                     return comm.reduce(send, recv, count, dt, rop, root, o);
                   });
}

ncclResult_t broadcast(SharedComm& c, const void* send, void* recv, size_t count,
                       ncclDataType_t t, int root, ncclStream_t stream, const char* call) {
  return movement(c, call, t, stream, [=](Comm& comm, const CollOptions& o, DataType dt) {
    return comm.broadcast(send, recv, count, dt, root, o);
  });
}

ncclResult_t allGather(SharedComm& c, const void* send, void* recv, size_t count,
                       ncclDataType_t t, ncclStream_t stream) {
  return movement(c, "ncclAllGather", t, stream,
                  [=](Comm& comm, const CollOptions& o, DataType dt) {
                    return comm.allGather(send, recv, count, dt, o);
                  });
}

ncclResult_t reduceScatter(SharedComm& c, const void* send, void* recv, size_t count,
                           ncclDataType_t t, ncclRedOp_t op, ncclStream_t stream) {
  return reduction(c, "ncclReduceScatter", t, op, stream,
                   [=](Comm& comm, const CollOptions& o, DataType dt, const ReduceOp& rop) {
                     return comm.reduceScatter(send, recv, count, dt, rop, o);
                   });
}

ncclResult_t allToAll(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                      ncclStream_t stream) {
  return movement(c, "ncclAlltoAll", t, stream, [=](Comm& comm, const CollOptions& o, DataType dt) {
    return comm.allToAll(send, recv, count, dt, o);
  });
}

ncclResult_t gather(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                    int root, ncclStream_t stream) {
  return movement(c, "ncclGather", t, stream, [=](Comm& comm, const CollOptions& o, DataType dt) {
    return comm.gatherSingle(send, recv, count, dt, root, o);
  });
}

ncclResult_t scatter(SharedComm& c, const void* send, void* recv, size_t count, ncclDataType_t t,
                     int root, ncclStream_t stream) {
  return movement(c, "ncclScatter", t, stream, [=](Comm& comm, const CollOptions& o, DataType dt) {
    std::vector<const void*> blocks;
    if (comm.rank() == root) {  // the root's send buffer holds every rank's block in order
      if (!send && count)
        CCLX_THROW(cclxInvalidArgument, "the root's send buffer is NULL with count %zu", count);
      for (int r = 0; r < comm.size(); ++r)
        blocks.push_back(static_cast<const char*>(send) + bytesOf(count, dt) * size_t(r));
    }
    return comm.scatter(blocks, recv, count, dt, root, o);
  });
}

ncclResult_t send(SharedComm& c, const void* buf, size_t count, ncclDataType_t t, int peer,
                  ncclStream_t stream) {
  return p2p(c, true, const_cast<void*>(buf), count, t, peer, stream);
}

ncclResult_t recv(SharedComm& c, void* buf, size_t count, ncclDataType_t t, int peer,
                  ncclStream_t stream) {
  return p2p(c, false, buf, count, t, peer, stream);
}

// ---- groups ----

void groupStart() { ++tDepth; }
int groupDepth() { return tDepth; }

ncclResult_t groupEnd(bool simulate) {
  if (tDepth == 0)
    return fail(nccl::ncclInvalidUsage, simulate ? "ncclGroupSimulateEnd without ncclGroupStart"
                                                 : "ncclGroupEnd without ncclGroupStart");
  if (--tDepth > 0) return nccl::ncclSuccess;
  std::vector<Pending> ops;
  ops.swap(tPending);
  if (simulate || ops.empty()) return nccl::ncclSuccess;
  // Comm by comm in id order (the same on every rank), each comm's calls in the order made.
  std::stable_sort(ops.begin(), ops.end(), [](const Pending& a, const Pending& b) {
    return a.c->id < b.c->id || (a.c->id == b.c->id && a.c < b.c);
  });
  FirstError first;  // every comm's calls still run after a failure: the peers expect them
  for (size_t i = 0; i < ops.size();) {
    size_t j = i;
    while (j < ops.size() && ops[j].c == ops[i].c) ++j;
    std::vector<Pending> mine(std::make_move_iterator(ops.begin() + long(i)),
                              std::make_move_iterator(ops.begin() + long(j)));
    (void)flushComm(*mine.front().c, mine, first);
    i = j;
  }
  return first.report();
}

}  // namespace shared
}  // namespace dropin
}  // namespace cclx
