// The CPU twin of the NCCL drop-in's shared-GPU mode (tests/cpp/dropin/test_dropin_shared*.cc): NCCL's
// API as the drop-in's entry points dispatch it for a shared comm (their shared branch), with a
// fake shared-GPU decision: every rank reports the same "GPU" (gGpu), so every comm is a shared
// one over cclx's host transport. Plus the helpers both test files use.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/settings/config.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"
#include "nccl_dropin/errors.h"
#include "nccl_dropin/shared/shared.h"
#include "store/bootstrap.h"

namespace twin {

using namespace cclx;
using namespace hosttest;
namespace sh = cclx::dropin::shared;
using cclx::dropin::ncclComm_t;
using cclx::dropin::ncclDataType_t;
using cclx::dropin::ncclRedOp_t;
using cclx::dropin::ncclResult_t;
using cclx::dropin::ncclUniqueId;
using namespace cclx::nccl;  // NCCL's enum values

// ---- the shim: NCCL's functions as the drop-in's entry points serve a shared handle ----

inline std::string gGpu;  // this rank's "GPU" for the decision (the same on every rank: all share)

inline ncclResult_t GetUniqueId(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  sh::stampId(id);
  return ncclSuccess;
}
// Returns ncclInvalidUsage when the decision is "not shared" (the twin has no NCCL to go to).
inline ncclResult_t InitRank(ncclComm_t* comm, int n, const ncclUniqueId& id, int rank) {
  ncclResult_t r = ncclSuccess;
  if (sh::initRank(comm, n, id, rank, nullptr, sh::Local{DeviceSpec::cpu(), gGpu},
                   "ncclCommInitRank", r))
    return r;
  return ncclInvalidUsage;
}
#define SHARED(comm) (*sh::find(comm))
inline ncclResult_t AllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                       ncclComm_t c) {
  return sh::allReduce(SHARED(c), s, r, n, t, op, nullptr);
}
inline ncclResult_t Reduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                    ncclComm_t c) {
  return sh::reduce(SHARED(c), s, r, n, t, op, root, nullptr);
}
inline ncclResult_t Broadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c) {
  return sh::broadcast(SHARED(c), s, r, n, t, root, nullptr, "ncclBroadcast");
}
inline ncclResult_t AllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c) {
  return sh::allGather(SHARED(c), s, r, n, t, nullptr);
}
inline ncclResult_t ReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c) {
  return sh::reduceScatter(SHARED(c), s, r, n, t, op, nullptr);
}
inline ncclResult_t AlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c) {
  return sh::allToAll(SHARED(c), s, r, n, t, nullptr);
}
inline ncclResult_t Send(const void* b, size_t n, ncclDataType_t t, int peer, ncclComm_t c) {
  return sh::send(SHARED(c), b, n, t, peer, nullptr);
}
inline ncclResult_t Recv(void* b, size_t n, ncclDataType_t t, int peer, ncclComm_t c) {
  return sh::recv(SHARED(c), b, n, t, peer, nullptr);
}
inline ncclResult_t GroupStart() {
  sh::groupStart();
  return ncclSuccess;
}
ncclResult_t GroupEnd() { return sh::groupEnd(false); }
inline const char* LastError() {
  const char* m = cclx::dropin::lastError();
  return m ? m : "";
}

// ---- helpers ----

using Buf = std::vector<char>;
inline Buf poisoned(size_t bytes) { return Buf(bytes, char(kPoison)); }

inline ncclDataType_t ncclType(DataType t) {
  switch (t) {
    case DataType::i8: return ncclInt8;
    case DataType::u8: return ncclUint8;
    case DataType::i32: return ncclInt32;
    case DataType::u32: return ncclUint32;
    case DataType::i64: return ncclInt64;
    case DataType::u64: return ncclUint64;
    case DataType::f16: return ncclFloat16;
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::bf16: return ncclBfloat16;
    case DataType::fp8_e4m3: return ncclFloat8e4m3;
    default: return ncclFloat8e5m2;
  }
}

// The types torch's NCCL backend passes (bool travels as uint8) and a few more.
inline const std::vector<DataType> kTypes = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                                      DataType::i8,  DataType::u8,  DataType::i32, DataType::i64};

// A comm of every rank: rank 0 makes the id, the test store carries it to the others.
inline ncclComm_t makeComm(int rank, int size, Store& store, const std::string& key) {
  ncclUniqueId id{};
  if (rank == 0) {
    MP_CHECK(GetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    store.set(key, std::string(id.internal, sizeof(id.internal)));
  } else {
    const std::string v = store.get(key, std::chrono::seconds(60));
    std::memcpy(id.internal, v.data(), sizeof(id.internal));
  }
  ncclComm_t c = nullptr;
  const ncclResult_t r = InitRank(&c, size, id, rank);
  MP_CHECK(r == ncclSuccess && c, "ncclCommInitRank: %d %s", int(r), LastError());
  MP_CHECK(sh::isShared(c), "the handle is not a shared comm's");
  return c;
}

// The last step of every rank: rank 0's process serves the drop-in's store (and the harness
// ends ranks with _exit, which skips the server's lingering at exit), so it leaves last.
inline void finishRank(int rank, int size, Store& store) {
  store.set("finished/" + std::to_string(rank), "1");
  if (rank != 0) return;
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("finished/" + std::to_string(r));
  store.wait(keys, std::chrono::seconds(120));
}

inline void setUpRank(const char* timeoutSeconds = "20") {
  setenv("CCLX_SHM_CHUNK_BYTES", "4096", 1);  // odd counts span several staging chunks
  setenv("CCLX_TIMEOUT", timeoutSeconds, 1);
  setenv("CCLX_ABORT_ON_ERROR", "0", 1);
  reloadConfig();
  gGpu = hostIdentity() + "|twin-gpu";
}

// A PreMulSum op for type t with factor 0.75 (floats) or 3 (integers), the scalar in type t.
inline ncclRedOp_t preMul(ncclComm_t c, DataType t, double& factor) {
  factor = isFloat(t) ? 0.75 : 3.0;
  uint64_t scalar = 0;
  switch (t) {
    case DataType::f32: { float f = 0.75f; std::memcpy(&scalar, &f, 4); break; }
    case DataType::f64: { double d = 0.75; std::memcpy(&scalar, &d, 8); break; }
    case DataType::f16: scalar = encodeF16Exact(0.75); break;
    case DataType::bf16: scalar = 0x3f40; break;  // 0.75
    default: scalar = 3; break;
  }
  ncclRedOp_t op = 0;
  const ncclResult_t r =
      sh::redOpCreatePreMulSum(SHARED(c), &op, &scalar, ncclType(t), ncclScalarHostImmediate);
  MP_CHECK(r == ncclSuccess, "ncclRedOpCreatePreMulSum %s: %s", dtypeName(t), LastError());
  return op;
}

struct OpCase {
  ncclRedOp_t nccl;
  ReduceOp ref;
  bool made;  // a PreMulSum handle (destroyed after use)
};
inline std::vector<OpCase> opsOf(ncclComm_t c, DataType t) {
  double f = 0;
  std::vector<OpCase> v = {{ncclSum, RedOpKind::SUM, false},     {ncclProd, RedOpKind::PRODUCT, false},
                           {ncclMax, RedOpKind::MAX, false},     {ncclMin, RedOpKind::MIN, false},
                           {ncclAvg, RedOpKind::AVG, false}};
  const ncclRedOp_t pm = preMul(c, t, f);
  v.push_back({pm, ReduceOp::premulSum(f), true});
  return v;
}

}  // namespace twin
