// Fuzzes the NCCL drop-in's argument validation where it runs without a GPU: the shared-GPU mode
// (src/nccl_dropin/shared), which serves every NCCL call on a comm whose ranks share a GPU, as
// the drop-in's entry points dispatch it (the CPU twin's way, tests/cpp/helpers/dropin_twin.h),
// over CPU comms of one rank made by createShared; and the decoding of the rendezvous a unique id
// carries (readStamp: bytes another process made). The drop-in's own entry points
// (src/nccl_dropin/*.cc) call the CUDA runtime and the real NCCL and cannot link without CUDA.
//
// Every input is a sequence of calls: the collectives, gather / scatter, send / recv, groups
// (nested, ended or simulated), PreMulSum ops (scalars of every type, at any alignment, host or
// device residence), registration, queries with NULL outputs, on live, finalized, destroyed and
// aborted handles, with fuzzed types, ops, counts, roots, peers and buffers (null, misaligned,
// in place, overlapping).
// Checks: nothing crashes or trips a sanitizer; a failure returns an NCCL error code with a
// message (lastError) and writes nothing; plainly invalid arguments fail; a valid call outside a
// group on the live comm gives the reference result (one rank: a copy of the input).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/settings/config.h"
#include "fuzz_util.h"
#include "nccl_dropin/errors.h"
#include "nccl_dropin/shared/shared.h"
#include "nccl_dropin/shared/shared_internal.h"

using namespace cclx;
using namespace cclx::nccl;
namespace sh = cclx::dropin::shared;
using cclx::dropin::ncclComm_t;

