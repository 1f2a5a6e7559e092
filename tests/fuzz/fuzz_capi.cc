// Fuzzes the C API's argument validation (include/cclx/cclx.h, src/capi) on CPU communicators of
// one rank, in this process: every input is a sequence of calls with fuzzed counts, data types,
// ops (built-in, PreMulSum handles made and destroyed, garbage), roots and peers, null,
// misaligned, in-place and overlapping buffers, and communicator handles that are live, NULL,
// finalized or destroyed.
// Checks: nothing crashes or trips a sanitizer; a call that fails returns an error code with a
// message (cclxGetLastError) and leaves its output buffer as it was; arguments that are invalid
// by the header's contract (unknown type or op, NULL buffer with a count, a count whose bytes
// overflow, a bad handle) fail with cclxInvalidArgument / cclxInvalidUsage; a valid call on one
// rank succeeds and gives the reference result (a copy of the input).
//
// Buffers are two arenas of kCap bytes (the send side filled from a fuzzed seed); counts never
// exceed what the chosen buffers hold, except counts so large that their byte size overflows
// (which must be refused before any access). Misaligned and partly overlapping buffers are valid
// (the result is that of the input as it was).
#include <cclx/cclx.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"

namespace {

using fuzzutil::kCap;
using fuzzutil::Fp;

void check(bool ok, const char* what, const char* detail = "") {
  fuzzutil::check("fuzz_capi", ok, what, detail);
}

cclxComm_t gLive = nullptr, gFinalized = nullptr, gDestroyed = nullptr;

cclxComm_t makeComm(const char* name) {
  cclxUniqueId id;
  check(cclxGetUniqueId(&id) == cclxSuccess, "cclxGetUniqueId", cclxGetLastError(nullptr));
  cclxConfig_t cfg = CCLX_CONFIG_INITIALIZER;
  cfg.name = name;
  cfg.timeout_ms = 20000;
  cclxComm_t c = nullptr;
  check(cclxCommInitRankConfig(&c, 1, id, 0, -1, &cfg) == cclxSuccess, "cclxCommInitRank",
        cclxGetLastError(nullptr));
  return c;
}

// Size and float format of each cclxDataType_t, in the enum's order (others: 1 byte).
constexpr fuzzutil::Type kTypes[cclxNumTypes] = {{4, Fp::f32}, {8, Fp::f64}, {2, Fp::f16},
                                                 {2, Fp::bf16}, {1}, {1}, {4}, {8}, {4}, {8}, {1}, {1}};
fuzzutil::Type typeOf(int t) { return t >= 0 && t < cclxNumTypes ? kTypes[t] : fuzzutil::Type{1}; }
size_t esize(int t) { return typeOf(t).size; }

struct Arena {
  std::vector<uint8_t> a, b;  // send side, receive side
};

struct Call {
  uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  size_t sendRoom = 0, recvRoom = 0;  // bytes from the pointer to the end of its arena
  bool inPlace = false, overlap = false;
};

// A pointer into an arena (aligned or not), NULL, or the send pointer again (in place) or a
// pointer that overlaps it.
Call pickBuffers(FuzzedDataProvider& p, Arena& ar) {
  Call c;
  const int s = p.ConsumeIntegralInRange<int>(0, 9);
  const size_t so = s == 0 ? 0 : (s <= 6 ? 0 : p.ConsumeIntegralInRange<size_t>(1, 15));
  c.send = s == 0 ? nullptr : ar.a.data() + so;
  c.sendRoom = s == 0 ? 0 : kCap - so;
  const int r = p.ConsumeIntegralInRange<int>(0, 9);
  if (r == 0) {
    c.recv = nullptr;
  } else if (r == 1 && c.send) {
    c.recv = c.send, c.recvRoom = c.sendRoom, c.inPlace = true;
  } else if (r == 2 && c.send) {
    const size_t d = p.ConsumeIntegralInRange<size_t>(1, 64);
    c.recv = c.send + d, c.recvRoom = c.sendRoom - d, c.overlap = true;
  } else {
    const size_t ro = r <= 6 ? 0 : p.ConsumeIntegralInRange<size_t>(1, 15);
    c.recv = ar.b.data() + ro, c.recvRoom = kCap - ro;
  }
  return c;
}

// A count: mostly one the buffers hold, sometimes one whose byte size overflows.
size_t pickCount(FuzzedDataProvider& p, int t, size_t room, bool& huge) {
  huge = false;
  const size_t es = esize(t);
  const int k = p.ConsumeIntegralInRange<int>(0, 7);
  if (k <= 2 && es > 1) {  // (bytes of 1-byte elements cannot overflow)
    huge = true;
    return k == 0 ? SIZE_MAX : (SIZE_MAX / es + 1) + (k == 2 ? p.ConsumeIntegral<uint16_t>() : 0);
  }
  return k == 3 ? 0 : p.ConsumeIntegralInRange<size_t>(0, room / es);
}

int pickType(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange<int>(0, 15)) {
    case 12: return -1;
    case 13: return cclxNumTypes;
    case 14: return p.ConsumeIntegral<int>();
    case 15: return 0x7fffffff;
    default: return p.ConsumeIntegralInRange<int>(0, cclxNumTypes - 1);
  }
}

