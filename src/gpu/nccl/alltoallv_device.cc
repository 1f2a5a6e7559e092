// all_to_all_v_device through NCCL (colls.h): for comms without peer memory (ranks on several
// hosts, peer memory off or its staging failed) and backend "nccl". The one place the collective
// synchronizes with the host: NCCL needs the counts on the host.
//
// Contract. On the caller's stream, in order: this rank's record (send and receive split sizes,
// copied device to device, then the two capacities) goes to every rank through one NCCL
// all-gather of int64 words, the gathered records are copied into the caller's pinned host
// buffer, and a marker is recorded after that copy. `queued` (when given) is called then, so the
// caller can show the pending gather to its watchdog. The host then polls, never blocking in a
// runtime call: the marker (done: go on), the NCCL comm's asynchronous error (an error: throw
// cclxNcclError naming it), `stop` (raised: throw cclxAborted, the comm failed elsewhere) and the
// call's deadline (passed: throw cclxTimeout; the gather may still be pending, the caller fails
// the comm and aborts NCCL). Every rank then checks every record in the same order
// (core/comm/device_rows.h), so all reach the same verdict: a violation poisons the output
// (recvCap rows, on the stream) and throws cclxInvalidUsage with the same message on every rank;
// the comm stays usable. Otherwise the call is lowered to all-to-all-v in elements
// (rows x rowElems) on NCCL's grouped send/recv. No CUDA API here (stream_ops.h), so a CPU test
// drives it over a fake NCCL table. Not legal inside CUDA-graph capture (the backend refuses
// that before).
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "core/comm/device_rows.h"
#include "gpu/nccl/colls.h"
#include "gpu/nccl/stream_ops.h"
#include "gpu/nccl/table.h"

namespace cclx {

size_t ncclAllToAllVDeviceHostBytes(int size) {
  return (size_t(size) + 1) * deviceRowsRecordLen(size) * sizeof(int64_t);
}

namespace {

// Waits for `marker` (see the contract); frees it on every path.
void waitForRecords(void* marker, nccl::ncclComm_t comm, int rank, std::chrono::milliseconds timeout,
                    const std::atomic<bool>* stop) {
  struct Free {
    void* m;
    ~Free() { ncclstream::markFree(m); }
  } owner{marker};
  const NcclDeadline deadline = ncclDeadlineAfter(timeout);
  const NcclLib& lib = ncclLib();
  for (int polls = 0;; ++polls) {
    if (ncclstream::markDone(marker)) return;
    nccl::ncclResult_t st = nccl::ncclSuccess;
    if (lib.commGetAsyncError && lib.commGetAsyncError(comm, &st) == nccl::ncclSuccess &&
        st != nccl::ncclSuccess && st != nccl::ncclInProgress)
      ncclCheck(st, "ncclAllGather (all_to_all_v_device's split sizes)", comm);
    if (stop && stop->load(std::memory_order_acquire))
      CCLX_THROW(cclxAborted, "rank %d: all_to_all_v_device through NCCL: the comm failed while "
                 "this rank waited for the split sizes of every rank", rank);
    if (std::chrono::steady_clock::now() >= deadline)
      CCLX_THROW(cclxTimeout, "rank %d: all_to_all_v_device through NCCL: the split sizes of "
                 "every rank did not arrive within %lld ms", rank, (long long)timeout.count());
    if (polls >= 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

void ncclAllToAllVDevice(const CollArgs& a, nccl::ncclComm_t comm, int rank, int size,
                         nccl::ncclStream_t stream, int64_t* hostBuf,
                         const std::function<void()>& queued, const std::atomic<bool>* stop) {
  const size_t len = deviceRowsRecordLen(size), n = size_t(size);
  int64_t* host = hostBuf;              // the gathered records: n * len words
  int64_t* caps = hostBuf + n * len;    // this rank's capacities, the source of one copy
  caps[0] = int64_t(a.rows.sendCap);
  caps[1] = int64_t(a.rows.recvCap);
  void* tmp = ncclstream::allocTemp((len + n * len) * sizeof(int64_t), stream);
  auto* mine = static_cast<int64_t*>(tmp);
  int64_t* all = mine + len;
  void* marker = nullptr;
  try {
    ncclstream::copy(mine, a.rows.send, n * sizeof(int64_t), stream);
    ncclstream::copy(mine + n, a.rows.recv, n * sizeof(int64_t), stream);
    ncclstream::copyHost(mine + 2 * n, caps, 2 * sizeof(int64_t), stream);
    CollArgs g;
    g.type = CollType::AllGather;
    g.send = mine;
    g.recv = all;
    g.count = len;
    g.dtype = DataType::i64;
    g.opts = a.opts;
    ncclRunCollective(g, comm, rank, size, stream);
    ncclstream::copyHost(host, all, n * len * sizeof(int64_t), stream);
    marker = ncclstream::markRecord(stream);
  } catch (...) {
    ncclstream::freeTemp(tmp, stream);
    throw;
  }
  ncclstream::freeTemp(tmp, stream);
  if (queued) queued();
  waitForRecords(marker, comm, rank, a.opts.timeout, stop);
  const std::string err = deviceRowsError(host, size);
  if (!err.empty()) {
    if (a.rows.recvCap)
      ncclstream::poison(a.recv, a.rows.recvCap * a.rows.rowElems * dtypeSize(a.dtype), stream);
    CCLX_THROW(cclxInvalidUsage, "%s", err.c_str());
  }
  CollArgs v = a;
  v.type = CollType::AllToAllV;
  v.count = 0;
  v.sendCounts.assign(n, 0);
  v.recvCounts.assign(n, 0);
  const int64_t* me = host + size_t(rank) * len;
  for (size_t p = 0; p < n; ++p) {
    v.sendCounts[p] = size_t(me[p]) * a.rows.rowElems;
    v.recvCounts[p] = size_t(me[n + p]) * a.rows.rowElems;
  }
  ncclRunCollective(v, comm, rank, size, stream);
}

}  // namespace cclx