namespace {

using fuzzutil::kCap;
using fuzzutil::Fp;

void check(bool ok, const char* what, const char* detail = "") {
  fuzzutil::check("fuzz_dropin", ok, what, detail);
}

const char* lastError() {
  const char* m = cclx::dropin::lastError();
  return m ? m : "";
}

ncclComm_t gLive, gFinalized, gDestroyed, gAborted;

ncclComm_t makeComm(std::shared_ptr<Store> store, uint64_t id) {
  ncclComm_t c = nullptr;
  const ncclResult_t r =
      sh::createShared(&c, id, store, 0, 1, DeviceSpec::cpu(), "ncclCommInitRank");
  check(r == ncclSuccess && c && sh::isShared(c), "createShared", lastError());
  return c;
}

// Size and float format of each ncclDataType_t, in the enum's order (others: 1 byte).
constexpr fuzzutil::Type kTypes[] = {{1}, {1}, {4}, {4}, {8}, {8}, {2, Fp::f16}, {4, Fp::f32},
                                     {8, Fp::f64}, {2, Fp::bf16}, {1}, {1}};
fuzzutil::Type typeOf(int t) { return t >= 0 && t <= ncclFloat8e5m2 ? kTypes[t] : fuzzutil::Type{1}; }
size_t esize(int t) { return typeOf(t).size; }

struct State {
  std::vector<int> premul;  // live PreMulSum ops of gLive
  std::vector<int> premulType;
  int depth = 0;            // group nesting opened by this input
};

ncclComm_t pickComm(FuzzedDataProvider& p, bool& live) {
  const int k = p.ConsumeIntegralInRange<int>(0, 9);
  live = k >= 3;
  return k == 0 ? gFinalized : k == 1 ? gDestroyed : k == 2 ? gAborted : gLive;
}

int pickType(FuzzedDataProvider& p) {
  const int k = p.ConsumeIntegralInRange<int>(0, 14);
  return k < 12 ? k : k == 12 ? -1 : k == 13 ? 12 : p.ConsumeIntegral<int>();
}

int pickOp(FuzzedDataProvider& p, const State& st, int t, bool& builtin, bool& ours) {
  const int k = p.ConsumeIntegralInRange<int>(0, 8);
  int v;
  if (k <= ncclAvg) v = k;
  else if (k == 5 && !st.premul.empty())
    v = st.premul[p.ConsumeIntegralInRange<size_t>(0, st.premul.size() - 1)];
  else v = k == 6 ? 0x100 + p.ConsumeIntegralInRange<int>(0, 64) : p.ConsumeIntegral<int>();
  builtin = v >= 0 && v <= ncclAvg;
  ours = false;  // a PreMulSum op of the live comm made for this type
  for (size_t i = 0; i < st.premul.size(); ++i) ours |= st.premul[i] == v && st.premulType[i] == t;
  return v;
}

void expect(ncclResult_t r, bool mustFail, const char* call, bool mustPass = false) {
  if (mustPass) check(r == ncclSuccess, call, lastError());
  if (r != ncclSuccess) {
    check(*lastError() != 0, "an error without a message from", call);
    check(r == ncclInvalidArgument || r == ncclInvalidUsage || r == ncclInternalError ||
              r == ncclSystemError || r == ncclRemoteError,
          "an unexpected result code from", call);
  }
  if (mustFail) check(r != ncclSuccess, "invalid arguments accepted by", call);
}

void oneCall(FuzzedDataProvider& p, std::vector<uint8_t>& a, std::vector<uint8_t>& b, State& st) {
  bool live = false;
  const ncclComm_t comm = pickComm(p, live);
  sh::SharedComm& c = *sh::find(comm);
  const int what = p.ConsumeIntegralInRange<int>(0, 15);
  const int t = pickType(p);
  const bool goodType = t >= 0 && t <= ncclFloat8e5m2;
  const size_t es = goodType ? esize(t) : 1;
  // Buffers: NULL, aligned or not, in place or overlapping the send buffer.
  const int sk = p.ConsumeIntegralInRange<int>(0, 7);
  uint8_t* send = sk == 0 ? nullptr : a.data() + (sk < 5 ? 0 : p.ConsumeIntegralInRange<int>(1, 15));
  const int rk = p.ConsumeIntegralInRange<int>(0, 7);
  bool inPlace = false, overlap = false;
  uint8_t* recv;
  if (rk == 0) recv = nullptr;
  else if (rk == 1 && send) recv = send, inPlace = true;
  else if (rk == 2 && send) recv = send + p.ConsumeIntegralInRange<int>(1, 64), overlap = true;
  else recv = b.data() + (rk < 5 ? 0 : p.ConsumeIntegralInRange<int>(1, 15));
  const size_t room = kCap - 80;
  // Sometimes a count whose bytes overflow (only elements of 2 bytes and more can).
  const size_t count = es > 1 && p.ConsumeIntegralInRange<int>(0, 5) == 0
                           ? SIZE_MAX / es + p.ConsumeIntegralInRange<size_t>(1, 9)
                           : p.ConsumeIntegralInRange<size_t>(0, room / es);
  const bool huge = count > room / es;
  const bool nulls = count > 0 && (!send || !recv);
  const int root = p.ConsumeIntegralInRange<int>(-1, 1);
  bool builtin = false, ours = false;
  const std::vector<uint8_t> aBefore(a), bBefore(b);
  const bool grouped = st.depth > 0;
  const bool bad = !live || !goodType || huge || nulls;
  // Any alignment, and partly overlapping buffers (the result is the input's as it was), work.
  const bool valid = live && goodType && !huge && !nulls;
  const bool fp8 = t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
  ncclResult_t r = ncclSuccess;
  const char* name = "?";
  bool copies = false;
  switch (what) {
    case 0: case 1: case 2: {
      const int op = pickOp(p, st, t, builtin, ours);
      const bool known = builtin || ours;
      if (what == 0) {
        name = "ncclAllReduce";
        r = sh::allReduce(c, send, recv, count, ncclDataType_t(t), op, nullptr);
      } else if (what == 1) {
        name = "ncclReduceScatter";
        r = sh::reduceScatter(c, send, recv, count, ncclDataType_t(t), op, nullptr);
      } else {
        name = "ncclReduce";
        r = sh::reduce(c, send, recv, count, ncclDataType_t(t), op, root, nullptr);
      }
      const bool rootOk = what != 2 || root == 0;
      expect(r, !grouped && (bad || !known || !rootOk), name,
             !grouped && valid && builtin && !fp8 && rootOk);
      copies = builtin;
      break;
    }
    case 3:
      name = "ncclBroadcast";
      r = sh::broadcast(c, send, recv, count, ncclDataType_t(t), root, nullptr, name);
      expect(r, !grouped && (bad || root != 0), name, !grouped && valid && root == 0);
      copies = true;
      break;
    case 4: case 5:
      name = what == 4 ? "ncclAllGather" : "ncclAlltoAll";
      r = (what == 4 ? sh::allGather : sh::allToAll)(c, send, recv, count, ncclDataType_t(t), nullptr);
      expect(r, !grouped && bad, name, !grouped && valid);
      copies = true;
      break;
    case 6: case 7:
      name = what == 6 ? "ncclGather" : "ncclScatter";
      r = (what == 6 ? sh::gather : sh::scatter)(c, send, recv, count, ncclDataType_t(t), root, nullptr);
      expect(r, !grouped && (bad || root != 0), name);
      copies = true;
      break;
    case 8: {
      const int peer = p.ConsumeIntegralInRange<int>(-1, 1);
      const bool isSend = p.ConsumeBool();
      name = isSend ? "ncclSend" : "ncclRecv";
      r = isSend ? sh::send(c, send, count, ncclDataType_t(t), peer, nullptr)
                 : sh::recv(c, recv, count, ncclDataType_t(t), peer, nullptr);
      expect(r, !goodType || peer != 0 || (!grouped && !live && count > 0), name);
      break;
    }
    case 9:
      if (st.depth < 4) {
        sh::groupStart();
        ++st.depth;
      }
      return;
    case 10: {
      const bool simulate = p.ConsumeBool();
      name = "ncclGroupEnd";
      r = sh::groupEnd(simulate);
      expect(r, st.depth == 0, name);
      if (st.depth > 0) --st.depth;
      return;  // the group's calls wrote what they wrote
    }
    case 11: {
      // The scalar: fuzzed bytes of the type, at any alignment, host or device residence.
      uint8_t scalar[24];
      const std::vector<uint8_t> bytes = p.ConsumeBytes<uint8_t>(8);
      std::memset(scalar, 0, sizeof(scalar));
      const size_t off = p.ConsumeIntegralInRange<size_t>(0, 15);
      if (!bytes.empty()) std::memcpy(scalar + off, bytes.data(), bytes.size());
      const bool nullOut = p.ConsumeIntegralInRange<int>(0, 7) == 0;
      const auto residence = ncclScalarResidence_t(p.ConsumeIntegralInRange<int>(0, 2));
      ncclRedOp_t op = 0;
      name = "ncclRedOpCreatePreMulSum";
      r = sh::redOpCreatePreMulSum(c, nullOut ? nullptr : &op, scalar + off, ncclDataType_t(t),
                                   residence);
      expect(r, nullOut || residence != ncclScalarHostImmediate || !goodType || fp8 ||
                    !live, name);
      if (r == ncclSuccess) {
        if (comm == gLive && st.premul.size() < 8 && !grouped) {
          st.premul.push_back(op);
          st.premulType.push_back(t);
        } else {
          (void)sh::redOpDestroy(c, op);
        }
      }
      return;
    }
    case 12: {
      const int op = pickOp(p, st, t, builtin, ours);
      name = "ncclRedOpDestroy";
      r = sh::redOpDestroy(c, op);
      expect(r, builtin, name);
      if (r == ncclSuccess)
        for (size_t i = 0; i < st.premul.size(); ++i)
          if (st.premul[i] == op) {
            st.premul.erase(st.premul.begin() + long(i));
            st.premulType.erase(st.premulType.begin() + long(i));
          }
      return;
    }
    case 13: {
      void* handle = nullptr;
      const bool nullOut = p.ConsumeBool();
      name = "ncclCommRegister";
      r = sh::registerBuffer(c, send, count * es, nullOut ? nullptr : &handle);
      expect(r, nullOut || !send || count == 0 || !live, name);
      if (r == ncclSuccess) expect(sh::deregisterBuffer(c, handle), false, "ncclCommDeregister", true);
      expect(sh::deregisterBuffer(c, send), true, "ncclCommDeregister");
      return;
    }
    default: {
      int v = -1;
      ncclResult_t err = ncclSuccess;
      const bool nullOut = p.ConsumeBool();
      switch (p.ConsumeIntegralInRange<int>(0, 3)) {
        case 0: name = "ncclCommCount"; r = sh::count(c, nullOut ? nullptr : &v); break;
        case 1: name = "ncclCommUserRank"; r = sh::userRank(c, nullOut ? nullptr : &v); break;
        case 2: name = "ncclCommCuDevice"; r = sh::cuDevice(c, nullOut ? nullptr : &v); break;
        default:
          name = "ncclCommGetAsyncError";
          r = sh::asyncError(c, nullOut ? nullptr : &err);
          if (r == ncclSuccess && live) check(err == ncclSuccess, "a healthy comm reports", lastError());
          break;
      }
      expect(r, nullOut, name, !nullOut);
      return;
    }
  }
  if (grouped) return;  // the group runs (and writes) at its end
  if (r != ncclSuccess) {
    check(b == bBefore, "a failed call wrote to its buffers:", name);
    if (!inPlace && !overlap) check(a == aBefore, "a failed call wrote:", name);
  } else if (copies && live && valid && count > 0 && what <= 5) {
    check(fuzzutil::sameElements(typeOf(t), recv, aBefore.data() + (send - a.data()), count),
          "wrong result from", name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzzutil::setQuietEnv();
  setenv("CCLX_TIMEOUT", "20", 1);
  reloadConfig();
  auto store = TcpStore::create("127.0.0.1", 0, true, "fuzz-dropin", std::chrono::seconds(20));
  gLive = makeComm(store, 1);
  gFinalized = makeComm(store, 2);
  check(sh::finalize(*sh::find(gFinalized)) == ncclSuccess, "ncclCommFinalize", lastError());
  gDestroyed = makeComm(store, 3);
  check(sh::destroy(*sh::find(gDestroyed)) == ncclSuccess, "ncclCommDestroy", lastError());
  gAborted = makeComm(store, 4);
  check(sh::abort(*sh::find(gAborted)) == ncclSuccess, "ncclCommAbort", lastError());
  static std::shared_ptr<TcpStore> keep = store;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  // A unique id from another process: its rendezvous stamp must decode or be refused, never
  // read outside the id.
  if (p.ConsumeBool()) {
    ncclUniqueId id;
    const std::vector<uint8_t> bytes = p.ConsumeBytes<uint8_t>(sizeof(id.internal));
    std::memset(id.internal, 0, sizeof(id.internal));
    if (!bytes.empty()) std::memcpy(id.internal, bytes.data(), bytes.size());
    sh::Stamp s;
    if (sh::readStamp(id, s)) check(s.port != 0, "a stamp without a port accepted");
  }
  std::vector<uint8_t> a = fuzzutil::fill(p.ConsumeIntegral<uint32_t>()), b(kCap, 0xc3);
  State st;
  for (int i = 0; i < 16 && p.remaining_bytes() > 0; ++i) oneCall(p, a, b, st);
  while (st.depth > 0) {  // the buffers of recorded calls live until here
    (void)sh::groupEnd(false);
    --st.depth;
  }
  for (int op : st.premul) (void)sh::redOpDestroy(*sh::find(gLive), op);
  return 0;
}
