// all_to_all_v_device through NCCL (colls.h): for comms without peer memory (ranks on several
// hosts, peer memory off or its staging failed) and backend "nccl". The one place the collective
// synchronizes with the host: NCCL needs the counts on the host.
//
// Contract. On the caller's stream, in order: this rank's record (send and receive split sizes,
// copied device to device, then the two capacities) goes to every rank through one NCCL
// all-gather of int64 words, the gathered records are copied to host memory, and the host waits
// for that copy (so for everything queued on the stream before it) up to the call's timeout.
// Every rank then checks every record in the same order (core/comm/device_rows.h), so all reach
// the same verdict: a violation poisons the output (recvCap rows, on the stream) and throws
// cclxInvalidUsage with the same message on every rank; the comm stays usable. Otherwise the
// call is lowered to all-to-all-v in elements (rows x rowElems) on NCCL's grouped send/recv.
// A wait that passes the timeout throws cclxTimeout (the gather may still be pending: the caller
// fails the comm). Not legal inside CUDA-graph capture (the backend refuses that before).
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/comm/device_rows.h"
#include "gpu/nccl/colls.h"
#include "gpu/resources.h"
#include "gpu/runtime.h"

namespace cclx {

void ncclAllToAllVDevice(const CollArgs& a, nccl::ncclComm_t comm, int rank, int size,
                         nccl::ncclStream_t stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const size_t len = deviceRowsRecordLen(size), n = size_t(size);
  gpures::StreamTemp tmp((len + n * len) * sizeof(int64_t), s);
  auto* mine = static_cast<int64_t*>(tmp.get());
  int64_t* all = mine + len;
  const int64_t caps[2] = {int64_t(a.rows.sendCap), int64_t(a.rows.recvCap)};
  CCLX_CUDA_CHECK(cudaMemcpyAsync(mine, a.rows.send, n * sizeof(int64_t), cudaMemcpyDeviceToDevice, s));
  CCLX_CUDA_CHECK(cudaMemcpyAsync(mine + n, a.rows.recv, n * sizeof(int64_t), cudaMemcpyDeviceToDevice, s));
  CCLX_CUDA_CHECK(cudaMemcpyAsync(mine + 2 * n, caps, sizeof(caps), cudaMemcpyHostToDevice, s));
  CollArgs g;
  g.type = CollType::AllGather;
  g.send = mine;
  g.recv = all;
  g.count = len;
  g.dtype = DataType::i64;
  g.opts = a.opts;
  ncclRunCollective(g, comm, rank, size, stream);
  std::vector<int64_t> host(n * len);
  CCLX_CUDA_CHECK(cudaMemcpyAsync(host.data(), all, host.size() * sizeof(int64_t),
                                  cudaMemcpyDeviceToHost, s));
  tmp.free();
  if (!gpurt::waitStream(s, gpurt::deadlineAfter(a.opts.timeout)))
    CCLX_THROW(cclxTimeout, "rank %d: all_to_all_v_device through NCCL: the split sizes of every "
               "rank did not arrive within %lld ms", rank, (long long)a.opts.timeout.count());
  const std::string err = deviceRowsError(host.data(), size);
  const size_t rowBytes = a.rows.rowElems * dtypeSize(a.dtype);
  if (!err.empty()) {
    if (a.rows.recvCap) CCLX_CUDA_CHECK(cudaMemsetAsync(a.recv, 0xFF, a.rows.recvCap * rowBytes, s));
    CCLX_THROW(cclxInvalidUsage, "%s", err.c_str());
  }
  CollArgs v = a;
  v.type = CollType::AllToAllV;
  v.count = 0;
  v.sendCounts.assign(n, 0);
  v.recvCounts.assign(n, 0);
  const int64_t* me = host.data() + size_t(rank) * len;
  for (size_t p = 0; p < n; ++p) {
    v.sendCounts[p] = size_t(me[p]) * a.rows.rowElems;
    v.recvCounts[p] = size_t(me[n + p]) * a.rows.rowElems;
  }
  ncclRunCollective(v, comm, rank, size, stream);
}

}  // namespace cclx