struct State {
  std::vector<int> premul;  // live PreMulSum ops of gLive
  int destroyedOp = -1;
};

cclxRedOp_t pickOp(FuzzedDataProvider& p, State& st, bool& known) {
  const int k = p.ConsumeIntegralInRange<int>(0, 13);
  int v;
  if (k < cclxNumOps) v = k;
  else if (k == 9 && !st.premul.empty())
    v = st.premul[p.ConsumeIntegralInRange<size_t>(0, st.premul.size() - 1)];
  else if (k == 10 && st.destroyedOp >= 0) v = st.destroyedOp;
  else if (k == 11) v = -1;
  else v = p.ConsumeIntegral<int>();
  // Known: a built-in op other than PreMulSum, or a PreMulSum op of the live comm.
  known = (v >= 0 && v < cclxNumOps && v != cclxPremulSum) ||
          std::find(st.premul.begin(), st.premul.end(), v) != st.premul.end();
  return cclxRedOp_t(v);
}

cclxComm_t pickComm(FuzzedDataProvider& p, bool& good) {
  const int k = p.ConsumeIntegralInRange<int>(0, 9);
  good = k >= 3;
  return k == 0 ? nullptr : k == 1 ? gFinalized : k == 2 ? gDestroyed : gLive;
}

char gArgs[256];  // the current call's arguments, for the report

void noteOp(cclxRedOp_t op, bool known) {
  const size_t n = std::strlen(gArgs);
  std::snprintf(gArgs + n, sizeof(gArgs) - n, ", op %d (%s)", int(op), known ? "known" : "unknown");
}

void expectResult(cclxResult_t r, bool mustFail, const char* call, bool mustPass = false) {
  const char* msg = cclxGetLastError(gLive);
  if (mustPass && r != cclxSuccess) std::fprintf(stderr, "fuzz_capi: %s(%s)\n", call, gArgs);
  if (mustFail && r == cclxSuccess) std::fprintf(stderr, "fuzz_capi: %s(%s)\n", call, gArgs);
  if (mustPass) check(r == cclxSuccess, call, msg);
  if (r != cclxSuccess) {
    check(msg && *msg, "an error without a message from", call);
    check(r > cclxSuccess && r < cclxNumResults, "an unknown result code from", call);
  }
  if (mustFail) check(r == cclxInvalidArgument || r == cclxInvalidUsage, "invalid arguments accepted by", call);
}

