// Comm collectives: argument validation, check mode, dispatch to the backend.
#include <cmath>
#include <limits>
#include <cstdint>
#include <iterator>
#include <sstream>

#include "store/bootstrap.h"
#include "core/comm/comm_internal.h"
#include "core/failure/watchdog.h"
#include "base/error.h"
#include "base/log.h"
#include "core/select/select.h"

namespace cclx {

namespace {

const char* apiOf(CollType t) { return traits(t).api; }

void checkDtype(DataType dtype) {
  CCLX_ARG_CHECK(int(dtype) >= 0 && int(dtype) < cclxNumTypes, "unknown data type %d", int(dtype));
}

void checkOp(const ReduceOp& op, DataType dtype) {
  CCLX_ARG_CHECK(int(op.kind) >= 0 && int(op.kind) < cclxNumOps, "unknown reduction op %d",
                 int(op.kind));
  CCLX_ARG_CHECK(opSupported(op.kind, dtype), "reduction op %s is not supported for %s",
                 opName(op.kind), dtypeName(dtype));
  if (op.kind != RedOpKind::PREMUL_SUM) return;
  CCLX_ARG_CHECK(std::isfinite(op.factor), "PREMUL_SUM factor %g is not finite", op.factor);
  // The reductions convert the factor to the type they accumulate in (dtype_math.h): it must be
  // a value of that type (integers: after truncation).
  const double f = std::trunc(op.factor);
  bool fits = true;
  switch (dtype) {
    case DataType::f32: case DataType::f16: case DataType::bf16:
      fits = std::fabs(op.factor) <= double(std::numeric_limits<float>::max());
      break;
    case DataType::i8: fits = f >= -128.0 && f <= 127.0; break;
    case DataType::u8: fits = f >= 0.0 && f <= 255.0; break;
    case DataType::i32: fits = f >= -2147483648.0 && f <= 2147483647.0; break;
    case DataType::u32: fits = f >= 0.0 && f <= 4294967295.0; break;
    case DataType::i64: fits = f >= -0x1p63 && f < 0x1p63; break;
    case DataType::u64: fits = f >= 0.0 && f < 0x1p64; break;
    default: break;
  }
  CCLX_ARG_CHECK(fits, "PREMUL_SUM factor %g is outside the range of %s", op.factor,
                 dtypeName(dtype));
}

struct Span {
  const void* p;
  size_t n;
  const char* what;
};
bool overlap(const Span& a, const Span& b) {
  if (!a.p || !b.p || !a.n || !b.n) return false;
  const auto x = reinterpret_cast<uintptr_t>(a.p), y = reinterpret_cast<uintptr_t>(b.p);
  return x < y + b.n && y < x + a.n;
}

// AllReduceRmsNorm (core/elements/rmsnorm.h). `buffers`: also the pointers (not for selection queries).
void validateRms(const RmsNormArgs& r, bool buffers) {
  const char* n = "AllReduceRmsNorm";
  CCLX_ARG_CHECK(r.dtype == DataType::f32 || r.dtype == DataType::bf16 || r.dtype == DataType::f16,
                 "%s: dtype %s is not f32, bf16 or f16", n, dtypeName(r.dtype));
  CCLX_ARG_CHECK(r.hidden >= 1 && r.hidden < (size_t(1) << 24),
                 "%s: hidden %zu is outside 1..16777215", n, r.hidden);
  const size_t es = dtypeSize(r.dtype);
  CCLX_ARG_CHECK(r.tokens <= SIZE_MAX / r.hidden / es, "%s: tokens %zu x hidden %zu is too large",
                 n, r.tokens, r.hidden);
  CCLX_ARG_CHECK(std::isfinite(r.eps) && r.eps >= 0, "%s: eps %g is not finite and >= 0", n,
                 double(r.eps));
  CCLX_ARG_CHECK(r.fp8Out || !r.staticScale, "%s: a static scale without an FP8 output", n);
  if (!buffers || r.tokens == 0) return;
  CCLX_ARG_CHECK(r.x && r.residual && r.residualOut && r.weight,
                 "%s: x, residual, residualOut and weight must not be null", n);
  CCLX_ARG_CHECK(r.out || r.fp8Out, "%s: neither an output nor an FP8 output", n);
  CCLX_ARG_CHECK(!r.fp8Out || r.scales, "%s: an FP8 output needs the scales output", n);
  const size_t bytes = r.tokens * r.hidden * es;
  const Span ins[] = {{r.x, bytes, "x"}, {r.residual, bytes, "residual"},
                      {r.weight, r.hidden * es, "weight"}, {r.staticScale, 4, "static scale"}};
  const Span outs[] = {{r.residualOut, bytes, "residualOut"}, {r.out, bytes, "out"},
                       {r.fp8Out, r.tokens * r.hidden, "fp8Out"},
                       {r.fp8Out ? r.scales : nullptr, r.tokens * 4, "scales"}};
  for (size_t i = 0; i < std::size(outs); ++i) {
    for (size_t j = i + 1; j < std::size(outs); ++j)
      CCLX_ARG_CHECK(!overlap(outs[i], outs[j]), "%s: outputs %s and %s overlap", n, outs[i].what,
                     outs[j].what);
    for (const Span& in : ins) {
      const bool inPlace = outs[i].p == in.p && ((i == 0 && in.p == r.residual) ||
                                                 (i == 1 && in.p == r.x));
      CCLX_ARG_CHECK(inPlace || !overlap(outs[i], in),
                     "%s: output %s overlaps input %s (only out == x and residualOut == residual "
                     "may alias)", n, outs[i].what, in.what);
    }
  }
}

// One buffer of `count` elements (`one`), or the list variant's one per rank (`list`).
template <class P>
void checkOneOrList(const char* name, const void* one, const std::vector<P>& list, size_t count,
                    int size, const char* what, const char* words) {
  if (list.empty()) return checkBuf(one, count, what);
  CCLX_ARG_CHECK(list.size() == size_t(size), "%s: %zu %s buffers for %d ranks", name, list.size(),
                 words, size);
  const std::string listed = std::string(what) + " list";
  for (const P& p : list) checkBuf(p, count, listed.c_str());
}

void validate(const CollArgs& a, int rank, int size) {
  checkDtype(a.dtype);
  checkCount(a.count, a.dtype, size);
  if (traits(a.type).reduction) checkOp(a.op, a.dtype);
  const char* name = apiOf(a.type);
  switch (a.type) {
    case CollType::AllReduce:
    case CollType::AllToAll:
      checkBuf(a.send, a.count, "send");
      checkBuf(a.recv, a.count, "recv");
      break;
    case CollType::Reduce:
    case CollType::Broadcast:
      CCLX_ARG_CHECK(a.root >= 0 && a.root < size, "%s: root %d is outside [0, %d)", name, a.root,
                     size);
      if (a.type == CollType::Reduce) {
        checkBuf(a.send, a.count, "send");
        if (rank == a.root) checkBuf(a.recv, a.count, "recv");
      } else {
        if (rank == a.root) checkBuf(a.send, a.count, "send");
        checkBuf(a.recv, a.count, "recv");
      }
      break;
    case CollType::AllGather:
      checkBuf(a.send, a.count, "send");
      checkOneOrList(name, a.recv, a.recvList, a.count, size, "recv", "receive");
      break;
    case CollType::ReduceScatter:
      checkBuf(a.recv, a.count, "recv");
      checkOneOrList(name, a.send, a.sendList, a.count, size, "send", "send");
      break;
    case CollType::AllToAllV: {
      CCLX_ARG_CHECK(a.sendCounts.size() == size_t(size), "%s: %zu send counts for %d ranks", name,
                     a.sendCounts.size(), size);
      CCLX_ARG_CHECK(a.recvCounts.size() == size_t(size), "%s: %zu receive counts for %d ranks",
                     name, a.recvCounts.size(), size);
      size_t s = 0, r = 0;
      for (int i = 0; i < size; ++i) {
        checkCount(a.sendCounts[size_t(i)], a.dtype, 1);
        checkCount(a.recvCounts[size_t(i)], a.dtype, 1);
        s += a.sendCounts[size_t(i)];
        r += a.recvCounts[size_t(i)];
        CCLX_ARG_CHECK(s >= a.sendCounts[size_t(i)] && r >= a.recvCounts[size_t(i)],
                       "%s: counts overflow", name);
      }
      checkCount(s, a.dtype, 1);
      checkCount(r, a.dtype, 1);
      checkBuf(a.send, s, "send");
      checkBuf(a.recv, r, "recv");
      break;
    }
    case CollType::Send:
    case CollType::Recv:
      CCLX_ARG_CHECK(a.root >= 0 && a.root < size, "%s: peer %d is outside [0, %d)", name, a.root,
                     size);
      CCLX_ARG_CHECK(a.root != rank, "%s: peer %d is this rank", name, a.root);
      checkBuf(a.type == CollType::Send ? a.send : a.recv, a.count, "message");
      break;
    case CollType::Barrier:
      break;
    case CollType::SendRecv:
      validateSendRecv(a, rank, size);
      break;
    case CollType::ReduceScatterV:
      validateReduceScatterV(a, rank, size);
      break;
    case CollType::AllReduceRmsNorm:
      validateRms(a.rms, true);
      break;
    case CollType::AllToAllVDevice:
      CCLX_ARG_CHECK(a.rows.send && a.rows.recv, "%s: split sizes are null", name);
      CCLX_ARG_CHECK(a.rows.rowElems > 0, "%s: rows of 0 elements", name);
      checkCount(a.rows.rowElems, a.dtype, 1);
      CCLX_ARG_CHECK(a.rows.sendCap <= SIZE_MAX / a.rows.rowElems &&
                         a.rows.recvCap <= SIZE_MAX / a.rows.rowElems,
                     "%s: capacity overflows", name);
      checkBuf(a.send, a.rows.sendCap * a.rows.rowElems, "send");
      checkBuf(a.recv, a.rows.recvCap * a.rows.rowElems, "recv");
      break;
    case CollType::ReduceScatterQuantized:
      CCLX_ARG_CHECK(a.dtype == DataType::f32, "%s: f32 only (got %s)", name, dtypeName(a.dtype));
      CCLX_ARG_CHECK(a.op.kind == RedOpKind::SUM || a.op.kind == RedOpKind::AVG,
                     "%s: op %s (SUM or AVG only)", name, opName(a.op.kind));
      CCLX_ARG_CHECK(a.seed != nullptr, "%s: seed is null", name);
      checkBuf(a.send, a.count, "send");
      checkBuf(a.recv, a.count, "recv");
      break;
  }
}

std::string describe(const CollArgs& a) {
  std::string s = strFormat("%s count=%zu dtype=%s", apiOf(a.type), a.count, dtypeName(a.dtype));
  if (traits(a.type).reduction) s += strFormat(" op=%s", opName(a.op.kind));
  if (a.type == CollType::Reduce || a.type == CollType::Broadcast)
    s += strFormat(" root=%d", a.root);
  if (a.type == CollType::AllGather) s += a.recvList.empty() ? "" : " list";
  if (a.type == CollType::ReduceScatter) s += a.sendList.empty() ? "" : " list";
  if (a.type == CollType::AllToAllV) s = strFormat("%s dtype=%s", apiOf(a.type), dtypeName(a.dtype));
  if (a.type == CollType::AllToAllVDevice)  // the split sizes are checked where they are read
    s = strFormat("%s dtype=%s row=%zu", apiOf(a.type), dtypeName(a.dtype), a.rows.rowElems);
  if (a.type == CollType::SendRecv) {  // a lowered collective: per-pair counts checked apart
    s = strFormat("%s dtype=%s", apiLabel(a), dtypeName(a.dtype));
    if (a.root >= 0) s += strFormat(" root=%d", a.root);
  }
  if (a.type == CollType::ReduceScatterV)
    s = strFormat("%s dtype=%s op=%s counts=%s", apiOf(a.type), dtypeName(a.dtype),
                  opName(a.op.kind), joinCounts(a.recvCounts).c_str());
  if (a.type == CollType::AllReduceRmsNorm)
    s += strFormat(" tokens=%zu hidden=%zu out=%d fp8=%d static=%d", a.rms.tokens, a.rms.hidden,
                   a.rms.out != nullptr, a.rms.fp8Out != nullptr, a.rms.staticScale != nullptr);
  return s;
}

// Elements this rank sends to / receives from each peer in a grouped call.
std::vector<size_t> perPeer(const CollArgs& a, bool sending, int size) {
  std::vector<size_t> v(size_t(size), 0);
  if (sending)
    for (const P2PSend& m : a.sends) v[size_t(m.peer)] += m.count;
  else
    for (const P2PRecv& m : a.recvs) v[size_t(m.peer)] += m.count;
  return v;
}

// CCLX_CHECK_MODE: every rank publishes what it is about to run; all must agree.
void checkModeExchange(CommState& st, const CollArgs& a) {
  const BootstrapInfo& i = st.info;
  uint64_t seq = st.checkSeq++;
  const bool pairs = a.type == CollType::AllToAllV || a.type == CollType::SendRecv;
  const std::vector<size_t> sendCounts =
      a.type == CollType::SendRecv ? perPeer(a, true, i.size) : a.sendCounts;
  const std::vector<size_t> recvCounts =
      a.type == CollType::SendRecv ? perPeer(a, false, i.size) : a.recvCounts;
  std::string mine = describe(a) + "|" + joinCounts(sendCounts) + "|" + joinCounts(recvCounts);
  std::string key = strFormat("check/%llu", (unsigned long long)seq);
  auto all = storeAllGather(*i.store, key, mine, i.rank, i.size, a.opts.timeout,
                            strFormat("check mode, collective #%llu (%s) of comm '%s'",
                                      (unsigned long long)seq, apiOf(a.type),
                                      i.opts.name.c_str()));
  if (seq > 0) {
    try {
      i.store->erase(strFormat("check/%llu/%d", (unsigned long long)(seq - 1), i.rank));
    } catch (const Error& e) {
      CCLX_WARN("check mode: cannot erase an old key: %s", e.what());
    }
  }
  std::string myDesc = mine.substr(0, mine.find('|'));
  std::string bad;
  for (int r = 0; r < i.size; ++r) {
    std::string d = all[size_t(r)].substr(0, all[size_t(r)].find('|'));
    if (d != myDesc) bad += strFormat("; rank %d: %s", r, d.c_str());
  }
  if (!bad.empty())
    CCLX_THROW(cclxInvalidUsage, "check mode: collective #%llu differs across ranks: rank %d: %s%s",
               (unsigned long long)seq, i.rank, myDesc.c_str(), bad.c_str());
  if (pairs) {
    // Every rank checks every pair (p sends to q what q expects from p), so a mismatch fails
    // on all ranks alike, also on ranks the mismatched messages do not involve.
    auto parse = [](const std::string& s) {
      std::vector<size_t> v;
      std::istringstream in(s);
      for (std::string tok; std::getline(in, tok, ',');) v.push_back(std::stoull(tok));
      return v;
    };
    std::vector<std::vector<size_t>> sends(size_t(i.size)), recvs(size_t(i.size));
    for (int r = 0; r < i.size; ++r) {
      const std::string& e = all[size_t(r)];
      const size_t a1 = e.find('|'), a2 = e.find('|', a1 + 1);
      sends[size_t(r)] = parse(e.substr(a1 + 1, a2 - a1 - 1));
      recvs[size_t(r)] = parse(e.substr(a2 + 1));
    }
    for (int p = 0; p < i.size; ++p)
      for (int q = 0; q < i.size; ++q) {
        const size_t sent = sends[size_t(p)].at(size_t(q)), wanted = recvs[size_t(q)].at(size_t(p));
        if (sent != wanted)
          CCLX_THROW(cclxInvalidUsage,
                     "check mode: %s: rank %d sends %zu elements to rank %d, which expects %zu",
                     apiLabel(a), p, sent, q, wanted);
      }
  }
}

}  // namespace

void checkCount(size_t count, DataType dtype, int size) {
  size_t es = dtypeSize(dtype);
  CCLX_ARG_CHECK(count <= SIZE_MAX / es / size_t(size), "count %zu is too large", count);
}

void checkBuf(const void* p, size_t count, const char* what) {
  CCLX_ARG_CHECK(p != nullptr || count == 0, "%s buffer is null with count %zu", what, count);
}

std::string joinCounts(const std::vector<size_t>& v) {
  std::string s;
  for (size_t x : v) s += std::to_string(x) + ",";
  return s;
}

CollArgs baseArgs(CommState& st, CollType t, const void* send, void* recv, size_t count,
                  DataType dtype, const CollOptions& o) {
  requireUsable(st, apiOf(t));
  CCLX_ARG_CHECK(o.timeout.count() >= 0, "%s: timeout must not be negative (got %lld ms)",
                 apiOf(t), (long long)o.timeout.count());
  checkHints(o.hints);
  CollArgs a{.type = t, .send = send, .recv = recv, .count = count, .dtype = dtype, .opts = o};
  if (a.opts.timeout.count() == 0) a.opts.timeout = st.info.opts.timeout;
  a.opts.hints = st.info.opts.hints;
  for (const auto& [k, v] : o.hints) a.opts.hints[k] = v;
  return a;
}

std::shared_ptr<Work> dispatch(CommState& st, const CollArgs& a) {
  requireUsable(st, apiLabel(a));
  validate(a, st.info.rank, st.info.size);
  // Point to point involves only the peers; a grouped call is collective when it is a lowered
  // collective (`what`).
  const bool collective = a.type != CollType::Send && a.type != CollType::Recv &&
                          (a.type != CollType::SendRecv || a.what != nullptr);
  const uint64_t seq = ++st.opSeq;
  st.lastOp.store(int(a.type));
  trackIssued(st, apiLabel(a), seq);
  try {
    if (st.info.cfg.checkMode && collective) checkModeExchange(st, a);
    CCLX_TRACE("%s count=%zu dtype=%s", apiLabel(a), a.count, dtypeName(a.dtype));
    Algo ran = Algo::Base;
    std::shared_ptr<Work> w = st.backend->run(a, ran);
    trackReturned(st, apiLabel(a), seq, w, algoName(ran));
    return w;
  } catch (const Error& e) {
    trackThrew(st);
    // A timeout or error with abort-on-error ends the process here (core/failure/watchdog.h).
    commFailed(st, e.code(), e.what(), strFormat("%s #%llu", apiLabel(a), (unsigned long long)seq));
    throw;
  } catch (...) {
    trackThrew(st);
    throw;
  }
}

std::shared_ptr<Work> Comm::allReduce(const void* send, void* recv, size_t count, DataType dtype,
                                      ReduceOp op, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::AllReduce, send, recv, count, dtype, o);
  a.op = op;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::reduce(const void* send, void* recv, size_t count, DataType dtype,
                                   ReduceOp op, int root, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::Reduce, send, recv, count, dtype, o);
  a.op = op;
  a.root = root;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::broadcast(const void* send, void* recv, size_t count, DataType dtype,
                                      int root, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::Broadcast, send, recv, count, dtype, o);
  a.root = root;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::allGather(const void* send, void* recv, size_t count, DataType dtype,
                                      const CollOptions& o) {
  return dispatch(*st_, baseArgs(*st_, CollType::AllGather, send, recv, count, dtype, o));
}

std::shared_ptr<Work> Comm::allGatherList(const void* send, const std::vector<void*>& recvs,
                                          size_t count, DataType dtype, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::AllGather, send, nullptr, count, dtype, o);
  CCLX_ARG_CHECK(recvs.size() == size_t(size()), "all_gather: %zu receive buffers for %d ranks",
                 recvs.size(), size());
  a.recvList = recvs;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::reduceScatter(const void* send, void* recv, size_t count,
                                          DataType dtype, ReduceOp op, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::ReduceScatter, send, recv, count, dtype, o);
  a.op = op;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::reduceScatterList(const std::vector<const void*>& sends, void* recv,
                                              size_t count, DataType dtype, ReduceOp op,
                                              const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::ReduceScatter, nullptr, recv, count, dtype, o);
  CCLX_ARG_CHECK(sends.size() == size_t(size()), "reduce_scatter: %zu send buffers for %d ranks",
                 sends.size(), size());
  a.op = op;
  a.sendList = sends;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::allToAll(const void* send, void* recv, size_t count, DataType dtype,
                                     const CollOptions& o) {
  return dispatch(*st_, baseArgs(*st_, CollType::AllToAll, send, recv, count, dtype, o));
}

std::shared_ptr<Work> Comm::allToAllV(const void* send, const std::vector<size_t>& sendCounts,
                                      void* recv, const std::vector<size_t>& recvCounts,
                                      DataType dtype, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::AllToAllV, send, recv, 0, dtype, o);
  a.sendCounts = sendCounts;
  a.recvCounts = recvCounts;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::allToAllVDevice(const void* send, void* recv, const int64_t* sendRows,
                                            const int64_t* recvRows, size_t rowElems,
                                            DataType dtype, size_t sendCapRows,
                                            size_t recvCapRows, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::AllToAllVDevice, send, recv, 0, dtype, o);
  a.rows.send = sendRows;
  a.rows.recv = recvRows;
  a.rows.rowElems = rowElems;
  a.rows.sendCap = sendCapRows;
  a.rows.recvCap = recvCapRows;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::reduceScatterQuantized(const float* send, float* recv, size_t count,
                                                   ReduceOp op, const int64_t* seed,
                                                   const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::ReduceScatterQuantized, send, recv, count, DataType::f32, o);
  a.op = op;
  a.seed = seed;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::send(const void* buf, size_t count, DataType dtype, int peer,
                                 const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::Send, buf, nullptr, count, dtype, o);
  a.root = peer;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::recv(void* buf, size_t count, DataType dtype, int peer,
                                 const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::Recv, nullptr, buf, count, dtype, o);
  a.root = peer;
  return dispatch(*st_, a);
}

