// The NCCL comm of a GPU comm (see create.h).
#include "gpu/nccl/create.h"

#include <cstring>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "gpu/nccl/table.h"
#include "store/bootstrap.h"

namespace cclx {

nccl::ncclComm_t ncclCreateComm(Store& store, int rank, int size,
                                std::chrono::milliseconds timeout, const std::string& name) {
  const NcclLib& L = ncclLib();
  const std::string what = strFormat("NCCL setup of comm '%s'", name.c_str());
  store.set(strFormat("cclx_nccl_arrive/%d", rank), "1");
  std::vector<int> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all[size_t(r)] = r;
  storeWaitRanks(store, "cclx_nccl_arrive", all, timeout, what);
  nccl::ncclUniqueId uid;
  try {
    if (rank == 0) {
      ncclCheck(L.getUniqueId(&uid), "ncclGetUniqueId");
      store.set("cclx_nccl_uid/0", std::string(uid.internal, sizeof(uid.internal)));
    } else {
      storeWaitRanks(store, "cclx_nccl_uid", {0}, timeout, what + " (rank 0's unique id)");
      const std::string v = store.get("cclx_nccl_uid/0", timeout);
      CCLX_REQUIRE(v.size() == sizeof(uid.internal), cclxRemoteError,
                   "malformed NCCL unique id from rank 0 (%zu bytes)", v.size());
      std::memcpy(uid.internal, v.data(), sizeof(uid.internal));
    }
    nccl::ncclComm_t comm = nullptr;
    ncclCheck(L.commInitRank(&comm, size, uid, rank), "ncclCommInitRank");
    CCLX_INFO("NCCL %d comm of %d ranks created", L.version, size);
    return comm;
  } catch (const Error& e) {
    if (std::strncmp(e.what(), "rank ", 5) == 0) throw;  // already names its rank
    throw Error(e.code(), strFormat("rank %d: %s", rank, e.what()));
  }
}

}  // namespace cclx