void oneCall(FuzzedDataProvider& p, Arena& ar, State& st) {
  bool goodComm = false;
  cclxComm_t comm = pickComm(p, goodComm);
  const int what = p.ConsumeIntegralInRange<int>(0, 13);
  const int t = pickType(p);
  const bool goodType = t >= 0 && t < cclxNumTypes;
  const size_t es = goodType ? esize(t) : 1;
  Call c = pickBuffers(p, ar);
  bool huge = false;
  size_t room = std::min(c.sendRoom, c.recvRoom);
  if (!c.send) room = c.recvRoom;
  if (!c.recv) room = c.sendRoom;
  const size_t count = pickCount(p, goodType ? t : 0, room, huge);
  const bool nulls = count > 0 && (!c.send || !c.recv);
  const bool bad = !goodComm || !goodType || huge || nulls;
  const bool fp8 = t == cclxFloat8e4m3 || t == cclxFloat8e5m2;
  // Valid arguments (any alignment; buffers in place, apart or partly overlapping: the result is
  // that of the input as it was) must work.
  const bool movable = !bad;
  // A failed call leaves its output as it was; a valid one gives the reference.
  const std::vector<uint8_t> sendCopy(c.send ? c.send : ar.a.data(),
                                      (c.send ? c.send : ar.a.data()) + (c.send ? c.sendRoom : 0));
  const std::vector<uint8_t> recvBefore(ar.b);
  const std::vector<uint8_t> aBefore(ar.a);
  std::snprintf(gArgs, sizeof(gArgs), "comm %s, type %d, count %zu, send %s%+td, recv %s%+td",
                comm == gLive ? "live" : comm ? "dead" : "NULL", t, count, c.send ? "a" : "NULL",
                c.send ? c.send - ar.a.data() : 0, c.recv >= ar.b.data() ? "b" : c.recv ? "a" : "NULL",
                c.recv >= ar.b.data() ? c.recv - ar.b.data() : c.recv ? c.recv - ar.a.data() : 0);
  bool known = false;
  cclxResult_t r = cclxSuccess;
  const char* name = "?";
  bool copies = false;  // success means recv[0..count) = send[0..count)
  switch (what) {
    case 0: case 1: case 5: {
      const cclxRedOp_t op = pickOp(p, st, known);
      noteOp(op, known);
      name = what == 5 ? "cclxReduceScatter" : "cclxAllReduce";
      r = (what == 5 ? cclxReduceScatter : cclxAllReduce)(c.send, c.recv, count, cclxDataType_t(t),
                                                          op, comm, nullptr);
      expectResult(r, bad || !known, name,
                   movable && !fp8 && int(op) >= 0 && int(op) <= cclxAvg);
      copies = int(op) <= cclxAvg;
      break;
    }
    case 2: {
      const cclxRedOp_t op = pickOp(p, st, known);
      noteOp(op, known);
      const int root = p.ConsumeIntegralInRange<int>(-1, 2);
      name = "cclxReduce";
      r = cclxReduce(c.send, c.recv, count, cclxDataType_t(t), op, root, comm, nullptr);
      expectResult(r, bad || !known || root != 0, name,
                   movable && !fp8 && int(op) >= 0 && int(op) <= cclxAvg && root == 0);
      copies = int(op) <= cclxAvg;
      break;
    }
    case 3: {
      const int root = p.ConsumeIntegralInRange<int>(-1, 2);
      name = "cclxBroadcast";
      r = cclxBroadcast(c.send, c.recv, count, cclxDataType_t(t), root, comm, nullptr);
      expectResult(r, bad || root != 0, name, movable && root == 0);
      copies = true;
      break;
    }
    case 4: case 6:
      name = what == 4 ? "cclxAllGather" : "cclxAllToAll";
      r = (what == 4 ? cclxAllGather : cclxAllToAll)(c.send, c.recv, count, cclxDataType_t(t), comm,
                                                     nullptr);
      expectResult(r, bad, name, movable);
      copies = true;
      break;
    case 7: {
      size_t sc = count, rc = p.ConsumeBool() ? count : p.ConsumeIntegralInRange<size_t>(0, room / es);
      const bool nullCounts = p.ConsumeIntegralInRange<int>(0, 7) == 0;
      name = "cclxAllToAllV";
      r = cclxAllToAllV(c.send, nullCounts ? nullptr : &sc, c.recv, &rc, cclxDataType_t(t), comm,
                        nullptr);
      expectResult(r, bad || nullCounts || (rc > 0 && !c.recv), name,
                   movable && !nullCounts && sc == rc);
      copies = sc == rc;
      break;
    }
    case 8: {
      const int peer = p.ConsumeIntegralInRange<int>(-1, 1);
      name = p.ConsumeBool() ? "cclxSend" : "cclxRecv";
      r = name[4] == 'S' ? cclxSend(c.send, count, cclxDataType_t(t), peer, comm, nullptr)
                         : cclxRecv(c.recv, count, cclxDataType_t(t), peer, comm, nullptr);
      expectResult(r, true, name);  // one rank: every peer is this rank or outside the comm
      break;
    }
    case 9: {
      // A send to itself and the receive that pairs with it (counts may disagree), or garbage.
      cclxP2PMessage s{p.ConsumeIntegralInRange<int>(-1, 1), c.send, count};
      cclxP2PMessage rv{p.ConsumeIntegralInRange<int>(-1, 1), c.recv,
                        p.ConsumeBool() ? count : p.ConsumeIntegralInRange<size_t>(0, room / es)};
      const int ns = p.ConsumeIntegralInRange<int>(-1, 1), nr = p.ConsumeIntegralInRange<int>(-1, 1);
      name = "cclxGroupSendRecv";
      r = cclxGroupSendRecv(ns == 0 ? nullptr : &s, ns, nr == 0 ? nullptr : &rv, nr,
                            cclxDataType_t(t), comm, nullptr);
      const bool badMsg = (ns == 1 && (s.peer != 0 || huge || (count > 0 && !c.send))) ||
                          (nr == 1 && (rv.peer != 0 || (rv.count > 0 && !c.recv)));
      const bool paired = ns == nr && (ns == 0 || s.count == rv.count);
      expectResult(r, !goodComm || !goodType || ns < 0 || nr < 0 || badMsg, name,
                   goodComm && goodType && ns >= 0 && nr >= 0 && !badMsg && paired && !c.overlap);
      copies = ns == 1 && paired;
      break;
    }
    case 10:
      name = "cclxBarrier";
      r = cclxBarrier(comm, nullptr);
      expectResult(r, !goodComm, name, goodComm);
      break;
    case 11: {
      bool ok = false;
      const double factors[] = {0.5, -3.0, 1e300, NAN, INFINITY, 0.0};
      const double f = factors[p.ConsumeIntegralInRange<size_t>(0, 5)];
      cclxRedOp_t op;
      name = "cclxRedOpCreatePreMulSum";
      const bool nullOut = p.ConsumeIntegralInRange<int>(0, 7) == 0;
      r = cclxRedOpCreatePreMulSum(nullOut ? nullptr : &op, f, comm);
      ok = r == cclxSuccess;
      // Ops belong to the handle: a finalized comm may still make and destroy them.
      const bool handleOk = comm != nullptr && comm != gDestroyed;
      expectResult(r, !handleOk || !std::isfinite(f) || nullOut, name,
                   handleOk && std::isfinite(f) && !nullOut);
      if (ok) {
        if (comm == gLive && st.premul.size() < 8) st.premul.push_back(int(op));
        else cclxRedOpDestroy(op, comm);
      }
      break;
    }
    case 12: {
      bool k2 = false;
      const cclxRedOp_t op = pickOp(p, st, k2);
      name = "cclxRedOpDestroy";
      r = cclxRedOpDestroy(op, comm);
      expectResult(r, comm == nullptr || comm == gDestroyed || int(op) < cclxNumOps, name);
      if (r == cclxSuccess && comm == gLive) {  // (each comm numbers its ops alike)
        for (size_t i = 0; i < st.premul.size(); ++i)
          if (st.premul[i] == int(op)) st.premul.erase(st.premul.begin() + long(i));
        st.destroyedOp = int(op);
      }
      break;
    }
    default: {
      int v = -1;
      name = "cclxCommCount";
      const bool nullOut = p.ConsumeBool();
      r = p.ConsumeBool() ? cclxCommCount(comm, nullOut ? nullptr : &v)
                          : cclxCommUserRank(comm, nullOut ? nullptr : &v);
      // A finalized comm still answers queries; NULL and destroyed handles do not.
      expectResult(r, comm == nullptr || comm == gDestroyed || nullOut, name,
                   comm != nullptr && comm != gDestroyed && !nullOut);
      if (r == cclxSuccess) check(v == 0 || v == 1, "count or rank of a one-rank comm");
      break;
    }
  }
  if (r != cclxSuccess) {
    // Nothing was written (only a call on the live comm can touch the arenas).
    check(ar.b == recvBefore && (c.inPlace || c.overlap || ar.a == aBefore),
          "a failed call wrote to its buffers:", name);
    if (!c.inPlace && !c.overlap) check(ar.a == aBefore, "a failed call wrote:", name);
  } else if (copies && what <= 9 && count > 0 && goodType) {
    check(fuzzutil::sameElements(typeOf(t), c.recv, sendCopy.data(), count), "wrong result from",
          name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzzutil::setQuietEnv();
  gLive = makeComm("fuzz-live");
  gFinalized = makeComm("fuzz-finalized");
  check(cclxCommFinalize(gFinalized) == cclxSuccess, "cclxCommFinalize");
  gDestroyed = makeComm("fuzz-destroyed");
  check(cclxCommDestroy(gDestroyed) == cclxSuccess, "cclxCommDestroy");  // the handle dangles
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  Arena ar;
  ar.a = fuzzutil::fill(p.ConsumeIntegral<uint32_t>());
  ar.b.assign(kCap, 0xc3);
  State st;
  for (int i = 0; i < 16 && p.remaining_bytes() > 0; ++i) oneCall(p, ar, st);
  for (int op : st.premul) cclxRedOpDestroy(cclxRedOp_t(op), gLive);
  return 0;
}