std::shared_ptr<Work> Comm::barrier(const CollOptions& o) {
  return dispatch(*st_, baseArgs(*st_, CollType::Barrier, nullptr, nullptr, 0, DataType::f32, o));
}

std::shared_ptr<Work> Comm::allReduceRmsNorm(const RmsNormArgs& r, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::AllReduceRmsNorm, r.x, r.out, 0, r.dtype, o);
  validateRms(r, false);  // the count below must not overflow
  a.count = r.tokens * r.hidden;
  a.rms = r;
  return dispatch(*st_, a);
}

std::string Comm::selectAllReduceRmsNormAlgo(const RmsNormArgs& r, const CollOptions& o) {
  requireUsable(*st_, "selectAllReduceRmsNormAlgo");
  validateRms(r, false);
  CollArgs a = baseArgs(*st_, CollType::AllReduceRmsNorm, nullptr, nullptr, r.tokens * r.hidden,
                        r.dtype, o);
  a.rms = r;
  return st_->backend->selectAllReduce(a);
}

std::string Comm::selectAllReduceAlgo(size_t count, DataType dtype, ReduceOp op,
                                      const CollOptions& o) {
  requireUsable(*st_, "selectAllReduceAlgo");
  CollArgs a = baseArgs(*st_, CollType::AllReduce, nullptr, nullptr, count, dtype, o);
  a.op = op;
  checkDtype(dtype);
  checkCount(count, dtype, size());
  checkOp(op, dtype);
  return st_->backend->selectAllReduce(a);
}

}  // namespace cclx
