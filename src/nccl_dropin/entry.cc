// NCCL functions that take a comm and that the shared-GPU mode serves (shared/shared.h), besides
// those intercept.cc defines: for a shared handle they run on its cclx comm; for any other comm
// they are the real NCCL's, unchanged. Also the rank's GPU as the shared mode's decision compares
// it, and ncclGetUniqueId, which adds the shared mode's rendezvous to NCCL's id.
#include "nccl_dropin/entry.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "gpu/runtime.h"
#include "nccl_dropin/errors.h"
#include "nccl_dropin/real.h"
#include "store/bootstrap.h"

namespace cclx {
namespace dropin {

shared::Local localRank() {
  shared::Local l;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    dev = -1;
  }
  char bus[64] = {0};
  if (dev < 0 || cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, dev) != cudaSuccess) {
    // No device to compare: a key of this process alone (no GPU, so nothing shares one; NCCL
    // then reports what it reports).
    (void)cudaGetLastError();
    std::snprintf(bus, sizeof(bus), "no-device-pid-%d", int(::getpid()));
  }
  l.device = DeviceSpec::cuda(dev < 0 ? 0 : dev);
  try {
    l.gpu = hostIdentity() + "|" + bus;
  } catch (const Error&) {
    l.gpu = std::string("unknown-host|") + bus;
  }
  return l;
}

}  // namespace dropin
}  // namespace cclx

using namespace cclx;
using namespace cclx::dropin;

#define CCLX_REAL(name, args)           \
  do {                                  \
    auto fn = real().name;              \
    return fn ? fn args : missing(#name); \
  } while (0)

// NCCL's id, plus the shared mode's rendezvous; with no NCCL at all, an id of the shared mode only.
CCLX_DROPIN_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  clearError();
  if (!id) return fail(nccl::ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
  auto fn = real().ncclGetUniqueId;
  if (fn) {
    const ncclResult_t r = fn(id);
    if (r != nccl::ncclSuccess) return r;
  } else {
    std::memset(id->internal, 0, sizeof(id->internal));
  }
  shared::stampId(id);
  return nccl::ncclSuccess;
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  clearError();
  if (auto s = shared::find(comm)) return shared::count(*s, count);
  CCLX_REAL(ncclCommCount, (comm, count));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  clearError();
  if (auto s = shared::find(comm)) return shared::cuDevice(*s, device);
  CCLX_REAL(ncclCommCuDevice, (comm, device));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  clearError();
  if (auto s = shared::find(comm)) return shared::userRank(*s, rank);
  CCLX_REAL(ncclCommUserRank, (comm, rank));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                                 void** handle) {
  clearError();
  if (auto s = shared::find(comm)) return shared::registerBuffer(*s, buff, size, handle);
  CCLX_REAL(ncclCommRegister, (comm, buff, size, handle));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  clearError();
  if (auto s = shared::find(comm)) return shared::deregisterBuffer(*s, handle);
  CCLX_REAL(ncclCommDeregister, (comm, handle));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                         ncclDataType_t t,
                                                         ncclScalarResidence_t residence,
                                                         ncclComm_t comm) {
  clearError();
  if (auto s = shared::find(comm)) return shared::redOpCreatePreMulSum(*s, op, scalar, t, residence);
  CCLX_REAL(ncclRedOpCreatePreMulSum, (op, scalar, t, residence, comm));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  clearError();
  if (auto s = shared::find(comm)) return shared::redOpDestroy(*s, op);
  CCLX_REAL(ncclRedOpDestroy, (op, comm));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count,
                                           ncclDataType_t t, ncclRedOp_t op, int root,
                                           ncclComm_t comm, ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::reduce(*s, send, recv, count, t, op, root, stream);
  CCLX_REAL(ncclReduce, (send, recv, count, t, op, root, comm, stream));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root,
                                          ncclComm_t comm, ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm))
    return shared::broadcast(*s, buff, buff, count, t, root, stream, "ncclBcast");
  CCLX_REAL(ncclBcast, (buff, count, t, root, comm, stream));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count,
                                              ncclDataType_t t, int root, ncclComm_t comm,
                                              ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm))
    return shared::broadcast(*s, send, recv, count, t, root, stream, "ncclBroadcast");
  CCLX_REAL(ncclBroadcast, (send, recv, count, t, root, comm, stream));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclGather(const void* send, void* recv, size_t count,
                                           ncclDataType_t t, int root, ncclComm_t comm,
                                           ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::gather(*s, send, recv, count, t, root, stream);
  CCLX_REAL(ncclGather, (send, recv, count, t, root, comm, stream));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclScatter(const void* send, void* recv, size_t count,
                                            ncclDataType_t t, int root, ncclComm_t comm,
                                            ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::scatter(*s, send, recv, count, t, root, stream);
  CCLX_REAL(ncclScatter, (send, recv, count, t, root, comm, stream));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t,
                                         int peer, ncclComm_t comm, ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::send(*s, send, count, t, peer, stream);
  CCLX_REAL(ncclSend, (send, count, t, peer, comm, stream));
}

CCLX_DROPIN_EXPORT ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer,
                                         ncclComm_t comm, ncclStream_t stream) {
  clearError();
  if (auto s = shared::find(comm)) return shared::recv(*s, recv, count, t, peer, stream);
  CCLX_REAL(ncclRecv, (recv, count, t, peer, comm, stream));
}

// ---- NCCL's profiling names of the functions above ----

#define CCLX_ALIAS_E(name, params, args) CCLX_DROPIN_ALIAS(ncclResult_t, name, params)
#define CCLX_SKIP(...)
CCLX_NCCL_RESULT_FUNCTIONS(CCLX_SKIP, CCLX_SKIP, CCLX_ALIAS_E)
#undef CCLX_ALIAS_E
#undef CCLX_SKIP
